//! What starts runs: every due slot through the job's controls (`jobctl`: pause, skip,
//! defer), chained jobs (`chains`) and slots missed while the server was down (`missed`).
//!
//! `fire` is the one door: scheduled slots, catch-ups, chained runs and deferred slots
//! come through it, so the same rules apply to all of them.

pub(crate) mod chains;
pub(crate) mod missed;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::run::rules::Hold;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::run;
use crate::wire::records::Trigger;

/// Act on a due slot: the job's controls decide (`JobCtl::hold`), then the run Workflow
/// runs it, records it as skipped, or leaves it to a window's end. `reason` says why a run
/// that is not scheduled was started (a chain).
pub(crate) fn fire(
    core: &mut Main,
    due: &Due,
    now: DateTime<Utc>,
    trigger: Trigger,
    reason: Option<String>,
) {
    fire_held(core, due, now, trigger, reason, false);
}

/// `fire`; `refire`: the slot was deferred to a window's end and passed the controls once
/// (its skips are not taken again).
fn fire_held(
    core: &mut Main,
    due: &Due,
    now: DateTime<Utc>,
    trigger: Trigger,
    reason: Option<String>,
    refire: bool,
) {
    let Some(job) = core.config.jobs.get(&due.job).and_then(|e| e.job_ref()) else {
        return;
    };
    let job = Arc::clone(job);
    // A missed slot is recorded as such, and global maintenance skips everything.
    let hold = if due.missed || core.global_maintenance() {
        Hold::Run
    } else {
        let windows = &core.config.maintenance.windows;
        let (hold, out) = core.jobctl.hold(&job, due, now, windows, refire);
        core.perform(out);
        hold
    };
    run::fire_as(core, due, now, trigger, hold, reason);
}

/// The loop's schedule tick: fire the deferred slots whose window has ended and end the
/// pauses whose time has come.
pub(crate) fn tick(core: &mut Main, now: DateTime<Utc>) {
    while let Some(due) = core.jobctl.next_deferred(now) {
        fire_held(core, &due, now, Trigger::Schedule, None, true);
    }
    let out = core.jobctl.end_pauses(now);
    // A pause that ends by itself is nobody's doing: its events carry no operator.
    let actor = std::mem::take(&mut core.actor);
    core.perform(out);
    core.actor = actor;
}
