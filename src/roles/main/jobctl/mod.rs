//! Job control: pause, resume and skip jobs, and the slots that maintenance windows defer.
//!
//! Outline:
//! 1. `saltpeterctl pause JOB [--until T]`, `resume JOB`, `skip JOB [--next N]` (and the
//!    HTTP API) change the state (`request.rs`), which is persisted as JSON under the
//!    `jobctl` key of db's `meta` table (the answer goes out once db has committed) and
//!    loaded at start-up before anything fires (`lifecycle/boot.rs`), so it survives
//!    restarts. Each change is an audit event of kind `job_control` with the operator's
//!    uid.
//! 2. Every slot that is about to run asks `hold` first: a paused job's slot, or one of the
//!    next N slots to skip, is recorded as skipped with the reason; a slot inside a
//!    fleet-wide maintenance window is skipped (reason names the window) or deferred to
//!    the window's end, by the window's policy (`maintenance/windows.rs`).
//! 3. Deferred slots wait in `deferred` (one per job and window end; later slots of the
//!    same job inside the window are recorded as skipped, so a window never releases a
//!    burst). The schedule timer also wakes for the earliest deferral and pause end
//!    (`next_wake`); the loop's tick then takes the deferred slots due (`next_deferred`)
//!    and fires them, and ends expired pauses (`end_pauses`). Deferred slots are not
//!    persisted: a restart inside the window loses them (the slot is then neither recorded
//!    nor run, and the next slot fires as usual).
//!
//! [`JobCtl`] is the part: its state is private and changes only through its methods.
//! They take the time and what they need of the configuration as arguments and return
//! what to do (`messages::Out`): events, answers, and the db call that persists the state,
//! whose reply comes back as `Message::JobCtlSaved` (`saved`). Firing a slot is not this
//! part's: the loop (`shell/firing/`) asks `hold` and fires as it says.

mod request;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::Job;
use crate::config::windows::Window;
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::maintenance::windows::{self, SlotRule};
use crate::roles::main::messages::{DbResult, Event, Message, Out, Then};
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::run::rules::Hold;
use crate::wire::admin::{AdminFailure, AdminResponse, JobControlEntry, JobControlInfo};
use crate::wire::db::{DbRequest, calls};
use crate::wire::records::Millis;

/// The `meta` key the state is stored under.
pub(crate) const META_KEY: &str = "jobctl";

/// A pause of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pause {
    /// The operator's uid (`None`: over the HTTP API).
    by: Option<u32>,
    at: Millis,
    until: Option<Millis>,
}

/// One job's control.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Control {
    paused: Option<Pause>,
    skip_next: u32,
    /// Who asked for the skips.
    skip_by: Option<u32>,
}

/// What is persisted: per job, its control (jobs with nothing set are absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct JobCtlState {
    jobs: BTreeMap<String, Control>,
}

/// A slot deferred to a window's end, ordered by when it runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Deferral {
    /// When it runs: the window's end.
    at: DateTime<Utc>,
    job: String,
    slot: DateTime<Utc>,
    window: String,
}

/// Job control and deferred slots, kept by main.
#[derive(Debug, Default)]
pub(crate) struct JobCtl {
    state: JobCtlState,
    /// Slots deferred to a window's end.
    deferred: BTreeSet<Deferral>,
}

fn who(uid: Option<u32>) -> String {
    match uid {
        Some(uid) => format!("uid {uid}"),
        None => "the HTTP API".to_string(),
    }
}

fn rfc3339(ms: Millis) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

impl JobCtl {
    /// `job`'s pause, while it lasts (a pause whose end has passed no longer counts).
    fn pause(&self, job: &str, now: DateTime<Utc>) -> Option<&Pause> {
        self.state
            .jobs
            .get(job)
            .and_then(|c| c.paused.as_ref())
            .filter(|p| p.until.is_none_or(|u| u > now.timestamp_millis()))
    }

    /// `job` is paused at `now`.
    pub(crate) fn paused(&self, job: &str, now: DateTime<Utc>) -> bool {
        self.pause(job, now).is_some()
    }

    /// Why `job` shows as paused, while it is.
    pub(crate) fn paused_note(&self, job: &str, now: DateTime<Utc>) -> Option<String> {
        self.pause(job, now).map(|p| match p.until {
            Some(u) => format!("paused by {} until {}", who(p.by), rfc3339(u)),
            None => format!("paused by {}", who(p.by)),
        })
    }

    /// The earliest instant the loop must wake for: a deferred slot or a pause's end.
    pub(crate) fn next_wake(&self) -> Option<DateTime<Utc>> {
        let deferral = self.deferred.first().map(|d| d.at);
        let pause_end = self
            .state
            .jobs
            .values()
            .filter_map(|c| c.paused.as_ref()?.until)
            .min()
            .and_then(DateTime::from_timestamp_millis);
        deferral.into_iter().chain(pause_end).min()
    }

    fn info(&self, note: Option<String>) -> JobControlInfo {
        JobControlInfo {
            jobs: self
                .state
                .jobs
                .iter()
                .map(|(job, c)| JobControlEntry {
                    job: job.clone(),
                    paused: c.paused.is_some(),
                    paused_by: c.paused.as_ref().and_then(|p| p.by),
                    paused_at: c.paused.as_ref().map(|p| p.at),
                    until: c.paused.as_ref().and_then(|p| p.until),
                    skip_next: c.skip_next,
                })
                .collect(),
            note,
        }
    }

    /// Restore the persisted state (the value of the `jobctl` meta key).
    pub(crate) fn restore(&mut self, stored: Option<String>) {
        let Some(text) = stored else {
            return;
        };
        match serde_json::from_str::<JobCtlState>(&text) {
            Ok(state) => {
                for (job, c) in &state.jobs {
                    if let Some(p) = &c.paused {
                        log::warn!(
                            "{job} is paused (by {}{})",
                            who(p.by),
                            p.until
                                .map(|u| format!(" until {}", rfc3339(u)))
                                .unwrap_or_default()
                        );
                    }
                    if c.skip_next > 0 {
                        log::info!("{job}: the next {} slot(s) are skipped", c.skip_next);
                    }
                }
                self.state = state;
            }
            Err(e) => log::error!(
                "the stored job control state is unreadable ({e}); starting without it \
                 (no job is paused)"
            ),
        }
    }

    /// What becomes of a slot of `job` due at `now`: skipped (paused, one of the next
    /// slots to skip, a `skip` window of `windows`), deferred to a `defer` window's end,
    /// or run. Takes one of the job's skips when it skips, unless `refire`: the slot was
    /// deferred and passed here once already.
    pub(crate) fn hold(
        &mut self,
        job: &Job,
        due: &Due,
        now: DateTime<Utc>,
        windows: &[Window],
        refire: bool,
    ) -> (Hold, Out) {
        let mut out = Out::new();
        if let Some(note) = self.paused_note(&job.name, now) {
            return (Hold::Skip(format!("paused: {note}")), out);
        }
        if !refire
            && let Some(c) = self.state.jobs.get_mut(&job.name)
            && c.skip_next > 0
        {
            c.skip_next -= 1;
            let left = c.skip_next;
            let by = who(c.skip_by);
            if left == 0 && c.paused.is_none() {
                self.state.jobs.remove(&job.name);
            }
            out.extend(self.save(None, None));
            let hold = Hold::Skip(format!(
                "skipped: skip requested by {by} ({left} more to skip)"
            ));
            return (hold, out);
        }
        // The window is judged at the slot, or now for a slot handled late (a deferred one).
        let at = due.slot.max(now);
        let hold = match windows::slot_rule(windows, &job.group, at) {
            SlotRule::Free => Hold::Run,
            SlotRule::Skip(w) => Hold::Skip(format!("maintenance window {}", w.name)),
            SlotRule::Defer(w, end) => {
                let name = w.name.clone();
                let waiting = self
                    .deferred
                    .iter()
                    .any(|d| d.job == job.name && d.at == end);
                if waiting {
                    let hold = Hold::Skip(format!(
                        "maintenance window {name}: an earlier slot already waits for its \
                         end at {}",
                        rfc3339(end.timestamp_millis())
                    ));
                    return (hold, out);
                }
                log::info!(
                    "{}: slot {} deferred to the end of maintenance window {name} at {end}",
                    job.name,
                    due.slot
                );
                out.event(Event {
                    kind: "run_deferred",
                    job: Some(job.name.clone()),
                    run: None,
                    machine: None,
                    message: format!(
                        "slot {}: deferred to the end of maintenance window {name} at {}",
                        due.slot,
                        rfc3339(end.timestamp_millis())
                    ),
                });
                self.deferred.insert(Deferral {
                    at: end,
                    job: job.name.clone(),
                    slot: due.slot,
                    window: name,
                });
                Hold::Deferred
            }
        };
        (hold, out)
    }

    /// The earliest deferred slot whose window has ended by `now`, taken out of the
    /// deferred ones: the loop fires it (asking `hold` again with `refire`).
    pub(crate) fn next_deferred(&mut self, now: DateTime<Utc>) -> Option<Due> {
        if self.deferred.first()?.at > now {
            return None;
        }
        let Deferral {
            job, slot, window, ..
        } = self.deferred.pop_first()?;
        log::info!("{job}: maintenance window {window} ended; running the deferred slot {slot}");
        Some(Due {
            job,
            slot,
            missed: false,
            early: false,
        })
    }

    /// End the pauses whose time has come by `now`: an event each (by nobody: the pause
    /// ended by itself), and the state saved.
    pub(crate) fn end_pauses(&mut self, now: DateTime<Utc>) -> Out {
        let mut out = Out::new();
        let expired: Vec<String> = self
            .state
            .jobs
            .iter()
            .filter(|(_, c)| {
                c.paused
                    .as_ref()
                    .and_then(|p| p.until)
                    .is_some_and(|u| u <= now.timestamp_millis())
            })
            .map(|(j, _)| j.clone())
            .collect();
        for job in &expired {
            if let Some(c) = self.state.jobs.get_mut(job) {
                c.paused = None;
                if c.skip_next == 0 {
                    self.state.jobs.remove(job);
                }
            }
            log::info!("{job}: the pause has ended; the job runs again");
            out.event(Event {
                kind: "job_control",
                job: Some(job.clone()),
                run: None,
                machine: None,
                message: "resumed: the pause ended (--until)".to_string(),
            });
        }
        if !expired.is_empty() {
            out.extend(self.save(None, None));
        }
        out
    }

    /// Persist the state; with `call`, answer it once db has committed.
    fn save(&self, call: Option<CallId>, note: Option<String>) -> Out {
        let mut out = Out::new();
        let value = match serde_json::to_string(&self.state) {
            Ok(v) => v,
            Err(e) => {
                log::error!("could not encode the job control state: {e}");
                return out;
            }
        };
        out.db(
            DbRequest::SetMeta {
                key: META_KEY.to_string(),
                value,
            },
            Then::tell(move |result| Message::JobCtlSaved { call, note, result }),
        );
        out
    }

    /// db stored the state (or could not): with `call`, its answer.
    pub(crate) fn saved(
        &self,
        call: Option<CallId>,
        note: Option<String>,
        result: DbResult,
    ) -> Out {
        let mut out = Out::new();
        let stored = calls::SetMeta::take(result);
        let Some(call) = call else {
            if let Err(e) = stored {
                log::error!("could not save the job control state: {e}");
            }
            return out;
        };
        let resp = match stored {
            Ok(_) => AdminResponse::JobControl(self.info(note)),
            Err(e) => AdminResponse::Failure(AdminFailure::Internal(format!(
                "the change is in effect, but could not be saved ({e}): it is lost at the \
                 next restart"
            ))),
        };
        out.answer(call, resp);
        out
    }

    /// `schedule next --job`: `job`'s next firings among `slots` as they will happen at
    /// `now`, accounting for its pause, its skips and the fleet-wide maintenance `windows`
    /// (skipped slots left out, a deferred one moved to its window's end).
    pub(crate) fn account(
        &self,
        job: &Job,
        windows: &[Window],
        slots: Vec<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let pause = self.pause(&job.name, now);
        let mut skips = self.state.jobs.get(&job.name).map_or(0, |c| c.skip_next);
        let mut out: Vec<DateTime<Utc>> = Vec::with_capacity(slots.len());
        for slot in slots {
            let paused = pause.is_some_and(|p| p.until.is_none_or(|u| u > slot.timestamp_millis()));
            if paused {
                continue;
            }
            if skips > 0 {
                skips -= 1;
                continue;
            }
            match windows::slot_rule(windows, &job.group, slot) {
                SlotRule::Free => out.push(slot),
                SlotRule::Skip(_) => {}
                SlotRule::Defer(_, end) => {
                    if !out.contains(&end) {
                        out.push(end);
                    }
                }
            }
        }
        out
    }
}
