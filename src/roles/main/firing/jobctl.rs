//! Job control: pause, resume and skip jobs, and the slots that maintenance windows defer.
//!
//! Outline:
//! 1. `saltpeterctl pause JOB [--until T]`, `resume JOB`, `skip JOB [--next N]` (and the
//!    HTTP API) change `JobCtlState`, which is persisted as JSON under the `jobctl` key of
//!    db's `meta` table (the answer goes out once db has committed) and loaded at start-up
//!    before anything fires (`boot.rs`), so it survives restarts. Each change is an audit
//!    event of kind `job_control` with the operator's uid.
//! 2. Every slot that is about to run asks `hold` first: a paused job's slot, or one of the
//!    next N slots to skip, is recorded as skipped with the reason; a slot inside a
//!    fleet-wide maintenance window is skipped (reason names the window) or deferred to
//!    the window's end, by the window's policy.
//! 3. Deferred slots wait in `deferred` (one per job and window end; later slots of the
//!    same job inside the window are recorded as skipped, so a window never releases a
//!    burst). The schedule timer also wakes for the earliest deferral and pause end
//!    (`next_wake`); `tick` then fires the deferred slots and ends expired pauses. Deferred
//!    slots are not persisted: a restart inside the window loses them (the slot is then
//!    neither recorded nor run, and the next slot fires as usual).

use crate::roles::main::state::schedule::{Control, JobCtl, JobCtlState, Pause};

use chrono::{DateTime, Utc};

use crate::config::Job;
use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::maintenance::windows::{self, SlotRule};
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::run;
use crate::roles::main::state::{DbWait, Main};
use crate::wire::admin::{
    AdminFailure, AdminResponse, JobControl, JobControlEntry, JobControlInfo,
};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::link::HubReply;
use crate::wire::records::{Millis, Trigger};

/// The `meta` key the state is stored under.
pub(crate) const META_KEY: &str = "jobctl";

/// Most slots one `skip --next` may skip.
pub(crate) const MAX_SKIP: u32 = 10_000;

pub(crate) use crate::roles::main::rules::run_rules::Hold;

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
    /// `job` is paused (a pause whose end has passed no longer counts).
    pub(crate) fn paused(&self, job: &str, now: DateTime<Utc>) -> Option<&Pause> {
        self.state
            .jobs
            .get(job)
            .and_then(|c| c.paused.as_ref())
            .filter(|p| p.until.is_none_or(|u| u > now.timestamp_millis()))
    }

    /// Why `job` shows as paused, while it is.
    pub(crate) fn paused_note(&self, job: &str, now: DateTime<Utc>) -> Option<String> {
        self.paused(job, now).map(|p| match p.until {
            Some(u) => format!("paused by {} until {}", who(p.by), rfc3339(u)),
            None => format!("paused by {}", who(p.by)),
        })
    }

    /// The earliest instant the loop must wake for: a deferred slot or a pause's end.
    pub(crate) fn next_wake(&self) -> Option<DateTime<Utc>> {
        let deferral = self.deferred.first().map(|d| d.0);
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
}

/// Restore the persisted state (the value of the `jobctl` meta key).
pub(crate) fn restore(core: &mut Main, stored: Option<String>) {
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
            core.jobctl.state = state;
        }
        Err(e) => log::error!(
            "the stored job control state is unreadable ({e}); starting without it \
             (no job is paused)"
        ),
    }
}

/// Decide what becomes of a slot of `job` due now: paused, skipped, in a window, or run.
/// Takes one of the job's skips when it skips.
/// Act on a due slot: the job's controls decide (`hold`), then the run Workflow runs it,
/// records it as skipped, or leaves it to a window's end. `reason` says why a run that is
/// not scheduled was started (a chain).
pub(crate) fn fire(
    core: &mut Main,
    due: &Due,
    now: DateTime<Utc>,
    trigger: Trigger,
    reason: Option<String>,
) {
    let Some(job) = core.config.jobs.get(&due.job).and_then(|e| e.job_ref()) else {
        return;
    };
    let job = std::sync::Arc::clone(job);
    // A missed slot is recorded as such, and global maintenance skips everything.
    let hold = if due.missed || core.global_maintenance() {
        Hold::Run
    } else {
        hold(core, &job, due, now)
    };
    run::fire_as(core, due, now, trigger, hold, reason);
}

pub(crate) fn hold(core: &mut Main, job: &Job, due: &Due, now: DateTime<Utc>) -> Hold {
    let refire = core.jobctl.refiring.as_ref() == Some(&(job.name.clone(), due.slot));
    if let Some(note) = core.jobctl.paused_note(&job.name, now) {
        return Hold::Skip(format!("paused: {note}"));
    }
    if !refire
        && let Some(c) = core.jobctl.state.jobs.get_mut(&job.name)
        && c.skip_next > 0
    {
        c.skip_next -= 1;
        let left = c.skip_next;
        let by = who(c.skip_by);
        if left == 0 && c.paused.is_none() {
            core.jobctl.state.jobs.remove(&job.name);
        }
        save(core, None, None);
        return Hold::Skip(format!(
            "skipped: skip requested by {by} ({left} more to skip)"
        ));
    }
    // The window is judged at the slot, or now for a slot handled late (a deferred one).
    let at = due.slot.max(now);
    match windows::slot_rule(&core.config.maintenance.windows, &job.group, at) {
        SlotRule::Free => Hold::Run,
        SlotRule::Skip(w) => Hold::Skip(format!("maintenance window {}", w.name)),
        SlotRule::Defer(w, end) => {
            let name = w.name.clone();
            let waiting = core
                .jobctl
                .deferred
                .iter()
                .any(|d| d.1 == job.name && d.0 == end);
            if waiting {
                return Hold::Skip(format!(
                    "maintenance window {name}: an earlier slot already waits for its end \
                     at {}",
                    rfc3339(end.timestamp_millis())
                ));
            }
            log::info!(
                "{}: slot {} deferred to the end of maintenance window {name} at {end}",
                job.name,
                due.slot
            );
            core.event(
                "run_deferred",
                Some(&job.name),
                None,
                None,
                format!(
                    "slot {}: deferred to the end of maintenance window {name} at {}",
                    due.slot,
                    rfc3339(end.timestamp_millis())
                ),
            );
            core.jobctl
                .deferred
                .insert((end, job.name.clone(), due.slot, name));
            Hold::Deferred
        }
    }
}

/// The loop's schedule tick: fire the deferred slots whose window has ended and end the
/// pauses whose time has come.
pub(crate) fn tick(core: &mut Main, now: DateTime<Utc>) {
    while let Some(first) = core.jobctl.deferred.first().cloned() {
        if first.0 > now {
            break;
        }
        core.jobctl.deferred.remove(&first);
        let (_, job, slot, window) = first;
        log::info!("{job}: maintenance window {window} ended; running the deferred slot {slot}");
        let due = Due {
            job: job.clone(),
            slot,
            missed: false,
            early: false,
        };
        core.jobctl.refiring = Some((job, slot));
        fire(core, &due, now, Trigger::Schedule, None);
        core.jobctl.refiring = None;
    }
    let expired: Vec<String> = core
        .jobctl
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
        if let Some(c) = core.jobctl.state.jobs.get_mut(job) {
            c.paused = None;
            if c.skip_next == 0 {
                core.jobctl.state.jobs.remove(job);
            }
        }
        log::info!("{job}: the pause has ended; the job runs again");
        let actor = std::mem::take(&mut core.actor);
        core.event(
            "job_control",
            Some(job),
            None,
            None,
            "resumed: the pause ended (--until)".to_string(),
        );
        core.actor = actor;
    }
    if !expired.is_empty() {
        save(core, None, None);
    }
}

/// Apply a `pause`, `resume`, `skip` or show request.
pub(crate) fn request(core: &mut Main, call: CallId, change: JobControl) {
    let fail =
        |core: &mut Main, f| core.reply_hub(call, HubReply::Admin(AdminResponse::Failure(f)));
    let now = Utc::now();
    let job = match &change {
        JobControl::Show => {
            let info = core.jobctl.info(None);
            core.reply_hub(call, HubReply::Admin(AdminResponse::JobControl(info)));
            return;
        }
        JobControl::Pause { job, .. }
        | JobControl::Resume { job }
        | JobControl::Skip { job, .. } => job.clone(),
    };
    // Resuming a job that is no longer configured is allowed: it cleans up its state.
    if !core.config.jobs.contains_key(&job) && !matches!(change, JobControl::Resume { .. }) {
        fail(core, AdminFailure::NotFound(format!("no job named {job}")));
        return;
    }
    let by = core.actor.uid;
    let entry = core.jobctl.state.jobs.entry(job.clone()).or_default();
    let note = match change {
        JobControl::Show => None,
        JobControl::Pause { until, .. } => {
            if let Some(u) = until
                && u <= now.timestamp_millis()
            {
                core.jobctl
                    .state
                    .jobs
                    .retain(|_, c| *c != Control::default());
                fail(
                    core,
                    AdminFailure::Invalid(format!("--until {} has already passed", rfc3339(u))),
                );
                return;
            }
            entry.paused = Some(Pause {
                by,
                at: now.timestamp_millis(),
                until,
            });
            Some(match until {
                Some(u) => format!("{job} is paused until {}", rfc3339(u)),
                None => format!("{job} is paused until `saltpeterctl resume {job}`"),
            })
        }
        JobControl::Resume { .. } => {
            let was = entry.paused.take().is_some() || entry.skip_next > 0;
            entry.skip_next = 0;
            Some(if was {
                format!("{job} is resumed: its slots run again")
            } else {
                format!("{job} was neither paused nor skipping")
            })
        }
        JobControl::Skip { next, .. } => {
            if !(1..=MAX_SKIP).contains(&next) {
                core.jobctl
                    .state
                    .jobs
                    .retain(|_, c| *c != Control::default());
                fail(
                    core,
                    AdminFailure::Invalid(format!("--next {next} must be 1-{MAX_SKIP}")),
                );
                return;
            }
            entry.skip_next = next;
            entry.skip_by = by;
            Some(format!("the next {next} slot(s) of {job} are skipped"))
        }
    };
    core.jobctl
        .state
        .jobs
        .retain(|_, c| *c != Control::default());
    let message = format!("{} (by {})", note.clone().unwrap_or_default(), who(by));
    log::warn!("{message}");
    core.event("job_control", Some(&job), None, None, message);
    save(core, Some(call), note);
}

/// Persist the state; with `call`, answer it once db has committed.
fn save(core: &mut Main, call: Option<CallId>, note: Option<String>) {
    let value = match serde_json::to_string(&core.jobctl.state) {
        Ok(v) => v,
        Err(e) => {
            log::error!("could not encode the job control state: {e}");
            return;
        }
    };
    core.db_call(
        DbRequest::SetMeta {
            key: META_KEY.to_string(),
            value,
        },
        DbWait::then(move |core, _, result| saved(core, call, note, result)),
    );
}

/// db stored the state (or could not).
pub(crate) fn saved(
    core: &mut Main,
    call: Option<CallId>,
    note: Option<String>,
    result: Result<DbReply, CallError>,
) {
    let stored = calls::SetMeta::take(result);
    let Some(call) = call else {
        if let Err(e) = stored {
            log::error!("could not save the job control state: {e}");
        }
        return;
    };
    let resp = match stored {
        Ok(_) => AdminResponse::JobControl(core.jobctl.info(note)),
        Err(e) => AdminResponse::Failure(AdminFailure::Internal(format!(
            "the change is in effect, but could not be saved ({e}): it is lost at the next \
             restart"
        ))),
    };
    core.reply_hub(call, HubReply::Admin(resp));
}

/// `schedule next --job`: the job's next firings as they will happen, accounting for its
/// pause, its skips and the fleet-wide maintenance windows (skipped slots left out, a
/// deferred one moved to its window's end).
pub(crate) fn account(core: &Main, job: &Job, slots: Vec<DateTime<Utc>>) -> Vec<DateTime<Utc>> {
    let now = Utc::now();
    let pause = core.jobctl.paused(&job.name, now).cloned();
    let mut skips = core
        .jobctl
        .state
        .jobs
        .get(&job.name)
        .map_or(0, |c| c.skip_next);
    let mut out: Vec<DateTime<Utc>> = Vec::with_capacity(slots.len());
    for slot in slots {
        let paused = pause
            .as_ref()
            .is_some_and(|p| p.until.is_none_or(|u| u > slot.timestamp_millis()));
        if paused {
            continue;
        }
        if skips > 0 {
            skips -= 1;
            continue;
        }
        match windows::slot_rule(&core.config.maintenance.windows, &job.group, slot) {
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
