//! The `salt` executor: `test.ping` for liveness and target expansion, `cmd.run_all` to
//! start wrappers, `file.manage_file` to deploy them.
//!
//! Every salt invocation is a child process with drained pipes and a deadline after which
//! it is killed and reported; at most `concurrency` run at once and the rest queue, so
//! several runs firing together never wait on each other beyond that cap. A launch error
//! on one minion fails that target alone.

use std::time::Duration;

use super::super::helpers::HelperFailure;
use super::super::state::{Blocking, Invocation, Outcome};
use super::calls::{self as salt, MinionResult, SaltCall, SaltSettings};
use super::cli::{self, DEADLINE_SLACK};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::RemoteError;
use crate::logsafe;
use crate::wire::link::{BlockingReply, LaunchTarget, MinionOutcome, Resolution, SaltTargetType};
use crate::wire::records::RunId;

/// Beyond that, how long a deployment may take to copy the wrapper (a few MiB, in 1 MiB
/// chunks from the master) to many minions at once.
const DEPLOY_TRANSFER_ALLOWANCE: Duration = Duration::from_secs(60);

/// One round's salt launch (`BlockingRequest::Launch`).
pub(crate) struct SaltLaunch {
    pub wrapper: String,
    pub runs: Vec<RunId>,
    pub url: String,
    pub await_returns: bool,
}

/// Run one salt call: through the salt bridge when it is enabled and works, else as a
/// `salt` process (queued behind `concurrency` others). `extra_timeout_s` lengthens the
/// deadline after which the call is abandoned (deployments queued behind other state
/// runs), not Salt's `-t`.
fn submit(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    settings: &SaltSettings,
    call: SaltCall,
    extra_timeout_s: u64,
    on_done: impl FnOnce(&mut Blocking, &mut Ctx<Blocking>, Outcome) + 'static,
) {
    // Salt's own timeout stays `-t`: a minion still running the job (a queued state run)
    // keeps answering Salt's find_job and Salt waits for it, while a silent one is given up
    // after `-t`; only the deadline after which the call is abandoned grows.
    let mut cli = settings.clone();
    cli.timeout_s += extra_timeout_s;
    let mut invocation = Invocation {
        argv: call.argv(settings, 0),
        settings: cli,
        on_done: Box::new(on_done),
    };
    if settings.bridge {
        let key = (settings.salt_bin.clone(), settings.config_dir.clone());
        let deadline = Duration::from_secs(settings.timeout_s + extra_timeout_s) + DEADLINE_SLACK;
        log::debug!(
            "salt (bridge) {} {}",
            call.function,
            logsafe::escape(&call.target)
        );
        match super::bridge::submit(
            state,
            ctx,
            &key,
            settings.concurrency,
            call.bridge_request(settings.timeout_s),
            deadline,
            invocation,
        ) {
            Ok(()) => return,
            Err(back) => invocation = back,
        }
    }
    cli::run(state, ctx, invocation);
}

/// The last lines of salt's stderr, for error messages: escaped and clipped, as any
/// text from outside (a minion's words reach salt's stderr).
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("[WARNING ]"))
        .collect();
    let start = lines.len().saturating_sub(3);
    logsafe::clip(&lines[start..].join(" | "), logsafe::REASON_MAX)
}

pub(crate) fn resolve(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    settings: SaltSettings,
    target: String,
    target_type: SaltTargetType,
    from_cache: bool,
) {
    if from_cache
        && settings.bridge
        && let Some(mut res) = super::keymatch::from_accepted_keys(
            settings.config_dir.as_deref(),
            target_type,
            &target,
        )
    {
        res.refuse_unplain_ids();
        log::debug!(
            "salt match {}: {} minion(s) from the accepted keys",
            logsafe::escape(&target),
            res.live.len()
        );
        state.reply(id, Ok(BlockingReply::Resolved(res)));
        return;
    }
    let mut call = SaltCall::new(target_type, &target, "test.ping");
    call.match_only = from_cache;
    submit(
        state,
        ctx,
        &settings,
        call,
        0,
        move |state, _ctx, outcome| {
            let result = match outcome {
                Outcome::Failed(why) => Err(RemoteError::Failed(why)),
                Outcome::Finished {
                    code,
                    stdout,
                    stderr,
                    bridge,
                } => {
                    let returns = salt::parse_returns(&stdout);
                    if returns.by_minion.is_empty() && !returns.no_match {
                        Err(RemoteError::Failed(format!(
                            "salt test.ping gave no usable answer (exit status {}): {}",
                            code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                            tail(&stderr)
                        )))
                    } else {
                        let mut res = Resolution {
                            no_match: returns.no_match && returns.by_minion.is_empty(),
                            from_cache: from_cache && bridge,
                            ..Default::default()
                        };
                        for (minion, value) in &returns.by_minion {
                            match salt::ping_result(value) {
                                MinionResult::Ok => res.live.push(minion.clone()),
                                MinionResult::NoReturn(why) | MinionResult::Failed(why) => {
                                    res.unreachable.push((minion.clone(), why))
                                }
                            }
                        }
                        res.refuse_unplain_ids();
                        Ok(BlockingReply::Resolved(res))
                    }
                }
            };
            state.reply(id, result);
        },
    );
}

/// Start the wrappers of a round with ONE publish: `cmd.run_all` to its minions (`-L`),
/// each minion starting one wrapper per run of `runs`, the command rendered by each
/// minion from `template=jinja` with its own id and key path, so the publish carries
/// nothing secret (the server URL and the run ids) and one salt process serves it all. `python_shell=False`: no shell parses
/// the command. The wrapper's arrival is the proof of launch; a minion whose
/// `cmd.run_all` failed fails at once with Salt's words, one that did not return keeps
/// Salt's words in `silent` for the pick-up deadline. Without `await_returns` the salt
/// bridge only publishes: every minion the master published to counts as launched.
pub(crate) fn launch(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    settings: SaltSettings,
    launch: SaltLaunch,
    targets: Vec<LaunchTarget>,
) {
    let SaltLaunch {
        wrapper,
        runs,
        url,
        await_returns,
    } = launch;
    let minions: Vec<String> = targets.into_iter().map(|t| t.machine).collect();
    let mut call = salt::launch_call(&minions, &wrapper, &runs, &url);
    call.returns = await_returns;
    submit(
        state,
        ctx,
        &settings,
        call,
        0,
        move |state, _ctx, outcome| {
            let outcomes = match outcome {
                Outcome::Failed(why) => runs
                    .iter()
                    .flat_map(|run| {
                        minions.iter().map(|machine| {
                            let failed = MinionOutcome {
                                machine: machine.clone(),
                                result: Err(why.clone()),
                                silent: None,
                                unreachable: None,
                                server: None,
                            };
                            (*run, failed)
                        })
                    })
                    .collect(),
                Outcome::Finished { stdout, stderr, .. } => salt::launch_outcomes(
                    &runs,
                    &minions,
                    &salt::parse_returns(&stdout),
                    &tail(&stderr),
                ),
            };
            let mut logged = std::collections::HashSet::new();
            for (_, o) in &outcomes {
                if let Err(e) = &o.result
                    && logged.insert((&o.machine, e))
                {
                    log::warn!(
                        "launching the wrapper on {} failed: {e}",
                        logsafe::clip(&o.machine, logsafe::NAME_MAX)
                    );
                }
            }
            state.reply(id, Ok(BlockingReply::Launched(outcomes)));
        },
    );
}

pub(crate) fn deploy(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    settings: SaltSettings,
    minions: Vec<String>,
    wrapper_path: String,
    wrapper_source: Option<String>,
) {
    // Hashing and copying the wrapper binary (a few MiB) is a helper process's work, not
    // this loop's.
    let operator = wrapper_source.is_some();
    let (args, source) = match wrapper_source {
        Some(source) => (vec!["--hash-wrapper".to_string()], source),
        None => {
            let mut args = vec!["--publish-wrapper".to_string()];
            args.extend(settings.config_dir.clone());
            (
                args,
                format!("salt://{}", super::super::helpers::PUBLISHED_WRAPPER),
            )
        }
    };
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    super::super::helpers::run_helper(
        state,
        ctx,
        &args,
        None,
        super::super::helpers::PUBLISH_DEADLINE,
        move |state, ctx, out| {
            let hash = out.and_then(|stdout| {
                let hash = String::from_utf8_lossy(&stdout).trim().to_string();
                match hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    true => Ok(hash),
                    false => Err(HelperFailure::NoHash {
                        answer: logsafe::cut(&hash, 200),
                    }),
                }
            });
            match hash {
                Ok(hash) => deploy_published(
                    state,
                    ctx,
                    id,
                    settings,
                    minions,
                    wrapper_path,
                    source,
                    hash,
                    operator,
                ),
                Err(why) => state.reply(id, Err(RemoteError::Failed(why.to_string()))),
            }
        },
    );
}

/// The deployment proper, once the wrapper is published and hashed.
#[allow(clippy::too_many_arguments)]
fn deploy_published(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    settings: SaltSettings,
    minions: Vec<String>,
    wrapper_path: String,
    source: String,
    hash: String,
    operator: bool,
) {
    if minions.is_empty() {
        state.reply(
            id,
            Ok(BlockingReply::Deployed {
                outcomes: Vec::new(),
                hash,
            }),
        );
        return;
    }
    // An execution function, not a state run: it neither waits for nor holds the
    // minion's state lock (a user's highstate may hold it for minutes).
    let call = salt::deploy_call(&[], &wrapper_path, &source, (!operator).then_some(&*hash));
    let attempt = DeployAttempt {
        id,
        settings,
        call,
        hash,
        attempts_left: DEPLOY_ATTEMPTS,
        settled: Vec::new(),
    };
    deploy_to(state, ctx, attempt, minions);
}

/// How many times a deployment is tried on a minion whose state run failed.
const DEPLOY_ATTEMPTS: u32 = 2;

/// One deployment call, across its attempts.
struct DeployAttempt {
    id: CallId,
    settings: SaltSettings,
    call: SaltCall,
    hash: String,
    attempts_left: u32,
    /// Minions whose outcome is final.
    settled: Vec<MinionOutcome>,
}

/// Runs the deployment (`salt::deploy_call`) on `minions`. Minions whose deployment failed are tried again while
/// attempts remain (silent minions are not: Salt already waited for them); then every
/// outcome is answered at once.
fn deploy_to(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    mut attempt: DeployAttempt,
    minions: Vec<String>,
) {
    let mut call = attempt.call.clone();
    call.target = minions.join(",");
    // Copying the wrapper to many minions at once takes a while: the deadline leaves room.
    let settings = attempt.settings.clone();
    let extra = DEPLOY_TRANSFER_ALLOWANCE.as_secs();
    submit(
        state,
        ctx,
        &settings,
        call,
        extra,
        move |state, ctx, outcome| {
            attempt.attempts_left -= 1;
            let returns = match &outcome {
                Outcome::Finished { stdout, .. } => salt::parse_returns(stdout),
                Outcome::Failed(_) => salt::Returns::default(),
            };
            let mut retry = Vec::new();
            for machine in minions {
                let mut silent = None;
                let result = match (&outcome, returns.by_minion.get(&machine)) {
                    (Outcome::Failed(why), _) => Err(why.clone()),
                    (_, Some(value)) => match salt::managed_result(value) {
                        MinionResult::Ok => Ok(()),
                        MinionResult::NoReturn(why) => {
                            silent = Some(why.clone());
                            Err(why)
                        }
                        MinionResult::Failed(why) if attempt.attempts_left > 0 => {
                            log::warn!(
                                "wrapper deployment on {} failed ({why}); trying again",
                                logsafe::clip(&machine, logsafe::NAME_MAX)
                            );
                            retry.push(machine);
                            continue;
                        }
                        MinionResult::Failed(why) => {
                            Err(format!("wrapper deployment failed: {why}"))
                        }
                    },
                    (Outcome::Finished { stderr, .. }, None) => {
                        Err(format!("salt returned nothing: {}", tail(stderr)))
                    }
                };
                attempt.settled.push(MinionOutcome {
                    machine,
                    result,
                    silent,
                    unreachable: None,
                    server: None,
                });
            }
            if retry.is_empty() {
                let outcomes = std::mem::take(&mut attempt.settled);
                let hash = std::mem::take(&mut attempt.hash);
                state.reply(attempt.id, Ok(BlockingReply::Deployed { outcomes, hash }));
            } else {
                deploy_to(state, ctx, attempt, retry);
            }
        },
    );
}
