//! Chains of jobs: a job with `after: {job: X, on: success|failure|always}` runs when a run
//! of X ends with a matching outcome.
//!
//! `run_ended` is called from the `Message::RunEnded` arm of the loop's dispatch
//! (`shell/dispatch.rs`), which `finalize` posts once the upstream run's end is recorded.
//! Each chained job's run goes through the same door as a scheduled slot
//! (`firing::fire`, trigger `chain`, slot = the upstream run's end), so global
//! maintenance, pause, skips, maintenance windows and the overlap rule apply to it too. The
//! run records what triggered it: its reason says `after run N of X (succeeded)`, and an
//! event of kind `chain` links the two runs. Cycles are refused when the configuration is
//! loaded (`config/chains.rs`), so a chain always ends.

use std::sync::Arc;

use chrono::Utc;

use crate::config::ChainOn;
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::firing;
use crate::wire::records::{RunId, RunState, Trigger};

/// Whether an upstream run that ended in `state` starts a chain waiting `on` it.
pub(crate) fn fires_on(on: ChainOn, state: RunState) -> bool {
    match on {
        ChainOn::Success => state == RunState::Succeeded,
        ChainOn::Failure => matches!(state, RunState::Failed | RunState::Partial),
        ChainOn::Always => matches!(
            state,
            RunState::Succeeded | RunState::Failed | RunState::Partial | RunState::Canceled
        ),
    }
}

/// A run of `job` ended in `state`: start the jobs chained to it.
pub(crate) fn run_ended(core: &mut Main, job: &str, run: RunId, state: RunState) {
    if core.flight.is_stopping() {
        return;
    }
    let chained: Vec<Arc<crate::config::Job>> = core
        .config
        .jobs
        .values()
        .filter_map(|e| e.job_ref())
        .filter(|j| j.enabled)
        .filter(|j| {
            j.after
                .as_ref()
                .is_some_and(|a| a.job == job && fires_on(a.on, state))
        })
        .cloned()
        .collect();
    let now = Utc::now();
    for next in chained {
        // Outside its `active_from` / `active_until` range a job is not fired by a chain
        // either (only a manual run starts it then).
        if let Some(note) = next.schedule.range_note(now) {
            log::info!(
                "{}: not chained after run {run} of {job}: {note}",
                next.name
            );
            continue;
        }
        let reason = format!("after run {run} of {job} ({state})");
        log::info!("{}: chained run {reason}", next.name);
        core.event(
            "chain",
            Some(&next.name),
            Some(run),
            None,
            format!("{} starts {reason}", next.name),
        );
        let due = Due {
            job: next.name.clone(),
            slot: now,
            missed: false,
            early: false,
        };
        firing::fire(core, &due, now, Trigger::Chain, Some(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_fires_only_on_its_outcome() {
        use RunState::*;
        assert!(fires_on(ChainOn::Success, Succeeded));
        assert!(!fires_on(ChainOn::Success, Failed));
        assert!(!fires_on(ChainOn::Success, Partial));
        assert!(fires_on(ChainOn::Failure, Failed));
        assert!(fires_on(ChainOn::Failure, Partial));
        assert!(!fires_on(ChainOn::Failure, Succeeded));
        assert!(fires_on(ChainOn::Always, Canceled));
        // A skipped slot ran nothing: no chain follows it.
        assert!(!fires_on(ChainOn::Always, Skipped));
        assert!(!fires_on(ChainOn::Failure, Skipped));
    }
}
