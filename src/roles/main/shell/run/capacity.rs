//! The run Workflow's `await_capacity` step: a recorded run waits here, before any wrapper
//! is deployed or launched, while `max_runs_in_flight` runs are going (`shell/throttle.rs`
//! has the rule and the order). Meanwhile the run is `queued` with the reason; once
//! admitted it is `dispatching` again (a pre-staged run stays `queued` until its slot) and
//! its reason says how long it waited. A run recovered after a restart passes here too: one
//! that was still waiting waits again, one with a target launched before is in flight
//! already.

use std::time::{Duration, Instant};

use super::env::{RunEnv, Sc, not_recorded};
use crate::roles::main::run::target::Phase;
use crate::roles::main::shell::run::effects::finish_target;
use crate::roles::main::shell::throttle;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::{DbRequest, RunUpdate};
use crate::wire::records::{RunState, TargetReason};
use crate::workflow::{Step, Wake, WakeEvent};

/// How often a waiting run looks again without being woken.
const RECHECK: Duration = Duration::from_secs(5);

pub(super) fn await_capacity(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    let Some(active) = core.run(run) else {
        return Step::Next;
    };
    let stopping = core.flight.is_stopping();
    // A run recovered after a restart with a target launched before it is in flight
    // already: never held back.
    let launched = rec.capacity_since.is_none()
        && active
            .targets()
            .values()
            .any(|t| !matches!(t.phase(), Phase::Pending | Phase::SkippedMaintenance));
    // A kill (its targets are canceled already) or a stop: nothing is to start.
    let admitted = if active.kill_requested() || stopping || launched {
        Ok(())
    } else {
        throttle::run_may_start(core, run)
    };
    match admitted {
        Err(reason) => {
            if rec.capacity_since.is_none() {
                log::info!("run {run}: {reason}");
                rec.capacity_since = Some(s.now());
                set_waiting(core, run, true);
                record(core, run, RunState::Queued, reason);
            }
            Step::Wait(Wake::Any(vec![
                Wake::event(WakeEvent::Capacity),
                Wake::event(Main::run_event(run)),
                Wake::At(s.now() + RECHECK),
            ]))
        }
        Ok(()) => {
            let Some(since) = rec.capacity_since.take() else {
                return Step::Next;
            };
            set_waiting(core, run, false);
            if stopping {
                let open: Vec<String> = core.run(run).map_or(Vec::new(), |a| {
                    a.targets()
                        .iter()
                        .filter(|(_, t)| !t.is_decided())
                        .map(|(m, _)| m.clone())
                        .collect()
                });
                for m in open {
                    finish_target(core, run, &m, TargetReason::Canceled, None);
                }
                return Step::Next;
            }
            let waited = Instant::now().saturating_duration_since(since).as_secs();
            let max = core.config.saltpeter.max_runs_in_flight.unwrap_or_default();
            let mut reason = format!("started after waiting {waited} s (max_runs_in_flight {max})");
            if let Some(why) = &req.reason {
                reason = format!("{why}; {reason}");
            }
            let state = if req.prestaged {
                RunState::Queued
            } else {
                RunState::Dispatching
            };
            log::info!("run {run}: {reason}");
            record(core, run, state, reason);
            Step::Next
        }
    }
}

fn set_waiting(core: &mut Main, run: u64, waiting: bool) {
    if let Some(active) = core.run_mut(run) {
        if waiting {
            active.wait_for_capacity();
        } else {
            active.admitted();
        }
    }
    core.post(crate::roles::main::messages::Message::RunChanged(run));
}

fn record(core: &mut Main, run: u64, state: RunState, reason: String) {
    core.db_call(
        DbRequest::UpdateRun {
            run,
            update: RunUpdate {
                state: Some(state),
                reason: Some(reason),
                ..Default::default()
            },
        },
        DbWait::write("a run waiting for a place"),
    );
}
