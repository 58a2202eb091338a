//! Maintenance: the fleet or single machines out of service.
//!
//! Two sources, and the effective maintenance is their union:
//! - `saltpeter_maintenance` in the configuration files (hot-reloaded with them);
//! - run-time settings from `saltpeterctl maintenance on|off|add|remove`, persisted as JSON
//!   under the `maintenance` key of db's `meta` table, loaded at start-up before anything
//!   fires (`lifecycle/boot.rs`), so they survive restarts.
//!
//! Global maintenance: no new run starts (a firing is recorded as skipped with reason
//! `maintenance`, `saltpeterctl run` is refused), running runs finish. A machine in
//! maintenance is left out of every run and recorded per target as `skipped_maintenance`.
//! Every change, from either source, is recorded as an event of kind `maintenance`.
//! Windows on a calendar (`windows.rs`) skip or defer slots and machines while open.
//!
//! [`Maintenance`] is the part: the run-time settings are private to it and change only
//! through its methods, which return what to do (`messages::Out`); the file settings are
//! handed in by whoever asks, since the configuration is not this part's.

pub(crate) mod windows;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::config::Maintenance as FileMaintenance;
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::messages::{DbResult, Message, Out, Then};
use crate::wire::admin::{
    AdminFailure, AdminResponse, MaintenanceChange, MaintenanceInfo, MaintenanceSource,
};
use crate::wire::db::{DbRequest, NewEvent, calls};
use crate::wire::records::Millis;

/// The `meta` key the run-time settings are stored under.
pub(crate) const META_KEY: &str = "maintenance";

/// Maintenance set at run time (`saltpeterctl maintenance`), as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Runtime {
    global: bool,
    machines: BTreeSet<String>,
}

/// The maintenance part: the run-time settings.
#[derive(Debug, Default)]
pub(crate) struct Maintenance {
    runtime: Runtime,
}

/// Who asks for a change, for its events.
pub(crate) struct Who<'a> {
    /// The API identity, or `None` for `saltpeterctl`.
    pub name: Option<&'a str>,
    /// The operator's uid on the admin socket.
    pub uid: Option<u32>,
}

impl Maintenance {
    /// Global maintenance is on (from the files or at run time): no new runs start.
    pub(crate) fn global(&self, file: &FileMaintenance) -> bool {
        file.global || self.runtime.global
    }

    /// `machine` is in maintenance (from the files or at run time).
    pub(crate) fn holds(&self, file: &FileMaintenance, machine: &str) -> bool {
        file.machines.contains(machine) || self.runtime.machines.contains(machine)
    }

    /// The effective maintenance, each entry with where it comes from.
    pub(crate) fn info(&self, file: &FileMaintenance, note: Option<String>) -> MaintenanceInfo {
        info(file, &self.runtime, note)
    }

    /// Restore the persisted run-time settings (the value of the `maintenance` meta key).
    pub(crate) fn restore(&mut self, stored: Option<String>) {
        let Some(text) = stored else {
            return;
        };
        match serde_json::from_str::<Runtime>(&text) {
            Ok(runtime) => {
                if runtime.global {
                    log::warn!("global maintenance is on (set at run time)");
                }
                if !runtime.machines.is_empty() {
                    log::info!(
                        "machines in maintenance (set at run time): {}",
                        runtime
                            .machines
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                self.runtime = runtime;
            }
            Err(e) => log::error!(
                "the stored run-time maintenance settings are unreadable ({e}): {text:?}; \
                 starting without them"
            ),
        }
    }

    /// A `saltpeterctl maintenance` request (admin call `call`) at `now`: change the
    /// run-time settings, persist them (the answer goes out once db has committed) and
    /// record the change as events.
    pub(crate) fn change(
        &mut self,
        file: &FileMaintenance,
        call: CallId,
        change: MaintenanceChange,
        who: Who,
        now: Millis,
    ) -> Out {
        let mut out = Out::new();
        let before = self.runtime.clone();
        let mut runtime = before.clone();
        let note = match &change {
            MaintenanceChange::Show => None,
            MaintenanceChange::GlobalOn => {
                runtime.global = true;
                (!before.global).then(|| {
                    "global maintenance on: no new runs start; running ones finish".to_string()
                })
            }
            MaintenanceChange::GlobalOff => {
                runtime.global = false;
                Some(if file.global {
                    "global maintenance stays on: `saltpeter_maintenance` in the configuration \
                     files turns it on"
                        .to_string()
                } else {
                    "global maintenance off".to_string()
                })
            }
            MaintenanceChange::Add(machine) => {
                runtime.machines.insert(machine.clone());
                Some(format!("{machine} is in maintenance"))
            }
            MaintenanceChange::Remove(machine) => {
                let removed = runtime.machines.remove(machine);
                Some(match (removed, file.machines.contains(machine)) {
                    (_, true) => format!(
                        "{machine} stays in maintenance: `saltpeter_maintenance` in the \
                         configuration files lists it"
                    ),
                    (true, false) => format!("{machine} is out of maintenance"),
                    (false, false) => format!("{machine} was not in maintenance"),
                })
            }
        };
        if runtime == before {
            out.answer(call, AdminResponse::Maintenance(self.info(file, note)));
            return out;
        }
        let value = match serde_json::to_string(&runtime) {
            Ok(v) => v,
            Err(e) => {
                let why = format!("could not encode the maintenance settings: {e}");
                out.answer(call, AdminResponse::Failure(AdminFailure::Internal(why)));
                return out;
            }
        };
        let effective_before = effective(file, &before);
        self.runtime = runtime;
        let effective_after = effective(file, &self.runtime);
        let by = who.name.unwrap_or("saltpeterctl");
        out.extend(changes(
            &effective_before,
            &effective_after,
            by,
            who.uid,
            now,
        ));
        out.db(
            DbRequest::SetMeta {
                key: META_KEY.to_string(),
                value,
            },
            Then::tell(move |result| Message::MaintenanceSaved { call, note, result }),
        );
        out
    }

    /// A reload changed `saltpeter_maintenance` from `old_file` to `file`: record what
    /// changed in effect.
    pub(crate) fn file_changed(
        &self,
        old_file: &FileMaintenance,
        file: &FileMaintenance,
        now: Millis,
    ) -> Out {
        let before = effective(old_file, &self.runtime);
        let after = effective(file, &self.runtime);
        changes(&before, &after, "the configuration files", None, now)
    }

    /// db saved the settings of the change asked by `call` (or could not): its answer.
    pub(crate) fn saved(
        &self,
        file: &FileMaintenance,
        call: CallId,
        note: Option<String>,
        result: DbResult,
    ) -> Out {
        let resp = match calls::SetMeta::take(result) {
            Ok(()) => AdminResponse::Maintenance(self.info(file, note)),
            Err(e) => AdminResponse::Failure(AdminFailure::Internal(format!(
                "the change is in effect, but could not be saved ({e}): it is lost at the \
                 next restart"
            ))),
        };
        let mut out = Out::new();
        out.answer(call, resp);
        out
    }
}

/// The effective maintenance of `file` and `runtime`, entry by entry.
fn info(file: &FileMaintenance, runtime: &Runtime, note: Option<String>) -> MaintenanceInfo {
    let sources = |in_file: bool, at_runtime: bool| {
        let mut s = Vec::new();
        if in_file {
            s.push(MaintenanceSource::File);
        }
        if at_runtime {
            s.push(MaintenanceSource::Runtime);
        }
        s
    };
    let all: BTreeSet<&String> = file.machines.iter().chain(&runtime.machines).collect();
    MaintenanceInfo {
        global: sources(file.global, runtime.global),
        machines: all
            .into_iter()
            .map(|m| {
                (
                    m.clone(),
                    sources(file.machines.contains(m), runtime.machines.contains(m)),
                )
            })
            .collect(),
        note,
    }
}

/// The union of the file and run-time settings.
fn effective(file: &FileMaintenance, runtime: &Runtime) -> FileMaintenance {
    FileMaintenance {
        global: file.global || runtime.global,
        machines: file.machines.union(&runtime.machines).cloned().collect(),
        windows: file.windows.clone(),
    }
}

/// One event per change of the effective maintenance, saying who changed it (logged as
/// warnings too).
fn changes(
    before: &FileMaintenance,
    after: &FileMaintenance,
    by: &str,
    uid: Option<u32>,
    at: Millis,
) -> Out {
    let mut events = Vec::new();
    if before.global != after.global {
        let state = if after.global { "on" } else { "off" };
        events.push((None, format!("global maintenance {state} (by {by})")));
    }
    for m in after.machines.difference(&before.machines) {
        events.push((Some(m.clone()), format!("{m} in maintenance (by {by})")));
    }
    for m in before.machines.difference(&after.machines) {
        events.push((Some(m.clone()), format!("{m} out of maintenance (by {by})")));
    }
    let mut out = Out::new();
    for (machine, message) in events {
        log::warn!("{message}");
        out.db(
            DbRequest::RecordEvent(NewEvent {
                at,
                kind: "maintenance".to_string(),
                job: None,
                run: None,
                machine,
                message,
                uid,
            }),
            Then::Write("a maintenance event"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_effective_maintenance_is_the_union_with_sources() {
        let file = FileMaintenance {
            global: false,
            machines: set(&["a", "b"]),
            windows: Vec::new(),
        };
        let runtime = Runtime {
            global: true,
            machines: set(&["b", "c"]),
        };
        let got = info(&file, &runtime, None);
        assert_eq!(got.global, [MaintenanceSource::Runtime]);
        assert_eq!(
            got.machines,
            [
                ("a".to_string(), vec![MaintenanceSource::File]),
                (
                    "b".to_string(),
                    vec![MaintenanceSource::File, MaintenanceSource::Runtime]
                ),
                ("c".to_string(), vec![MaintenanceSource::Runtime]),
            ]
        );
        let e = effective(&file, &runtime);
        assert!(e.global);
        assert_eq!(e.machines, set(&["a", "b", "c"]));
    }

    /// The db calls of `out`, by kind, and whether each is a write or told back.
    fn calls(out: &Out) -> Vec<(&'static str, bool)> {
        use crate::roles::main::messages::Cmd;
        out.cmds()
            .iter()
            .filter_map(|c| match c {
                Cmd::Db { req, then, .. } => Some((
                    match req {
                        DbRequest::RecordEvent(_) => "event",
                        DbRequest::SetMeta { .. } => "save",
                        _ => "other",
                    },
                    matches!(then, Then::Tell(_)),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_change_is_in_effect_at_once_recorded_and_answered_once_saved() {
        let file = FileMaintenance {
            global: false,
            machines: set(&["a"]),
            windows: Vec::new(),
        };
        let mut m = Maintenance::default();
        let who = || Who {
            name: None,
            uid: Some(7),
        };
        let out = m.change(&file, 1, MaintenanceChange::GlobalOn, who(), 1_000);
        assert!(m.global(&file));
        assert_eq!(calls(&out), [("event", false), ("save", true)]);
        // The same again changes nothing: answered at once, nothing stored.
        let again = m.change(&file, 2, MaintenanceChange::GlobalOn, who(), 2_000);
        assert!(matches!(
            again.cmds(),
            [crate::roles::main::messages::Cmd::Answer(2, _)]
        ));
        // A machine the files list stays in maintenance: no event, only the save.
        let out = m.change(&file, 3, MaintenanceChange::Add("b".into()), who(), 3_000);
        assert_eq!(calls(&out), [("event", false), ("save", true)]);
        assert!(m.holds(&file, "a") && m.holds(&file, "b") && !m.holds(&file, "c"));
        let out = m.change(
            &file,
            4,
            MaintenanceChange::Remove("a".into()),
            who(),
            4_000,
        );
        assert!(matches!(
            out.cmds(),
            [crate::roles::main::messages::Cmd::Answer(4, _)]
        ));
        assert!(m.holds(&file, "a"), "the files keep it in");
    }

    #[test]
    fn the_stored_form_round_trips() {
        let runtime = Runtime {
            global: true,
            machines: set(&["db01"]),
        };
        let text = serde_json::to_string(&runtime).unwrap_or_default();
        assert_eq!(text, r#"{"global":true,"machines":["db01"]}"#);
        let back: Runtime = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, runtime);
    }
}
