//! Retries of failed targets (`retries`, `retry_delay`): a new attempt of the same run.
//!
//! Outline, checked by the run Workflow's `collect_batch` after every change of the run:
//! 1. a target of the current batch recorded with a retriable failure and attempts left
//!    (`Target::wants_retry`) gets a time, `retry_delay` from now (event `target_retry`);
//! 2. when the time has come it goes back to pending (`Target::retry`; db keeps the
//!    earlier outcome in `target_attempts` and starts the row over) and the batch is
//!    launched again, which launches exactly its pending targets;
//! 3. the run's final state is settled from the targets as they end up: the last attempt
//!    counts.
//!
//! A kill of the run (or shutdown) drops the retries not yet started.

use std::time::{Duration, Instant};

use super::env::RecordedRun;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::run::effects::transition;

/// What the run Workflow does about retries now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryPlan {
    Nothing,
    /// Targets went back to pending: launch the batch again.
    Relaunch,
    /// A retry is due at this instant.
    WaitUntil(Instant),
}

pub(crate) fn check(rec: &mut RecordedRun, core: &mut Main, now: Instant) -> RetryPlan {
    let run = rec.id();
    let Some(active) = core.run(run) else {
        return RetryPlan::Nothing;
    };
    if active.kill_requested() || core.flight.is_stopping() || active.job().retries == 0 {
        rec.retry_at.clear();
        return RetryPlan::Nothing;
    }
    let retries = active.job().retries;
    let delay = Duration::from_secs(active.job().retry_delay_s);
    let batch = rec.current_batch().to_vec();
    let wanting: Vec<(String, u32)> = batch
        .iter()
        .filter_map(|m| {
            let t = active.target(m)?;
            t.wants_retry(retries).then(|| (m.clone(), t.attempt()))
        })
        .collect();
    rec.retry_at
        .retain(|m, _| wanting.iter().any(|(w, _)| w == m));
    let mut relaunch = false;
    for (machine, attempt) in wanting {
        let at = match rec.retry_at.get(&machine) {
            Some(at) => *at,
            None => {
                let at = now + delay;
                log::info!(
                    "run {run}: {machine} failed on attempt {attempt}; attempt {} in {} s",
                    attempt + 1,
                    delay.as_secs()
                );
                rec.retry_at.insert(machine.clone(), at);
                at
            }
        };
        if at <= now {
            rec.retry_at.remove(&machine);
            transition(core, run, &machine, |t| t.retry());
            relaunch = true;
        }
    }
    if relaunch {
        return RetryPlan::Relaunch;
    }
    rec.retry_at
        .values()
        .min()
        .map_or(RetryPlan::Nothing, |at| RetryPlan::WaitUntil(*at))
}
