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

use crate::roles::main::run::effects::transition;
use crate::roles::main::state::Main;
use crate::roles::main::state::run::RunEnv;

/// What the run Workflow does about retries now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryPlan {
    Nothing,
    /// Targets went back to pending: launch the batch again.
    Relaunch,
    /// A retry is due at this instant.
    WaitUntil(Instant),
}

pub(crate) fn check(env: &mut RunEnv, core: &mut Main, now: Instant) -> RetryPlan {
    let Some(run) = env.run else {
        return RetryPlan::Nothing;
    };
    let Some(active) = core.run(run) else {
        return RetryPlan::Nothing;
    };
    if active.kill_requested() || core.flight.stopping || active.job.retries == 0 {
        env.retry_at.clear();
        return RetryPlan::Nothing;
    }
    let retries = active.job.retries;
    let delay = Duration::from_secs(active.job.retry_delay_s);
    let batch = env.batches.get(env.batch).cloned().unwrap_or_default();
    let wanting: Vec<(String, u32)> = batch
        .iter()
        .filter_map(|m| {
            let t = active.targets.get(m)?;
            t.wants_retry(retries).then(|| (m.clone(), t.attempt()))
        })
        .collect();
    env.retry_at
        .retain(|m, _| wanting.iter().any(|(w, _)| w == m));
    let mut relaunch = false;
    for (machine, attempt) in wanting {
        let at = match env.retry_at.get(&machine) {
            Some(at) => *at,
            None => {
                let at = now + delay;
                log::info!(
                    "run {run}: {machine} failed on attempt {attempt}; attempt {} in {} s",
                    attempt + 1,
                    delay.as_secs()
                );
                env.retry_at.insert(machine.clone(), at);
                at
            }
        };
        if at <= now {
            env.retry_at.remove(&machine);
            transition(core, run, &machine, |t| t.retry());
            relaunch = true;
        }
    }
    if relaunch {
        return RetryPlan::Relaunch;
    }
    env.retry_at
        .values()
        .min()
        .map_or(RetryPlan::Nothing, |at| RetryPlan::WaitUntil(*at))
}
