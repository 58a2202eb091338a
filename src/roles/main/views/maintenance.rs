//! Maintenance: the fleet or single machines out of service.
//!
//! Two sources, and the effective maintenance is their union:
//! - `saltpeter_maintenance` in the configuration files (hot-reloaded with them);
//! - run-time settings from `saltpeterctl maintenance on|off|add|remove`, persisted as JSON
//!   under the `maintenance` key of db's `meta` table, loaded at start-up before anything
//!   fires (`boot.rs`), so they survive restarts.
//!
//! Global maintenance: no new run starts (a firing is recorded as skipped with reason
//! `maintenance`, `saltpeterctl run` is refused), running runs finish. A machine in
//! maintenance is left out of every run and recorded per target as `skipped_maintenance`.
//! Every change, from either source, is recorded as an event of kind `maintenance`.
//!
//! The settings live here next to the `Maintenance` request that changes them; the rest
//! of main asks `Main::global_maintenance` and `Main::in_maintenance`.

use crate::roles::main::state::schedule::RuntimeMaintenance;
use std::collections::BTreeSet;

use crate::config::Maintenance;
use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::state::{DbWait, Main};
use crate::roles::main::views::answer::{failure, respond};
use crate::wire::admin::{
    AdminFailure, AdminResponse, MaintenanceChange, MaintenanceInfo, MaintenanceSource,
};
use crate::wire::db::{DbReply, DbRequest, NewEvent, calls};

/// The `meta` key the run-time settings are stored under.
pub(crate) const META_KEY: &str = "maintenance";

impl Main {
    /// Global maintenance is on (from the files or at run time): no new runs start.
    pub(crate) fn global_maintenance(&self) -> bool {
        self.config.maintenance.global || self.runtime_maintenance.global
    }

    /// `machine` is in maintenance (from the files or at run time).
    pub(crate) fn in_maintenance(&self, machine: &str) -> bool {
        self.config.maintenance.machines.contains(machine)
            || self.runtime_maintenance.machines.contains(machine)
    }

    /// The effective maintenance, each entry with where it comes from.
    pub(crate) fn maintenance_info(&self, note: Option<String>) -> MaintenanceInfo {
        info(&self.config.maintenance, &self.runtime_maintenance, note)
    }
}

/// The effective maintenance of `file` and `runtime`, entry by entry.
pub(crate) fn info(
    file: &Maintenance,
    runtime: &RuntimeMaintenance,
    note: Option<String>,
) -> MaintenanceInfo {
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

/// Restore the persisted run-time settings (the value of the `maintenance` meta key).
pub(crate) fn restore(core: &mut Main, stored: Option<String>) {
    let Some(text) = stored else {
        return;
    };
    match serde_json::from_str::<RuntimeMaintenance>(&text) {
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
            core.runtime_maintenance = runtime;
        }
        Err(e) => log::error!(
            "the stored run-time maintenance settings are unreadable ({e}): {text:?}; \
             starting without them"
        ),
    }
}

/// Apply a `saltpeterctl maintenance` request: change the run-time settings, persist them
/// (the answer goes out once db has committed) and record the change as an event.
pub(crate) fn change(core: &mut Main, call: CallId, change: MaintenanceChange) {
    let before = core.runtime_maintenance.clone();
    let file = &core.config.maintenance;
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
        let info = core.maintenance_info(note);
        return respond(core, call, AdminResponse::Maintenance(info));
    }
    let value = match serde_json::to_string(&runtime) {
        Ok(v) => v,
        Err(e) => {
            let why = format!("could not encode the maintenance settings: {e}");
            return failure(core, call, AdminFailure::Internal(why));
        }
    };
    let effective_before = effective(&core.config.maintenance, &before);
    core.runtime_maintenance = runtime;
    let effective_after = effective(&core.config.maintenance, &core.runtime_maintenance);
    let by = core.actor.name.clone();
    let by = by.as_deref().unwrap_or("saltpeterctl");
    record_changes(core, &effective_before, &effective_after, by);
    core.db_call(
        DbRequest::SetMeta {
            key: META_KEY.to_string(),
            value,
        },
        DbWait::then(move |core, _, result| saved(core, call, note, result)),
    );
}

/// db saved the run-time settings (or could not): the answer to `change`.
pub(crate) fn saved(
    core: &mut Main,
    call: CallId,
    note: Option<String>,
    result: Result<DbReply, CallError>,
) {
    let resp = match calls::SetMeta::take(result) {
        Ok(()) => AdminResponse::Maintenance(core.maintenance_info(note)),
        Err(e) => AdminResponse::Failure(AdminFailure::Internal(format!(
            "the change is in effect, but could not be saved ({e}): it is lost at the next \
             restart"
        ))),
    };
    respond(core, call, resp);
}

/// The union of the file and run-time settings.
pub(crate) fn effective(file: &Maintenance, runtime: &RuntimeMaintenance) -> Maintenance {
    Maintenance {
        global: file.global || runtime.global,
        machines: file.machines.union(&runtime.machines).cloned().collect(),
        windows: file.windows.clone(),
    }
}

/// A reload changed `saltpeter_maintenance`: record what changed in effect.
pub(crate) fn file_changed(core: &mut Main, old_file: &Maintenance) {
    let before = effective(old_file, &core.runtime_maintenance);
    let after = effective(&core.config.maintenance, &core.runtime_maintenance);
    record_changes(core, &before, &after, "the configuration files");
}

/// One event per change of the effective maintenance, saying who changed it.
fn record_changes(core: &mut Main, before: &Maintenance, after: &Maintenance, by: &str) {
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
    let at = chrono::Utc::now().timestamp_millis();
    for (machine, message) in events {
        log::warn!("{message}");
        core.db_call(
            DbRequest::RecordEvent(NewEvent {
                at,
                kind: "maintenance".to_string(),
                job: None,
                run: None,
                machine,
                message,
                // The operator, when an admin request caused it.
                uid: core.actor.uid,
            }),
            DbWait::write("a maintenance event"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_effective_maintenance_is_the_union_with_sources() {
        let file = Maintenance {
            global: false,
            machines: set(&["a", "b"]),
            windows: Vec::new(),
        };
        let runtime = RuntimeMaintenance {
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

    #[test]
    fn the_stored_form_round_trips() {
        let runtime = RuntimeMaintenance {
            global: true,
            machines: set(&["db01"]),
        };
        let text = serde_json::to_string(&runtime).unwrap_or_default();
        assert_eq!(text, r#"{"global":true,"machines":["db01"]}"#);
        let back: RuntimeMaintenance = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, runtime);
    }
}
