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
use crate::wire::link::{ConnId, HubReply, HubRequest, MainToHub, WrapperHello, WrapperVerdict};
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
        HubRequest::WrapperHello(hello) => {
            let run = hello.run;
            if !core.recovering && !core.runs.contains_key(&run) && hello.resume_key.is_some() {
                // Maybe a wrapper that was declared lost, coming back after its run ended.
                core.db_call(
                    DbRequest::RunDetails(run),
                    DbWait::Reconcile(id, Box::new(hello)),
                );
                return;
            }
            answer_hello(core, id, hello);
        }
        other => log::warn!("hub made a call main does not serve: {other:?}"),
    }
}

fn answer_hello(core: &mut Main, id: CallId, hello: WrapperHello) {
    let WrapperHello {
        conn,
        peer,
        run,
        machine,
        token,
        resume_key,
        wrapper_version,
        pid,
        ..
    } = hello;
    let verdict = vet_hello(core, conn, run, &machine, token, resume_key);
    match &verdict {
        WrapperVerdict::Welcome { .. } => log::info!(
            "run {run}: wrapper {wrapper_version} on {machine} (pid {pid}, from {peer}) connected"
        ),
        WrapperVerdict::Reject { code, message } => {
            log::warn!("run {run}: wrapper on {machine} from {peer} rejected ({code:?}): {message}")
        }
    }
    if matches!(verdict, WrapperVerdict::Welcome { .. }) {
        super::ui::wrapper_welcomed(core, run, &machine, &wrapper_version);
        core.db_call(
            DbRequest::UpdateTarget {
                run,
                machine,
                update: TargetUpdate {
                    wrapper_version: Some(wrapper_version),
                    ..Default::default()
                },
            },
            DbWait::Write("a wrapper version"),
        );
    }
    core.reply_hub(id, HubReply::Verdict(verdict));
}

/// db's answer about the run of a wrapper whose run is not in flight: a target recorded
/// as lost whose wrapper proves its session (resume key) is reopened, with its run, and
/// the wrapper re-attached; anything else is rejected.
pub fn reconcile(
    core: &mut Main,
    id: CallId,
    hello: WrapperHello,
    result: Result<crate::roles::db::protocol::DbReply, CallError>,
) {
    use crate::roles::db::protocol::DbReply;
    let (record, mut details) = match result {
        Ok(DbReply::RunDetails(Some(found))) => found,
        Ok(_) => return answer_hello(core, id, hello),
        Err(e) => {
            log::error!("could not look up run {}: {e}", hello.run);
            let verdict = reject(
                RejectCode::RetryLater,
                "the server could not look the run up",
            );
            core.reply_hub(id, HubReply::Verdict(verdict));
            return;
        }
    };
    let proven = hello.resume_key.as_ref().is_some_and(|k| {
        core.secret
            .verify_resume_key(hello.run, &hello.machine, &k.0)
    });
    let Some(target) = details
        .iter_mut()
        .find(|d| d.record.machine == hello.machine)
    else {
        return answer_hello(core, id, hello);
    };
    if target.record.reason != Some(TargetReason::Lost)
        || !proven
        || core.runs.contains_key(&record.id)
    {
        let verdict = if target.record.state == TargetState::Finished {
            reject(
                RejectCode::Finished,
                format!(
                    "the outcome of {} in run {} is already recorded",
                    hello.machine, hello.run
                ),
            )
        } else {
            reject(
                RejectCode::UnknownRun,
                format!("run {} is not in flight", hello.run),
            )
        };
        core.reply_hub(id, HubReply::Verdict(verdict));
        return;
    }
    log::info!(
        "run {}: the wrapper on {} came back after being declared lost; reconciling",
        record.id,
        hello.machine
    );
    target.record.state = TargetState::Running;
    target.record.reason = None;
    target.record.exit_code = None;
    target.record.ended = None;
    let job = record.job.clone();
    let run = record.id;
    core.event(
        "target_reconciled",
        Some(&job),
        Some(run),
        Some(&hello.machine),
        "its wrapper came back after the target was declared lost; the run is reopened".into(),
    );
    core.db_call(
        DbRequest::UpdateRun {
            run,
            update: crate::roles::db::runs::RunUpdate {
                state: Some(crate::wire::records::RunState::Running),
                ..Default::default()
            },
        },
        DbWait::Write("a reopened run"),
    );
    reopen_target(core, run, &hello.machine);
    super::recovery::restore(core, record, details);
    answer_hello(core, id, hello);
}

/// Record that a target declared lost is running again (its final outcome follows).
fn reopen_target(core: &mut Main, run: RunId, machine: &str) {
    core.db_call(
        DbRequest::UpdateTarget {
            run,
            machine: machine.to_string(),
            update: TargetUpdate {
                state: Some(TargetState::Running),
                ..Default::default()
            },
        },
        DbWait::Write("a reopened target"),
    );
}

fn vet_hello(
    core: &mut Main,
    conn: ConnId,
    run: RunId,
    machine: &str,
    token: Option<Redacted>,
    resume_key: Option<Redacted>,
) -> WrapperVerdict {
    if core.recovering {
        return reject(
            RejectCode::RetryLater,
            "the server is loading the runs in flight",
        );
    }
    let Some(active) = core.runs.get(&run) else {
        return reject(
            RejectCode::UnknownRun,
            format!("run {run} is not in flight"),
        );
    };
    let job = active.job.clone();
    let wait_for_go = active.prestaged && !active.go_sent;
    let slot_in_ms = active
        .slot
        .filter(|_| wait_for_go)
        .map(|slot| u64::try_from(slot - chrono::Utc::now().timestamp_millis()).unwrap_or(0));
    let heartbeat_s = core.config.saltpeter.heartbeat_s;
    let Some(target) = active.targets.get(machine) else {
        return reject(
            RejectCode::UnknownRun,
            format!("{machine} is not a target of run {run}"),
        );
    };
    // A resume key proves an earlier welcome; the launch token works until its session
    // has been confirmed by a first message (so a welcome lost in a crash can be retried).
    let (authentic, by_token) = match (&token, &resume_key) {
        (_, Some(key)) => (core.secret.verify_resume_key(run, machine, &key.0), false),
        (Some(token), None) => (
            !target.token_used && core.secret.verify_launch_token(run, machine, &token.0),
            true,
        ),
        (None, None) => (false, false),
    };
    if !authentic {
        return reject(
            RejectCode::BadToken,
            "the token or resume key is not valid for this run and machine (a launch token works once)",
        );
    }
    let lost_returning =
        target.reason == Some(TargetReason::Lost) && !target.finishing && !by_token;
    if lost_returning {
        log::info!("run {run}: the wrapper on {machine} came back after being declared lost");
        let job = job.name.clone();
        core.event(
            "target_reconciled",
            Some(&job),
            Some(run),
            Some(machine),
            "its wrapper came back after the target was declared lost".into(),
        );
        reopen_target(core, run, machine);
    } else if target.is_settled() || target.finishing {
        return reject(
            RejectCode::Finished,
            format!("the outcome of {machine} in run {run} is already recorded"),
        );
    }
    let Some(target) = core.target_mut(run, machine) else {
        return reject(RejectCode::UnknownRun, "run ended");
    };
    if lost_returning {
        target.state = TargetState::Running;
        target.reason = None;
        target.exit_code = None;
        target.ended = None;
    }
    if by_token {
        target.token_used = true;
        target.unconfirmed = Some(conn);
    }
    let old = target.conn.replace(conn);
    target.last_seen = Some(Instant::now());
    let acked_seq = target.acked_seq;
    let kill_wanted = target.kill_wanted;
    if let Some(old) = old {
        core.sessions.remove(&old);
        core.to_hub(MainToHub::CloseWrapper { conn: old });
    }
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
    let key = core.secret.resume_key(run, machine);
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
        slot_in_ms,
    }
}

/// The target of a bound connection, with its liveness clock refreshed. The first
/// message of a session opened with the launch token confirms it: from then on the token
/// is spent for good, also across restarts.
fn touch(core: &mut Main, conn: ConnId) -> Option<(RunId, String)> {
    let (run, machine) = core.sessions.get(&conn)?.clone();
    let mut confirmed = false;
    if let Some(t) = core.target_mut(run, &machine) {
        t.last_seen = Some(Instant::now());
        if t.unconfirmed == Some(conn) {
            t.unconfirmed = None;
            confirmed = true;
        }
    }
    if confirmed {
        core.db_call(
            DbRequest::UpdateTarget {
                run,
                machine: machine.clone(),
                update: TargetUpdate {
                    token_used: Some(true),
                    ..Default::default()
                },
            },
            DbWait::Write("a spent launch token"),
        );
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
            if let Some(t) = core.target_mut(run, &machine)
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
            let Some(t) = core.target_mut(run, &machine) else {
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
                if let Some(t) = core.target_mut(run, &machine) {
                    if t.conn == Some(conn) {
                        t.conn = None;
                    }
                    if t.unconfirmed == Some(conn) {
                        // Gone before saying anything after the welcome: maybe the welcome
                        // never arrived, so the token may be presented again.
                        t.unconfirmed = None;
                        t.token_used = false;
                    }
                }
            }
        }
        other => log::warn!("hub sent a request main does not take one-way: {other:?}"),
    }
}

/// Settle a target whose `exited` arrived, once all its output is committed.
fn settle_if_complete(core: &mut Main, run: RunId, machine: &str) {
    let Some(t) = core.target(run, machine) else {
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
            // Not acked: the wrapper keeps the frame. Closing its connection makes it
            // reconnect and resend everything after the last acknowledged seq, so the gap
            // closes once the database stores again.
            log::error!("run {run}: output of {machine} not stored: {e}");
            if let Some(conn) = core.target_mut(run, machine).and_then(|t| t.conn.take()) {
                core.sessions.remove(&conn);
                core.to_hub(MainToHub::CloseWrapper { conn });
            }
            return;
        }
    };
    let Some(t) = core.target_mut(run, machine) else {
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
    let Some(t) = core.target_mut(run, machine) else {
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
    if core.stopping || core.db_trouble.is_some() {
        // Wrappers cannot reach a stopping daemon, and are refused while the database
        // cannot store: their silence says nothing. The next start gives them the
        // recovery grace.
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
        let job = core.runs.get(&run).map(|r| r.job.name.clone());
        core.event(
            "target_lost",
            job.as_deref(),
            Some(run),
            Some(&machine),
            format!("no word from its wrapper for {silence:?}"),
        );
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
    let job = active.job.name.clone();
    core.event(
        "kill_requested",
        Some(&job),
        Some(run),
        machine,
        format!("kill requested by an operator; {reached} target(s) reached"),
    );
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
