//! Several masters on one database (docs/ha.md, "Several masters, one database"): the
//! router of main's Salt calls. Servers on one PostgreSQL database each drive their own
//! salt-master; the leader drives every run as always, and only its Salt calls are
//! spread over the servers whose masters reach the minions:
//!
//! 1. `Main::blocking_call` asks [`route`] first. With a shared database, a salt call
//!    and other servers alive (`salt_servers`, from db), the call becomes a *composite*
//!    under the caller's id: a `Resolve` of a job's target expression is asked of every
//!    server (this one through its own blocking); a `Launch`, a `Deploy` and a `Resolve`
//!    of a list are split by owner (`rules::masters`). Otherwise the call goes to this
//!    server's blocking unchanged.
//! 2. Another server's part travels through the database: `SendSaltCall` writes a
//!    `salt_calls` row (the request in bincode; nothing secret: a launch carries the
//!    wrapper URL and run ids, never a token), its db takes it, its main makes the call
//!    through its own master (`serve_salt.rs`: with its own `SaltSettings`) and writes
//!    the reply; this server's db collects it ([`replies`]).
//! 3. Each part's answer goes to its composite ([`answered`] for this server's
//!    blocking); once every part answered (or missed its deadline, [`expire`]) the parts
//!    merge into one reply for the caller's id, woken as for any blocking call.
//!
//! Nothing waits on a server that never answers: its part fails at its deadline (the
//! ping timeout and 15 s; twice the ping timeout for launches and deployments), named
//! in the log and in the reasons of its minions. Rows nobody finishes expire in db.

use std::time::{Duration, Instant};

use crate::ipc::rpc::{CallError, CallId, RemoteError};
use crate::roles::main::rules::masters::{self, Owners, Part};
use crate::roles::main::state::delegation::{Composite, Kind, PartState, RemotePart};
use crate::roles::main::state::{DbWait, Main};
use crate::wire::db::{DbReply, DbRequest, MinionKeys};
use crate::wire::link::{
    BlockingReply, BlockingRequest, ExecutorKind, LaunchTarget, SaltTargetType,
};

use super::serve_salt::kind_name;

/// Minions remembered from resolutions at most (a fleet's worth); past it the memory
/// starts again.
const MAX_REACHED: usize = 200_000;

/// Step 1: `Some(req)` when the call goes to this server's blocking unchanged; `None`
/// when it became a composite under `id`.
pub(crate) fn route(core: &mut Main, id: CallId, req: BlockingRequest) -> Option<BlockingRequest> {
    if !core.ha.shared || core.delegation.peers.is_empty() {
        return Some(req);
    }
    let me = core.ha.server.clone();
    let plan: Option<Vec<(String, BlockingRequest, Vec<String>)>> = match &req {
        BlockingRequest::Resolve {
            target_type,
            target,
            ..
        } if *target_type != SaltTargetType::List => {
            let mut parts = vec![(me.clone(), req.clone(), Vec::new())];
            for peer in &core.delegation.peers {
                parts.push((peer.clone(), req.clone(), Vec::new()));
            }
            log::info!(
                "resolving {target} through {me} and {}",
                core.delegation.peers.join(", ")
            );
            Some(parts)
        }
        BlockingRequest::Resolve { target, .. } => {
            let minions: Vec<String> = target
                .split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect();
            split(core, &req, &minions)
        }
        BlockingRequest::Launch {
            executor: ExecutorKind::Salt,
            targets,
            ..
        } => {
            let minions: Vec<String> = targets.iter().map(|t| t.machine.clone()).collect();
            split(core, &req, &minions)
        }
        BlockingRequest::Deploy { minions, .. } => split(core, &req, minions),
        _ => None,
    };
    let Some(plan) = plan else {
        return Some(req);
    };
    let kind = match &req {
        BlockingRequest::Launch { runs, .. } => Kind::Launch(runs.clone()),
        BlockingRequest::Deploy { .. } => Kind::Deploy,
        _ => Kind::Resolve,
    };
    let broadcast = plan.iter().all(|(_, _, minions)| minions.is_empty());
    let wait = part_wait(core, &req);
    core.delegation.calls.insert(
        id,
        Composite {
            kind,
            broadcast,
            parts: plan
                .iter()
                .map(|(server, _, minions)| PartState {
                    server: server.clone(),
                    minions: minions.clone(),
                    answer: None,
                })
                .collect(),
        },
    );
    for (index, (server, part, minions)) in plan.into_iter().enumerate() {
        if server == me {
            let local = core.local_blocking_call(part);
            core.delegation.local_parts.insert(local, (id, index));
        } else {
            if !minions.is_empty() {
                log::info!(
                    "{} of {} minion(s) goes through {server}'s master",
                    kind_name(&part),
                    minions.len()
                );
            }
            send_part(core, id, index, &server, &part, wait);
        }
    }
    None
}

/// The call's minions by owner, one request per owner; `None` when every one is this
/// server's (the call goes unchanged).
fn split(
    core: &Main,
    req: &BlockingRequest,
    minions: &[String],
) -> Option<Vec<(String, BlockingRequest, Vec<String>)>> {
    let d = &core.delegation;
    let owners = Owners {
        me: &core.ha.server,
        own: &d.own,
        published: &d.published,
        peers: &d.peers,
        reached: &d.reached,
    };
    let parts = owners.split(minions);
    if parts.iter().all(|(server, _)| *server == core.ha.server) {
        return None;
    }
    Some(
        parts
            .into_iter()
            .map(|(server, minions)| {
                let part = with_minions(req, &minions);
                (server, part, minions)
            })
            .collect(),
    )
}

/// `req` for `minions` only.
fn with_minions(req: &BlockingRequest, minions: &[String]) -> BlockingRequest {
    let mut part = req.clone();
    match &mut part {
        BlockingRequest::Resolve { target, .. } => *target = minions.join(","),
        BlockingRequest::Launch { targets, .. } => {
            *targets = minions
                .iter()
                .map(|machine| LaunchTarget {
                    machine: machine.clone(),
                    token: None,
                })
                .collect();
        }
        BlockingRequest::Deploy { minions: m, .. } => *m = minions.to_vec(),
        _ => {}
    }
    part
}

/// How long another server has to answer its part.
fn part_wait(core: &Main, req: &BlockingRequest) -> Duration {
    let ping = core.config.saltpeter.ping_timeout_s;
    let secs = match req {
        BlockingRequest::Resolve { salt, .. } => salt.timeout_s + 15,
        _ => (2 * ping + 15).min(110),
    };
    Duration::from_secs(secs)
}

/// Step 2, asking: write the part's row; its id is where the answer will come from.
fn send_part(
    core: &mut Main,
    call: CallId,
    index: usize,
    server: &str,
    req: &BlockingRequest,
    wait: Duration,
) {
    let request = match bincode::serialize(req) {
        Ok(bytes) => bytes,
        Err(e) => {
            part_answered(
                core,
                call,
                index,
                Err(format!("could not encode the call: {e}")),
            );
            return;
        }
    };
    let to = server.to_string();
    core.db_call(
        DbRequest::SendSaltCall {
            from: core.ha.server.clone(),
            to,
            request,
        },
        DbWait::then(move |core, _, result| match result {
            Ok(DbReply::SaltCallSent(row)) => {
                core.delegation.remote_parts.insert(
                    row,
                    RemotePart {
                        call,
                        index,
                        deadline: Instant::now() + wait,
                        wait,
                    },
                );
            }
            Ok(other) => part_answered(
                core,
                call,
                index,
                Err(format!("db answered the call's row with {other:?}")),
            ),
            Err(e) => part_answered(
                core,
                call,
                index,
                Err(format!("could not write the call into the database: {e}")),
            ),
        }),
    );
}

/// A blocking reply (or its failure) that arrived: `Some` hands it back for the caller
/// waiting on `id`; `None` when it was a part of a composite or a call served for
/// another server (step 3).
pub(crate) fn answered(
    core: &mut Main,
    id: CallId,
    result: Result<BlockingReply, CallError>,
) -> Option<Result<BlockingReply, CallError>> {
    if let Some((call, index)) = core.delegation.local_parts.remove(&id) {
        part_answered(core, call, index, result.map_err(|e| e.to_string()));
        return None;
    }
    if let Some((row, from)) = core.delegation.serving.remove(&id) {
        super::serve_salt::answer_served(core, row, &from, result.map_err(|e| e.to_string()));
        return None;
    }
    // The composite itself expired or lost blocking: its parts are dropped as they come.
    if core.delegation.calls.remove(&id).is_some() {
        log::warn!("salt call {id} through several servers ended before its parts: {result:?}");
    }
    Some(result)
}

fn part_answered(
    core: &mut Main,
    call: CallId,
    index: usize,
    answer: Result<BlockingReply, String>,
) {
    let Some(composite) = core.delegation.calls.get_mut(&call) else {
        return;
    };
    let Some(part) = composite.parts.get_mut(index) else {
        return;
    };
    if let Err(why) = &answer {
        log::warn!("salt call {call}: {}'s part failed: {why}", part.server);
    }
    part.answer = Some(answer);
    if composite.parts.iter().any(|p| p.answer.is_none()) {
        return;
    }
    let Some(composite) = core.delegation.calls.remove(&call) else {
        return;
    };
    let merged = merge(core, composite);
    if core.links.blocking_calls.finish(call).is_some() {
        core.blocking_reply_for(call, merged);
    }
}

/// The parts' answers as one reply.
fn merge(core: &mut Main, composite: Composite) -> Result<BlockingReply, CallError> {
    let me = core.ha.server.clone();
    let failed = |why: String| CallError::Remote(RemoteError::Failed(why));
    let wrong = |server: &str, reply: &BlockingReply| format!("{server} answered with {reply:?}");
    match composite.kind {
        Kind::Resolve => {
            let parts = parts_of(composite.parts, |server, reply| match reply {
                BlockingReply::Resolved(res) => Ok(res),
                other => Err(wrong(server, &other)),
            });
            let (merged, reached) = masters::merge_resolutions(&me, parts).map_err(failed)?;
            if composite.broadcast {
                let d = &mut core.delegation;
                if d.reached.len() + reached.len() > MAX_REACHED {
                    d.reached.clear();
                }
                d.reached.extend(reached);
            }
            Ok(BlockingReply::Resolved(merged))
        }
        Kind::Launch(runs) => {
            let parts = parts_of(composite.parts, |server, reply| match reply {
                BlockingReply::Launched(outcomes) => Ok(outcomes),
                other => Err(wrong(server, &other)),
            });
            Ok(BlockingReply::Launched(masters::merge_launches(
                &runs, parts,
            )))
        }
        Kind::Deploy => {
            let parts = parts_of(composite.parts, |server, reply| match reply {
                BlockingReply::Deployed { outcomes, hash } => Ok((outcomes, hash)),
                other => Err(wrong(server, &other)),
            });
            let (outcomes, hash) = masters::merge_deploys(parts).map_err(failed)?;
            Ok(BlockingReply::Deployed { outcomes, hash })
        }
    }
}

fn parts_of<T>(
    parts: Vec<PartState>,
    take: impl Fn(&str, BlockingReply) -> Result<T, String>,
) -> Vec<Part<T>> {
    parts
        .into_iter()
        .map(|p| {
            let answer = p
                .answer
                .unwrap_or_else(|| Err("no answer".to_string()))
                .and_then(|reply| take(&p.server, reply));
            Part {
                server: p.server,
                minions: p.minions,
                answer,
            }
        })
        .collect()
}

/// db's answers to this server's calls (step 2): each to its part.
pub(crate) fn replies(core: &mut Main, rows: Vec<(i64, Vec<u8>)>) {
    for (row, bytes) in rows {
        let Some(part) = core.delegation.remote_parts.remove(&row) else {
            log::info!("salt call row {row} answered after its deadline; dropped");
            continue;
        };
        let answer = match bincode::deserialize::<Result<BlockingReply, String>>(&bytes) {
            Ok(answer) => answer,
            Err(e) => Err(format!(
                "its answer could not be read ({e}): another build?"
            )),
        };
        part_answered(core, part.call, part.index, answer);
    }
}

/// Parts whose server did not answer in time fail (once a second, from the loop).
pub(crate) fn expire(core: &mut Main, now: Instant) {
    let late: Vec<i64> = core
        .delegation
        .remote_parts
        .iter()
        .filter(|(_, p)| p.deadline <= now)
        .map(|(row, _)| *row)
        .collect();
    for row in late {
        let Some(part) = core.delegation.remote_parts.remove(&row) else {
            continue;
        };
        let server = core
            .delegation
            .calls
            .get(&part.call)
            .and_then(|c| c.parts.get(part.index))
            .map_or_else(|| "another server".to_string(), |p| p.server.clone());
        log::error!(
            "salt call row {row}: {server} did not answer within {} s; its minions are \
             not reached through it this time",
            part.wait.as_secs()
        );
        let why = format!("did not answer within {} s", part.wait.as_secs());
        let (kind, runs) = match core.delegation.calls.get(&part.call).map(|c| &c.kind) {
            Some(Kind::Launch(runs)) => ("a launch", runs.clone()),
            Some(Kind::Deploy) => ("a wrapper deployment", Vec::new()),
            _ => ("a resolution", Vec::new()),
        };
        // In the audit trail too (`saltpeterctl events --kind salt_server_silent`): a
        // resolution that missed a server leaves no other trace in the run.
        let message = format!(
            "{server} {why} to {kind}; the minions only its master reaches were not \
             reached through it"
        );
        match runs.as_slice() {
            [] => core.event("salt_server_silent", None, None, None, message),
            runs => {
                for run in runs {
                    core.event(
                        "salt_server_silent",
                        None,
                        Some(*run),
                        None,
                        message.clone(),
                    );
                }
            }
        }
        part_answered(core, part.call, part.index, Err(why));
    }
}

/// db's news of the other servers alive.
pub(crate) fn peers(core: &mut Main, peers: Vec<String>) {
    core.delegation.peers = peers;
}

/// db's news of the minion keys: this master's minions and the others' keys.
pub(crate) fn keys(core: &mut Main, keys: MinionKeys) {
    let d = &mut core.delegation;
    d.own = keys.own.into_iter().collect();
    d.published.clear();
    d.keys.clear();
    for (server, minion, key) in keys.others {
        d.published
            .entry(minion.clone())
            .or_default()
            .push(server.clone());
        d.keys.entry(minion).or_default().push((server, key));
    }
    log::info!(
        "minion keys: {} accepted by this server's master, {} published by other servers",
        d.own.len(),
        d.keys.len()
    );
}
