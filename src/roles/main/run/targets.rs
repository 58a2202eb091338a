//! Run steps that depend on the executor: finding the targets and deploying wrappers.
//!
//! - `local`: the targets are the names given; all are live.
//! - `salt`: the master matches the target expression from its own data through the salt
//!   bridge (no publish; a minion that does not return the launch is then unreachable,
//!   255, with Salt's word), or `test.ping` on it says which minions are live (the
//!   command line, `number_of_targets`, `retry_unreachable`); matched minions that stay
//!   silent become unreachable (255), a salt failure fails the run with its cause, and
//!   "no minions matched" skips it with that reason. Before a minion's
//!   first launch, this build's wrapper is deployed to it (then cached by hash).

use super::Main;
use super::RunEnv;
use crate::config::Executor;
use crate::roles::main::effects::finish_target;
use crate::wire::link::{BlockingRequest, blocking_calls};
use crate::wire::records::{RunState, TargetReason};
use crate::workflow::{Step, StepCtx, Wake};

type Sc<'a> = StepCtx<'a, RunEnv, Main>;

pub fn resolve_targets(env: &mut RunEnv, core: &mut Main, _: &mut Sc) -> Step {
    let job = env.req.job.clone();
    if job.executor == Executor::Local {
        for t in &job.targets {
            if !env.live.contains(t) {
                env.live.push(t.clone());
            }
        }
        return Step::Next;
    }
    let Some(id) = env.call else {
        // The master's own match (no publish) when nothing needs liveness before the
        // launch: choosing `number_of_targets` live minions and `retry_unreachable` do.
        let from_cache = job.number_of_targets.is_none() && job.retry_unreachable_s == 0;
        let id = core.blocking_call(BlockingRequest::Resolve {
            salt: core.salt_settings(),
            target: job.target_expr.clone(),
            target_type: job.target_type.into(),
            from_cache,
        });
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    };
    let Some(reply) = core.take_blocking_reply::<blocking_calls::Resolve>(id) else {
        return Step::Wait(Wake::Call(id));
    };
    env.call = None;
    match reply {
        Ok(res) => {
            if res.no_match {
                env.unresolved = Some((
                    RunState::Skipped,
                    format!(
                        "no minions matched the target {} ({})",
                        job.target_expr, job.target_type
                    ),
                ));
            }
            env.live = res.live;
            env.live.sort();
            env.unreachable = res.unreachable;
            env.resolved_from_cache = res.from_cache;
        }
        Err(e) => {
            log::error!("{}: target resolution failed: {e}", job.name);
            env.unresolved = Some((RunState::Failed, format!("target resolution failed: {e}")));
        }
    }
    Step::Next
}

/// Make sure the minions of the current batch have this build's wrapper.
pub fn deploy_wrappers(env: &mut RunEnv, core: &mut Main, _: &mut Sc) -> Step {
    let job = env.req.job.clone();
    let run = env.run.unwrap_or_default();
    if job.executor != Executor::Salt {
        return Step::Next;
    }
    let Some(id) = env.call else {
        let hash = core.launcher.wrapper_hash.clone();
        let wrapper_path = core.wrapper_path(&job);
        let missing: Vec<String> = env
            .batches
            .get(env.batch)
            .into_iter()
            .flatten()
            .filter(|m| {
                hash.is_none()
                    || core.launcher.deployed.get(*m)
                        != Some(&(wrapper_path.clone(), hash.clone().unwrap_or_default()))
            })
            .cloned()
            .collect();
        if missing.is_empty() {
            return Step::Next;
        }
        log::info!("run {run}: deploying the wrapper to {}", missing.join(", "));
        let id = core.blocking_call(BlockingRequest::Deploy {
            salt: core.salt_settings(),
            minions: missing,
            wrapper_path,
            wrapper_source: core.config.saltpeter.wrapper_source.clone(),
        });
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    };
    let Some(reply) = core.take_blocking_reply::<blocking_calls::Deploy>(id) else {
        return Step::Wait(Wake::Call(id));
    };
    env.call = None;
    let wrapper_path = core.wrapper_path(&job);
    let batch = env.batches.get(env.batch).cloned().unwrap_or_default();
    match reply {
        Ok((outcomes, hash)) => {
            core.launcher.wrapper_hash = Some(hash.clone());
            for o in outcomes {
                match o.result {
                    Ok(()) => {
                        core.launcher
                            .deployed
                            .insert(o.machine, (wrapper_path.clone(), hash.clone()));
                    }
                    Err(why) if o.silent.is_some() && env.resolved_from_cache => {
                        // Never pinged: a minion silent at its deployment is unreachable.
                        log::warn!("run {run}: {} did not return: {why}", o.machine);
                        core.event(
                            "target_unreachable",
                            Some(&job.name),
                            Some(run),
                            Some(&o.machine),
                            format!("salt: {why}"),
                        );
                        finish_target(core, run, &o.machine, TargetReason::Unreachable, Some(255));
                    }
                    Err(why) => {
                        log::warn!("run {run}: {}: {why}", o.machine);
                        super::launch_failed(core, &job.name, run, &o.machine, why);
                    }
                }
            }
        }
        Err(e) => {
            log::error!("run {run}: wrapper deployment failed: {e}");
            for m in &batch {
                finish_target(core, run, m, TargetReason::WrapperFailed, Some(254));
            }
        }
    }
    Step::Next
}
