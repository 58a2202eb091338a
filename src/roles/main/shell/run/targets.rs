//! Run steps that depend on the executor: finding the targets and deploying wrappers.
//!
//! - `local`: the targets are the names given; all are live.
//! - an executor plugin: its `resolve` (and its `ping` of what it found when liveness
//!   matters before the launch: `number_of_targets`, `retry_unreachable`); no machine
//!   found skips the run (`plugins.rs`). Its wrappers are deployed by its launch.
//! - `salt`: the master matches the target expression from its own data through the salt
//!   bridge (no publish; a minion that does not return the launch is then unreachable,
//!   255, with Salt's word), or `test.ping` on it says which minions are live (the
//!   command line, `number_of_targets`, `retry_unreachable`); matched minions that stay
//!   silent become unreachable (255), a salt failure fails the run with its cause, and
//!   "no minions matched" skips it with that reason. A minion without this build's
//!   wrapper gets it first (`fleet/`).

use super::env::{RunEnv, Sc, not_planned, not_recorded};
use crate::config::Executor;
use crate::roles::main::fleet::Need;
use crate::roles::main::fleet::launcher;
use crate::roles::main::shell::Main;
use crate::wire::link::{BlockingRequest, blocking_calls};
use crate::wire::records::RunState;
use crate::workflow::{Step, Wake, WakeEvent};

pub(crate) fn resolve_targets(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, plan)) = env.planned() else {
        return not_planned(s);
    };
    let job = req.job.clone();
    // A pre-staged salt run is part of its slot's launch round until its launch is queued.
    if job.executor == Executor::Salt
        && req.prestaged
        && plan.round.is_none()
        && let Some(slot) = req.slot
    {
        core.rounds.join(slot);
        plan.round = Some(slot);
    }
    if job.executor == Executor::Local {
        for t in &job.targets {
            if !plan.live.contains(t) {
                plan.live.push(t.clone());
            }
        }
        return Step::Next;
    }
    let request = match super::plugins::resolve_request(&core.config.saltpeter, &job) {
        Ok(request) => request,
        Err(why) => {
            log::error!("{}: {why}", job.name);
            plan.unresolved = Some((RunState::Failed, why));
            return Step::Next;
        }
    };
    let resolved = env.call(
        core,
        |_, core| {
            // Salt: the master's own match (no publish) when nothing needs liveness before
            // the launch; a plugin: its `resolve`, and a `ping` when liveness is needed.
            let salt = matches!(request, BlockingRequest::Resolve { .. });
            let id = core.blocking_call(request);
            if salt {
                core.launcher.resolution_sent(id, std::time::Instant::now());
            }
            Ok(id)
        },
        |core, id| {
            let reply = core
                .links
                .take_blocking_reply::<blocking_calls::Resolve>(id)?;
            core.launcher
                .resolution_answered(id, std::time::Instant::now());
            Some(reply)
        },
    );
    let reply = match resolved {
        Ok(reply) => reply,
        Err(step) => return step,
    };
    let Some((_, plan)) = env.planned() else {
        return not_planned(s);
    };
    match reply {
        Ok(res) => {
            if res.no_match {
                let what = if job.executor.plugin().is_some() {
                    "machines"
                } else {
                    "minions"
                };
                plan.unresolved = Some((
                    RunState::Skipped,
                    format!(
                        "no {what} matched the target {} ({})",
                        job.target_expr,
                        job.target_type_word()
                    ),
                ));
            }
            plan.live = res.live;
            plan.live.sort();
            plan.unreachable = res.unreachable;
        }
        Err(e) => {
            log::error!("{}: target resolution failed: {e}", job.name);
            plan.unresolved = Some((RunState::Failed, format!("target resolution failed: {e}")));
        }
    }
    Step::Next
}

/// Make sure the minions of the current batch have this build's wrapper: the fleet
/// state says which do (`fleet/`); the others get one deployment, shared with every
/// run that needs it, and this run waits for it. A minion whose deployment failed fails
/// its target (254); one that did not return is launched all the same (its silence is
/// judged at the pick-up deadline).
pub(crate) fn deploy_wrappers(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let job = req.job.clone();
    let run = rec.id();
    if job.executor != Executor::Salt {
        return Step::Next;
    }
    let path = launcher::wrapper_path(&core.config.saltpeter, &job);
    let minions: Vec<String> = rec
        .current_batch()
        .iter()
        .filter(|m| core.target(run, m).is_some_and(|t| t.awaiting_pickup()))
        .cloned()
        .collect();
    let since = *rec.deploy_since.get_or_insert(s.now());
    let (need, out) = core.fleet.need(&core.config, &minions, &path, since);
    core.perform(out);
    match need {
        Need::Ready => {}
        Need::Wait => {
            return Step::Wait(Wake::Any(vec![
                Wake::event(WakeEvent::Fleet),
                Wake::event(Main::run_event(run)),
            ]));
        }
        Need::Failed(failures) => {
            for (machine, failure) in failures {
                if failure.silent {
                    rec.silent.insert(machine, failure.why);
                } else {
                    let why = format!("wrapper deployment failed: {}", failure.why);
                    super::failed::launch_failed(core, &job.name, run, &machine, why);
                }
            }
        }
    }
    rec.deploy_since = None;
    Step::Next
}
