//! Wrapper sessions: what main does with the hub's wrapper traffic.
//!
//! - `hello`: the run and target must be in flight and not finished; the launch token is
//!   accepted once (HMAC, constant time), after that only the resume key; the welcome
//!   carries the job and the last committed seq.
//! - output goes to db; the ack goes back only when db has committed it.
//! - `exited` settles the target once every frame up to `end_seq` is committed; `done`
//!   follows once the outcome is recorded.
//! - liveness is judged on the server clock: no frame for 3 heartbeats -> `lost` (253).

use std::time::{Duration, Instant};

use super::run_flow::finish_target;
use super::runs::{PendingExit, exit_outcome};
use super::{DbWait, Main};
use crate::ipc::CallId;
use crate::ipc::rpc::CallError;
use crate::roles::db::protocol::{DbReply, DbRequest};
use crate::roles::db::runs::TargetUpdate;
use crate::wire::Redacted;
use crate::wire::link::{ConnId, HubReply, HubRequest, MainToHub, WrapperVerdict};
use crate::wire::records::{RunId, TargetReason, TargetState};
use crate::wire::wrapper::{JobSpec, KillReason, RejectCode, ServerMsg};

fn reject(code: RejectCode, message: impl Into<String>) -> WrapperVerdict {
    WrapperVerdict::Reject {
        code,
        message: message.into(),
    }
}

pub fn handle_call(core: &mut Main, id: CallId, req: HubRequest) {
    match req {
        HubRequest::WrapperHello {
            conn,
            peer,
            run,
            machine,
            token,
            resume_key,
            wrapper_version,
            pid,
            ..
        } => {
            let verdict = vet_hello(core, conn, run, &machine, token, resume_key);
            match &verdict {
                WrapperVerdict::Welcome { .. } => log::info!(
                    "run {run}: wrapper {wrapper_version} on {machine} (pid {pid}, from {peer}) connected"
                ),
                WrapperVerdict::Reject { code, message } => log::warn!(
                    "run {run}: wrapper on {machine} from {peer} rejected ({code:?}): {message}"
                ),
            }
            if let WrapperVerdict::Welcome { resume_key, .. } = &verdict {
                super::ui::wrapper_welcomed(core, run, &machine, &wrapper_version);
                // The session must survive a restart: record it before welcoming.
                core.db_call(
                    DbRequest::UpdateTarget {
                        run,
                        machine,
                        update: TargetUpdate {
                            resume_key_sha256: Some(super::tokens::key_digest(&resume_key.0)),
                            token_used: Some(true),
                            wrapper_version: Some(wrapper_version),
                            ..Default::default()
                        },
                    },
                    DbWait::Welcome(id, Box::new(verdict)),
                );
            } else {
                core.reply_hub(id, HubReply::Verdict(verdict));
            }
        }
        other => log::warn!("hub made a call main does not serve: {other:?}"),
    }
}

fn vet_hello(
    core: &mut Main,
    conn: ConnId,
    run: RunId,
    machine: &str,
    token: Option<Redacted>,
    resume_key: Option<Redacted>,
) -> WrapperVerdict {
    let Some(active) = core.runs.get(&run) else {
        return reject(
            RejectCode::UnknownRun,
            format!("run {run} is not in flight"),
        );
    };
    let job = active.job.clone();
    let wait_for_go = active.prestaged && !active.go_sent;
    let heartbeat_s = core.config.saltpeter.heartbeat_s;
    let Some(target) = core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(machine))
    else {
        return reject(
            RejectCode::UnknownRun,
            format!("{machine} is not a target of run {run}"),
        );
    };
    if target.is_settled() || target.finishing {
        return reject(
            RejectCode::Finished,
            format!("the outcome of {machine} in run {run} is already recorded"),
        );
    }
    let authentic = match (token, resume_key) {
        (_, Some(key)) => target.resume_key.as_deref().is_some_and(|expected| {
            super::tokens::keys_match(expected, &super::tokens::key_digest(&key.0))
        }),
        (Some(token), None) => {
            !target.token_used && core.secret.verify_launch_token(run, machine, &token.0)
        }
        (None, None) => false,
    };
    // `core.secret` was borrowed above only through a shared path; re-borrow the target.
    let Some(target) = core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(machine))
    else {
        return reject(RejectCode::UnknownRun, "run ended");
    };
    if !authentic {
        return reject(
            RejectCode::BadToken,
            "the token or resume key is not valid for this run and machine (a launch token works once)",
        );
    }
    target.token_used = true;
    let key = super::tokens::new_resume_key();
    target.resume_key = Some(super::tokens::key_digest(&key));
    if let Some(old) = target.conn.replace(conn) {
        core.sessions.remove(&old);
        core.to_hub(MainToHub::CloseWrapper { conn: old });
    }
    let target = match core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(machine))
    {
        Some(t) => t,
        None => return reject(RejectCode::UnknownRun, "run ended"),
    };
    target.last_seen = Some(Instant::now());
    let acked_seq = target.acked_seq;
    let kill_wanted = target.kill_wanted;
    core.sessions.insert(conn, (run, machine.to_string()));
    if kill_wanted {
        let grace_s = job.kill_grace_s;
        core.to_wrapper(
            conn,
            ServerMsg::Kill {
                reason: KillReason::User,
                grace_s,
            },
        );
    }
    WrapperVerdict::Welcome {
        job: JobSpec {
            name: job.name.clone(),
            command: job.command.clone(),
            user: job.user.clone(),
            cwd: job.cwd.clone(),
            env: job.env.clone(),
            timeout_s: job.timeout_s,
            kill_grace_s: job.kill_grace_s,
            heartbeat_s,
            overlap_lock: job.overlap == crate::config::Overlap::Forbid,
            splay_s: job.splay_s,
        },
        resume_key: Redacted(key),
        acked_seq,
        wait_for_go,
    }
}

/// The target of a bound connection, with its liveness clock refreshed.
fn touch(core: &mut Main, conn: ConnId) -> Option<(RunId, String)> {
    let (run, machine) = core.sessions.get(&conn)?.clone();
    if let Some(t) = core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(&machine))
    {
        t.last_seen = Some(Instant::now());
    }
    Some((run, machine))
}

pub fn handle_cast(core: &mut Main, req: HubRequest) {
    match req {
        HubRequest::WrapperStarted { conn, pid } => {
            let Some((run, machine)) = touch(core, conn) else {
                return;
            };
            let now = chrono::Utc::now().timestamp_millis();
            if let Some(t) = core
                .runs
                .get_mut(&run)
                .and_then(|r| r.targets.get_mut(&machine))
                && !t.is_settled()
            {
                t.state = TargetState::Running;
                t.started.get_or_insert(now);
                log::debug!("run {run}: command started on {machine} (pid {pid})");
                core.db_call(
                    DbRequest::UpdateTarget {
                        run,
                        machine,
                        update: TargetUpdate {
                            state: Some(TargetState::Running),
                            started: Some(now),
                            ..Default::default()
                        },
                    },
                    DbWait::Write("a started target"),
                );
                core.wake_run(run);
            }
        }
        HubRequest::WrapperHeartbeat { conn } => {
            touch(core, conn);
        }
        HubRequest::WrapperOutput {
            conn,
            seq,
            stream,
            data,
        } => {
            let Some((run, machine)) = touch(core, conn) else {
                return;
            };
            super::ui::output_arrived(core, run, &machine, seq, &data);
            let limit = core
                .runs
                .get(&run)
                .map(|r| r.job.output_limit)
                .unwrap_or_default();
            core.db_call(
                DbRequest::AppendOutput {
                    run,
                    machine: machine.clone(),
                    seq,
                    stream,
                    data,
                    limit: crate::roles::db::output::OutputLimit {
                        head: limit.head_bytes,
                        tail: limit.tail_bytes,
                    },
                },
                DbWait::Output { run, machine },
            );
        }
        HubRequest::WrapperExited {
            conn,
            end_seq,
            code,
            signal,
            reason,
        } => {
            let Some((run, machine)) = touch(core, conn) else {
                return;
            };
            let (reason, code) = exit_outcome(reason, code, signal);
            let Some(t) = core
                .runs
                .get_mut(&run)
                .and_then(|r| r.targets.get_mut(&machine))
            else {
                return;
            };
            if t.is_settled() {
                // Already recorded (a resent `exited`): confirm again.
                core.to_wrapper(conn, ServerMsg::Done {});
                return;
            }
            t.pending_exit = Some(PendingExit {
                end_seq,
                reason,
                code,
            });
            settle_if_complete(core, run, &machine);
        }
        HubRequest::WrapperGone { conn } => {
            if let Some((run, machine)) = core.sessions.remove(&conn) {
                log::debug!("run {run}: wrapper on {machine} disconnected");
                if let Some(t) = core
                    .runs
                    .get_mut(&run)
                    .and_then(|r| r.targets.get_mut(&machine))
                    && t.conn == Some(conn)
                {
                    t.conn = None;
                }
            }
        }
        other => log::warn!("hub sent a request main does not take one-way: {other:?}"),
    }
}

/// Settle a target whose `exited` arrived, once all its output is committed.
fn settle_if_complete(core: &mut Main, run: RunId, machine: &str) {
    let Some(t) = core.runs.get(&run).and_then(|r| r.targets.get(machine)) else {
        return;
    };
    let Some(exit) = t.pending_exit else {
        return;
    };
    if t.acked_seq >= exit.end_seq {
        finish_target(core, run, machine, exit.reason, exit.code);
    }
}

/// db committed output up to `contiguous_seq`: ack it to the wrapper.
pub fn output_stored(
    core: &mut Main,
    run: RunId,
    machine: &str,
    result: Result<DbReply, CallError>,
) {
    let contiguous = match result {
        Ok(DbReply::OutputStored { contiguous_seq }) => contiguous_seq,
        Ok(other) => {
            log::error!("db answered AppendOutput with {other:?}");
            return;
        }
        Err(e) => {
            // Not acked: the wrapper keeps the frame and resends it.
            log::error!("run {run}: output of {machine} not stored: {e}");
            return;
        }
    };
    let Some(t) = core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(machine))
    else {
        return;
    };
    if contiguous > t.acked_seq {
        t.acked_seq = contiguous;
        if let Some(conn) = t.conn {
            core.to_wrapper(conn, ServerMsg::Ack { seq: contiguous });
        }
    }
    settle_if_complete(core, run, machine);
}

/// db recorded a target's outcome: it is final now; tell its wrapper it may exit.
pub fn target_recorded(
    core: &mut Main,
    run: RunId,
    machine: &str,
    result: Result<DbReply, CallError>,
) {
    let Some(t) = core
        .runs
        .get_mut(&run)
        .and_then(|r| r.targets.get_mut(machine))
    else {
        return;
    };
    t.finishing = false;
    if let Err(e) = result {
        log::error!("run {run}: could not record the outcome of {machine}: {e}");
    }
    t.state = TargetState::Finished;
    let conn = t.conn;
    log::info!(
        "run {run}: {machine} finished ({}, exit {})",
        t.reason.map(|r| r.as_str()).unwrap_or("-"),
        t.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    if let Some(conn) = conn {
        core.to_wrapper(conn, ServerMsg::Done {});
    }
    core.wake_run(run);
}

/// Targets whose wrapper went silent for 3 heartbeats are lost (253).
pub fn check_liveness(core: &mut Main, now: Instant) {
    if core.stopping {
        // Wrappers cannot reach a stopping daemon; their silence says nothing. The next
        // start gives them the recovery grace.
        return;
    }
    let silence = Duration::from_secs(core.config.saltpeter.heartbeat_s.max(1) * 3);
    let mut lost = Vec::new();
    for (run, active) in &core.runs {
        for (machine, t) in &active.targets {
            if t.is_settled() || t.finishing || !t.token_used {
                continue; // not picked up yet: the pickup deadline applies instead
            }
            if t.grace_until.is_some_and(|until| now < until) {
                continue;
            }
            if t.last_seen
                .is_some_and(|seen| now.duration_since(seen) > silence)
            {
                lost.push((*run, machine.clone()));
            }
        }
    }
    for (run, machine) in lost {
        log::warn!("run {run}: no word from the wrapper on {machine} for {silence:?}; lost");
        finish_target(core, run, &machine, TargetReason::Lost, Some(253));
    }
}

/// Deliver a user kill to targets of a run; returns how many were reached or settled.
pub fn kill(core: &mut Main, run: RunId, machine: Option<&str>) -> Result<usize, String> {
    let Some(active) = core.runs.get_mut(&run) else {
        return Err(format!("run {run} is not in flight"));
    };
    if machine.is_none() {
        active.kill_requested = true;
    }
    if let Some(m) = machine
        && !active.targets.contains_key(m)
    {
        return Err(format!("{m} is not a target of run {run}"));
    }
    let grace_s = active.job.kill_grace_s;
    let mut send = Vec::new();
    let mut cancel = Vec::new();
    for (m, t) in active.targets.iter_mut() {
        if machine.is_some_and(|only| only != m) || t.is_settled() || t.finishing {
            continue;
        }
        t.kill_wanted = true;
        match (t.conn, t.token_used) {
            (Some(conn), _) => send.push(conn),
            // Picked up once, disconnected now: delivered when it reconnects.
            (None, true) => {}
            // Never started: it will not run at all.
            (None, false) => cancel.push(m.clone()),
        }
    }
    let reached = send.len() + cancel.len();
    for conn in send {
        core.to_wrapper(
            conn,
            ServerMsg::Kill {
                reason: KillReason::User,
                grace_s,
            },
        );
    }
    for m in cancel {
        finish_target(core, run, &m, TargetReason::Killed, Some(143));
    }
    Ok(reached)
}
