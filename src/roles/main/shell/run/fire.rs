//! A due slot becomes a run, a pre-staged run, or a skipped slot recorded with its
//! reason (missed, maintenance, a job control hold, overlap, a launch of the previous
//! slot still out, or the job's queue full); and the overlap rule's view of a job's runs.

use std::sync::Arc;

use chrono::Utc;

use crate::config::Overlap;
use crate::roles::main::health::storage::UnrecordedSlot;
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::run::rules::{self, Hold};
use crate::roles::main::shell::run::effects::now_ms;
use crate::roles::main::shell::throttle;
use crate::roles::main::shell::{DbWait, JobRef, Main};
use crate::wire::db::{DbRequest, NewRun};
use crate::wire::records::{RunState, Trigger};

/// Act on a due slot whose run, if any, has `trigger` (`schedule`, `catchup` for a missed
/// slot run late, `chain`), as the job's controls decided (`hold`, from `firing::fire`).
pub(crate) fn fire_as(
    core: &mut Main,
    due: &Due,
    now: chrono::DateTime<Utc>,
    trigger: Trigger,
    hold: Hold,
    reason: Option<String>,
) {
    let Some(job) = core.config.jobs.get(&due.job).and_then(|e| e.job_ref()) else {
        return;
    };
    let job: JobRef = Arc::clone(job);
    let slot = due.slot.timestamp_millis();
    let lateness = now - due.slot;
    if hold == Hold::Deferred {
        return;
    }
    log::debug!(
        "slot {} of {} is due ({} ms late)",
        due.slot,
        job.name,
        lateness.num_milliseconds()
    );
    let hold = match hold {
        // Launching has fallen behind for good (a launch out for more than a whole period
        // and the backlog growing, `rules::launches_behind`): this slot is merged into
        // those (recorded as skipped) instead of queueing launches ever later. One slow
        // launch only makes the next slot late.
        Hold::Run if due.early && launches_behind(core, &job.name, slot) => Hold::Skip(format!(
            "launch: the launches of {} have fallen behind (a launch has been out for more \
             than a period and the backlog grows)",
            job.name
        )),
        // The job's queue is full (`max_queued_runs_per_job`): this slot is not queued
        // behind the others (`overlap: allow` firing faster than its runs can start).
        Hold::Run => match throttle::job_queue_full(core, &job.name) {
            Some(reason) => Hold::Skip(reason),
            None => Hold::Run,
        },
        other => other,
    };
    if due.early && !due.missed && hold == Hold::Run {
        log::debug!("{}: pre-staging slot {}", job.name, due.slot);
        core.queue_run(RunRequest {
            job,
            slot: Some(slot),
            trigger,
            admin_call: None,
            prestaged: true,
            reason,
        });
        return;
    }
    if let Some(why) = core.storage.trouble() {
        // Tried all the same: recording the run is the probe, and a slot that cannot be
        // recorded is kept and recorded as skipped once the database stores again.
        log::warn!(
            "{}: slot {} fires while the database does not store ({why})",
            job.name,
            due.slot
        );
    }
    let skip = if due.missed {
        Some(format!(
            "missed: the daemon reached this slot {} s late",
            lateness.num_seconds()
        ))
    } else if core.global_maintenance() {
        Some("maintenance: global maintenance is on".to_string())
    } else if let Hold::Skip(reason) = hold {
        Some(reason)
    } else if job.overlap == Overlap::Forbid && core.job_busy(&job.name) {
        Some(format!(
            "overlap: the previous run of {} is still going",
            job.name
        ))
    } else {
        None
    };
    core.views
        .slot_fired(&job.name, lateness.num_milliseconds(), skip.as_deref());
    match skip {
        Some(reason) => {
            log::info!("{}: slot {} skipped ({reason})", job.name, due.slot);
            let out = core.notify.slot_skipped(
                &core.config.saltpeter,
                &job,
                slot,
                &reason,
                due.missed,
                now_ms(),
            );
            core.perform(out);
            crate::roles::main::shell::joblog::slot_skipped(core, &job, &reason);
            core.event(
                "run_skipped",
                Some(&job.name),
                None,
                None,
                format!("slot {}: {reason}", due.slot),
            );
            let unrecorded = UnrecordedSlot {
                job: job.name.clone(),
                slot,
                trigger,
                why: reason.clone(),
            };
            core.db_call(
                DbRequest::CreateRun(NewRun {
                    job: job.name.clone(),
                    slot: Some(slot),
                    trigger,
                    state: RunState::Skipped,
                    reason: Some(reason),
                    targets: Vec::new(),
                    now: now_ms(),
                }),
                DbWait::then(move |core, _, result| {
                    crate::roles::main::shell::run::record::slot_recorded(core, unrecorded, result)
                }),
            );
        }
        None => core.queue_run(RunRequest {
            job,
            slot: Some(slot),
            trigger,
            admin_call: None,
            prestaged: false,
            reason,
        }),
    }
}

/// Whether the launches of `job` have fallen behind for good at the slot `slot`.
fn launches_behind(core: &Main, job: &str, slot: crate::wire::records::Millis) -> bool {
    let now = std::time::Instant::now();
    let views: Vec<rules::LaunchView> = core
        .runs()
        .filter(|r| r.job().name == job)
        .map(|r| rules::LaunchView {
            slot: r.slot(),
            out_for: r
                .launching()
                .map(|since| now.saturating_duration_since(since)),
            // Staged and not launched yet (resolving, deploying, waiting in its round).
            waiting: r.awaiting_go()
                && r.launching().is_none()
                && r.targets()
                    .values()
                    .any(crate::roles::main::run::target::Target::is_pending),
        })
        .collect();
    let queued = core.flight.queued_of(job);
    rules::launches_behind(&views, slot, queued)
}
