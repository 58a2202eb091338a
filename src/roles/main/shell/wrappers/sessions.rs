//! Wrapper sessions: what main does with the hub's wrapper traffic.
//!
//! - `hello`: vetted in `welcome.rs`; here, a wrapper that comes back after its target was
//!   declared lost is reconciled.
//! - output goes to db; the ack goes back only when db has committed it.
//! - `exited` settles the target once every frame up to `end_seq` is committed; `done`
//!   follows once the outcome is recorded.
//! - liveness is judged on the server clock: no frame for 3 heartbeats -> `lost` (253).

use std::time::Instant;

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::roles::main::health::liveness::Verdict;
use crate::roles::main::rules::tokens;
use crate::roles::main::run::target::exit_outcome;
use crate::roles::main::run::target::{KillAction, PendingExit};
use crate::roles::main::sessions::verdicts::{
    RefusedLine, coming_back, look_up_first, refused_line, reject, silences, start_time,
};
use crate::roles::main::shell::run::effects::{
    apply, finish_target, now_ms, transition, write_target,
};
use crate::roles::main::shell::wrappers::welcome::{answer_hello, check_minion_proof, refuse};
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::TargetUpdate;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::{ConnId, HubReply, HubRequest, WrapperHello};
use crate::wire::records::{Millis, RunId, TargetReason, TargetState};
use crate::wire::wrapper::RejectCode;

pub(crate) fn handle_call(core: &mut Main, id: CallId, req: HubRequest) {
    match req {
        HubRequest::WrapperHello(hello) => {
            let run = hello.run;
            if look_up_first(
                core.flight.is_recovering(),
                core.in_flight(run),
                hello.resume_key.is_some(),
                hello.proof.is_some(),
            ) {
                // Maybe a wrapper that was declared lost, coming back after its run ended.
                core.db_call(
                    DbRequest::RunDetails(run),
                    DbWait::then(move |core, _, result| reconcile(core, id, hello, result)),
                );
                return;
            }
            answer_hello(core, id, hello);
        }
        other => log::warn!("hub made a call main does not serve: {other:?}"),
    }
}

/// db's answer about the run of a wrapper whose run is not in flight: a target recorded
/// as lost whose wrapper proves its session (resume key) is reopened, with its run, and
/// the wrapper re-attached; anything else is rejected.
pub(crate) fn reconcile(
    core: &mut Main,
    id: CallId,
    hello: WrapperHello,
    result: Result<crate::wire::db::DbReply, CallError>,
) {
    let (record, mut details) = match calls::RunDetails::take(result) {
        Ok(Some(found)) => found,
        Ok(None) => return answer_hello(core, id, hello),
        Err(e) => {
            log::error!("could not look up run {}: {e}", hello.run);
            let verdict = reject(
                RejectCode::RetryLater,
                "the server could not look the run up",
            );
            core.links.reply_hub(id, HubReply::Verdict(verdict));
            return;
        }
    };
    if core.in_flight(record.id) {
        // Reopened meanwhile (for a sibling target whose wrapper came back first): the
        // run in flight decides, and reopens this target too if it was lost.
        return answer_hello(core, id, hello);
    }
    let Some(target) = details
        .iter_mut()
        .find(|d| d.record.machine == hello.machine)
    else {
        return answer_hello(core, id, hello);
    };
    // As in `welcome::vet_hello`: a minion key proves targets of Salt jobs only.
    let salt_job = core
        .config
        .jobs
        .get(&record.job)
        .and_then(|e| e.job_ref())
        .is_some_and(|j| j.executor == crate::config::Executor::Salt);
    let proven = match (&hello.proof, &hello.resume_key) {
        (Some(proof), _) => {
            salt_job && check_minion_proof(core, hello.run, &hello.machine, proof).is_ok()
        }
        (None, Some(k)) => tokens::verify_resume_key(target.resume_key_sha256.as_deref(), &k.0),
        (None, None) => false,
    };
    let verdict = coming_back(
        hello.run,
        &hello.machine,
        target.record.reason,
        target.record.state,
        proven,
    );
    if let Some(verdict) = verdict {
        return refuse(core, id, &hello.peer, hello.run, &hello.machine, verdict);
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
            update: crate::wire::db::RunUpdate {
                state: Some(crate::wire::records::RunState::Running),
                ..Default::default()
            },
        },
        DbWait::write("a reopened run"),
    );
    reopen_target(core, run, &hello.machine);
    crate::roles::main::shell::run::recovery::restore(core, record, details);
    answer_hello(core, id, hello);
}

/// Record that a target declared lost is running again (its final outcome follows).
fn reopen_target(core: &mut Main, run: RunId, machine: &str) {
    let update = TargetUpdate {
        state: Some(TargetState::Running),
        ..Default::default()
    };
    write_target(core, run, machine, update, "a reopened target", Due::Soon);
}

/// The earliest a command on `conn` can have started, on the server clock: not before the
/// run's `go`, nor before the last frame main had from the wrapper until now (its hello,
/// which the welcome answered, or a heartbeat while it waited for `go`).
fn earliest_start(core: &Main, conn: ConnId) -> Option<Millis> {
    let (run, machine) = core.sessions.target_of(conn)?;
    let active = core.run(run)?;
    let heard = active.target(machine)?.last_seen()?;
    let heard_ms = now_ms() - i64::try_from(heard.elapsed().as_millis()).unwrap_or(i64::MAX);
    Some(active.go_at().map_or(heard_ms, |go| go.max(heard_ms)))
}

/// The target of a bound connection, with its liveness clock refreshed. The first
/// message of a session opened with the launch token confirms it: from then on the token
/// is spent for good, also across restarts.
///
/// A bound connection main has no session for (its run ended, its target was settled) is
/// closed: its wrapper reconnects and gets a verdict instead of talking to nobody.
fn touch(core: &mut Main, conn: ConnId) -> Option<(RunId, String)> {
    let Some((run, machine)) = core
        .sessions
        .target_of(conn)
        .map(|(run, m)| (run, m.to_string()))
    else {
        log::debug!("a wrapper on connection {conn} has no session any more; closing it");
        core.links
            .tell_hub(crate::wire::link::MainToHub::CloseWrapper { conn });
        return None;
    };
    transition(core, run, &machine, |t| t.heard(Instant::now()));
    Some((run, machine))
}

pub(crate) fn handle_cast(core: &mut Main, req: HubRequest) {
    match req {
        HubRequest::WrapperStarted {
            conn,
            pid,
            at,
            limits,
        } => {
            let since = earliest_start(core, conn);
            let Some((run, machine)) = touch(core, conn) else {
                return;
            };
            let now = now_ms();
            let started = start_time(at, since, now);
            log::debug!(
                "run {run}: command started on {machine} (pid {pid}, {} ms before main heard)",
                now - started
            );
            transition(core, run, &machine, |t| t.command_started(started, limits));
        }
        HubRequest::WrapperHeartbeat { conn, suspended } => {
            let Some((run, machine)) = touch(core, conn) else {
                return;
            };
            if let Some(suspended) = suspended {
                transition(core, run, &machine, |t| t.wrapper_reports(conn, suspended));
            }
        }
        HubRequest::WrapperOutput {
            conn,
            seq,
            stream,
            data,
        } => {
            let cost = crate::wire::link::output_cost(data.len());
            let Some((run, machine)) = touch(core, conn) else {
                // Not a session (any more): dropped, and its cost given back at once.
                core.links.credit_output(conn, cost);
                return;
            };
            let in_flight = core.in_flight(run);
            core.views
                .output_framed(run, &machine, seq, data.len(), in_flight);
            let limit = core
                .run(run)
                .map(|r| r.job().output_limit)
                .unwrap_or_default();
            let due = core.write_due(run);
            core.db_call_due(
                DbRequest::AppendOutput {
                    run,
                    machine: machine.clone(),
                    seq,
                    stream,
                    data,
                    limit,
                },
                DbWait::then(move |core, _, result| {
                    // Stored or not, main no longer holds it: the hub gets the credit.
                    core.links.credit_output(conn, cost);
                    let stored = result.is_ok();
                    output_stored(core, run, &machine, result);
                    if stored {
                        let out = core.views.live().output_stored(run, &machine);
                        core.perform(out);
                    }
                }),
                due,
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
            let exit = PendingExit {
                end_seq,
                reason,
                code,
            };
            transition(core, run, &machine, |t| t.exited(conn, exit, now_ms()));
            if core
                .target(run, &machine)
                .is_some_and(|t| t.awaits_output())
            {
                ask_stored_seq(core, run, machine);
            }
        }
        HubRequest::WrapperGone { conn, rejected } => {
            if let Some((run, machine)) = core.sessions.unbind(conn) {
                log::debug!("run {run}: wrapper on {machine} disconnected");
                if let Some((code, why)) = rejected {
                    super::welcome::link_rejected(core, run, &machine, code, &why);
                }
                if let Some(t) = core.target_mut(run, &machine) {
                    t.gone(conn);
                }
            }
        }
        HubRequest::HubTick => core.liveness.hub_ticked(Instant::now()),
        other => log::warn!("hub sent a request main does not take one-way: {other:?}"),
    }
}

/// db committed output up to `contiguous_seq`: ack it to the wrapper. db could not store
/// it: the wrapper holds its output and sends it again later, on the same link
/// (`rules/target/refused.rs`). One line when output starts being refused for a target,
/// one when it is stored again, whatever number of frames was refused meanwhile.
pub(crate) fn output_stored(
    core: &mut Main,
    run: RunId,
    machine: &str,
    result: Result<DbReply, CallError>,
) {
    let refused_before = core.target(run, machine).and_then(|t| t.output_refusals());
    match calls::AppendOutput::take(result) {
        Ok(contiguous_seq) => {
            transition(core, run, machine, |t| {
                t.output_stored(contiguous_seq, now_ms())
            });
            let over = core
                .target(run, machine)
                .is_some_and(|t| t.output_refusals().is_none());
            if let Some(frames) = refused_before
                && over
            {
                log::info!(
                    "run {run}: output of {machine} is stored again ({frames} frames were \
                     refused meanwhile and are being resent)"
                );
            }
        }
        Err(e) => {
            match refused_line(refused_before) {
                RefusedLine::First => log::error!(
                    "run {run}: output of {machine} not stored: {e}; its wrapper keeps it \
                     and sends it again (logged again once stored)"
                ),
                RefusedLine::Still(frames) => log::debug!(
                    "run {run}: output of {machine} still not stored ({frames} frames refused): {e}"
                ),
                RefusedLine::Quiet => {}
            }
            transition(core, run, machine, |t| t.output_refused(Instant::now()));
        }
    }
}

/// A wrapper's `exited` names output beyond what this server saw stored. db answers in
/// order, after every frame main sent before, with how far the target's output is stored:
/// more than main knew when another server stored it before this one took the run over
/// (the wrapper, acknowledged then, has nothing to send again). Frames still missing come
/// from the wrapper as usual.
fn ask_stored_seq(core: &mut Main, run: RunId, machine: String) {
    core.db_call(
        DbRequest::StoredSeq {
            run,
            machine: machine.clone(),
        },
        DbWait::then(
            move |core, _, result| match calls::StoredSeq::take(result) {
                Ok(contiguous) => {
                    let known = core.target(run, &machine).map(|t| t.acked_seq());
                    if known.is_some_and(|seq| contiguous > seq) {
                        log::info!(
                            "run {run}: output of {machine} up to seq {contiguous} was already \
                         stored (by the server that drove the run before this one)"
                        );
                    }
                    transition(core, run, &machine, |t| {
                        t.output_stored(contiguous, now_ms())
                    });
                }
                Err(e) => log::warn!(
                    "run {run}: could not read how much output of {machine} is stored: {e}; \
                 asked again when its wrapper sends its exit again"
                ),
            },
        ),
    );
}

/// Targets whose wrapper went silent for 3 heartbeats are lost (253); the targets of a
/// pre-staged run whose command has not started yet, for 3 staged heartbeats (their
/// wrappers may be waiting for `go` with the slower beat; after `go` their `started`
/// comes at once).
///
/// Silence counts only over time the daemon ran (`health/liveness.rs`): after a stall of
/// main or the hub, or a pause (a stop, storage trouble), every wrapper gets a fresh
/// grace instead.
pub(crate) fn check_liveness(core: &mut Main, now: Instant) {
    if core.runs_in_flight() == 0 {
        core.liveness.idle();
        return;
    }
    // Wrappers cannot reach a stopping daemon, and may be refused while the database
    // does not store: their silence says nothing then.
    let held = core.flight.is_stopping() || core.storage.trouble().is_some();
    let sp = &core.config.saltpeter;
    let windows = silences(sp.heartbeat_s, sp.recovery_grace_s);
    let silence = windows.heard;
    match core.liveness.check(now, held) {
        Verdict::Judge => {}
        Verdict::Paused => return,
        Verdict::Resumed => {
            let grace = windows.grace;
            log::info!(
                "the daemon was stalled or paused; every wrapper has {} s to be heard again",
                grace.as_secs()
            );
            let runs: Vec<RunId> = core.runs().map(|r| r.id()).collect();
            for run in runs {
                if let Some(active) = core.run_mut(run) {
                    for (_, t) in active.targets_mut() {
                        t.excuse_silence(now, grace);
                    }
                }
            }
            return;
        }
    }
    let staged = windows.staged;
    let mut lost = Vec::new();
    for active in core.runs() {
        let run = &active.id();
        let before_start = if active.is_prestaged() {
            staged
        } else {
            silence
        };
        for (machine, t) in active.targets() {
            // Not picked up yet: the pickup deadline applies instead.
            if t.silent_too_long(now, silence, before_start) {
                lost.push((*run, machine.clone()));
            }
        }
    }
    for (run, machine) in lost {
        log::warn!("run {run}: no word from the wrapper on {machine} for 3 heartbeats; lost");
        let job = core.run(run).map(|r| r.job().name.clone());
        core.event(
            "target_lost",
            job.as_deref(),
            Some(run),
            Some(&machine),
            "no word from its wrapper for 3 heartbeats".to_string(),
        );
        finish_target(core, run, &machine, TargetReason::Lost, Some(253));
    }
}

/// Deliver a user kill to targets of a run; returns how many were reached or settled.
pub(crate) fn kill(core: &mut Main, run: RunId, machine: Option<&str>) -> Result<usize, String> {
    let Some(active) = core.run_mut(run) else {
        return Err(format!("run {run} is not in flight"));
    };
    if machine.is_none() {
        active.request_kill();
    }
    if let Some(m) = machine
        && !active.targets().contains_key(m)
    {
        return Err(format!("{m} is not a target of run {run}"));
    }
    let now = now_ms();
    let mut reached = Vec::new();
    let mut out_of_reach = Vec::new();
    for (m, t) in active.targets_mut() {
        if machine.is_some_and(|only| only != m) {
            continue;
        }
        match t.kill(now) {
            KillAction::None => {}
            // Its wrapper runs the command but its link is down: it gets the kill when it
            // reconnects, and an executor plugin may reach it sooner (`kill`).
            KillAction::Deferred => out_of_reach.push(m.clone()),
            KillAction::Sent(effects) | KillAction::Canceled(effects) => {
                reached.push((m.clone(), effects))
            }
        }
    }
    let job = active.job().name.clone();
    core.event(
        "kill_requested",
        Some(&job),
        Some(run),
        machine,
        format!(
            "kill requested by an operator; {} target(s) reached",
            reached.len()
        ),
    );
    let count = reached.len();
    for (m, effects) in reached {
        apply(core, run, &m, effects);
    }
    kill_out_of_band(core, run, out_of_reach);
    Ok(count)
}

/// Ask the executor plugin of run `run` to kill the wrappers of `machines` out of band
/// (docs/executors.md, `kill`): their links are down. The answer is only logged: the
/// target's outcome still comes from its wrapper.
fn kill_out_of_band(core: &mut Main, run: RunId, machines: Vec<String>) {
    let Some(job) = core.run(run).map(|r| std::sync::Arc::clone(r.job())) else {
        return;
    };
    if machines.is_empty() || job.executor.plugin().is_none() {
        return;
    }
    let spec = match crate::roles::main::shell::run::plugins::spec(&core.config.saltpeter, &job) {
        Ok(spec) => spec,
        Err(why) => return log::warn!("run {run}: no out-of-band kill: {why}"),
    };
    let mut out = crate::roles::main::messages::Out::new();
    let call = crate::wire::link::PluginCall::Kill { run, machines };
    let spec = Box::new(spec);
    out.blocking(
        crate::wire::link::BlockingRequest::Plugin { spec, call },
        move |result| crate::roles::main::messages::Message::PluginKilled { run, result },
    );
    core.perform(out);
}
