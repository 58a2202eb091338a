//! `saltpeterctl wrapper deploy [TARGET]`: put this build's wrapper on minions on demand.
//!
//! A small Workflow: resolve the target with `test.ping` (all minions, `*`, by default),
//! deploy to the live ones, answer the admin call with one line per minion. Minions that
//! got it are recorded in the fleet state (`fleet.rs`), so no run deploys again.

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::state::Main;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::link::{BlockingReply, BlockingRequest, HubReply, SaltTargetType, blocking_calls};
use crate::workflow::{Step, StepCtx, Wake, Workflow};

pub(crate) struct DeployEnv {
    admin_call: CallId,
    target: String,
    target_type: SaltTargetType,
    wrapper_path: String,
    call: Option<CallId>,
    live: Vec<String>,
    lines: Vec<String>,
}

type Sc<'a> = StepCtx<'a, DeployEnv, Main>;

pub(crate) fn workflow(
    core: &Main,
    admin_call: CallId,
    target: Option<String>,
) -> Workflow<DeployEnv, Main> {
    let wrapper_path = core.default_wrapper_path();
    Workflow::new(
        "wrapper deploy",
        DeployEnv {
            admin_call,
            target: target.unwrap_or_else(|| "*".to_string()),
            target_type: SaltTargetType::Glob,
            wrapper_path,
            call: None,
            live: Vec::new(),
            lines: Vec::new(),
        },
    )
    .step("resolve", resolve)
    .step("deploy", deploy)
    .always("answer", answer)
}

/// The reply to a blocking call, once it has arrived.
fn reply_of<C: Call<BlockingReply>>(
    core: &mut Main,
    env: &mut DeployEnv,
) -> Option<Result<C::Reply, String>> {
    let id = env.call?;
    let reply = core.take_blocking_reply::<C>(id)?;
    env.call = None;
    Some(reply.map_err(|e| e.to_string()))
}

fn resolve(env: &mut DeployEnv, core: &mut Main, _: &mut Sc) -> Step {
    if env.call.is_none() {
        let id = core.blocking_call(BlockingRequest::Resolve {
            salt: core.salt_settings(),
            target: env.target.clone(),
            target_type: env.target_type,
            from_cache: false,
        });
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    }
    match reply_of::<blocking_calls::Resolve>(core, env) {
        None => Step::Wait(Wake::Call(env.call.unwrap_or_default())),
        Some(Ok(res)) => {
            for (m, why) in res.unreachable {
                env.lines.push(format!("{m}: unreachable: {why}"));
            }
            if res.no_match {
                env.lines.push(format!("no minions matched {}", env.target));
            }
            env.live = res.live;
            Step::Next
        }
        Some(Err(e)) => Step::fail(format!("target resolution failed: {e}")),
    }
}

fn deploy(env: &mut DeployEnv, core: &mut Main, _: &mut Sc) -> Step {
    if env.live.is_empty() {
        return Step::Next;
    }
    if env.call.is_none() {
        let id = core.blocking_call(BlockingRequest::Deploy {
            salt: core.salt_settings(),
            minions: env.live.clone(),
            wrapper_path: env.wrapper_path.clone(),
            wrapper_source: core.config.saltpeter.wrapper_source.clone(),
        });
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    }
    match reply_of::<blocking_calls::Deploy>(core, env) {
        None => Step::Wait(Wake::Call(env.call.unwrap_or_default())),
        Some(Ok((outcomes, hash))) => {
            for o in outcomes {
                match o.result {
                    Ok(()) => {
                        env.lines
                            .push(format!("{}: ok ({})", o.machine, env.wrapper_path));
                        crate::roles::main::shell::fleet::deployed_on_demand(
                            core,
                            &o.machine,
                            &env.wrapper_path,
                            &hash,
                        );
                    }
                    Err(why) => env.lines.push(format!("{}: failed: {why}", o.machine)),
                }
            }
            Step::Next
        }
        Some(Err(e)) => Step::fail(format!("deployment failed: {e}")),
    }
}

fn answer(env: &mut DeployEnv, core: &mut Main, s: &mut Sc) -> Step {
    let resp = match s.outcome() {
        crate::workflow::Outcome::Done => AdminResponse::Done(env.lines.join("\n")),
        other => AdminResponse::Failure(AdminFailure::Internal(format!("{other:?}"))),
    };
    core.reply_hub(env.admin_call, HubReply::Admin(resp));
    Step::Next
}
