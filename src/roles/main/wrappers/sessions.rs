//! Wrapper sessions: what main does with the hub's wrapper traffic.
//!
//! - `hello`: vetted in `welcome.rs`; here, a wrapper that comes back after its target was
//!   declared lost is reconciled.
//! - output goes to db; the ack goes back only when db has committed it.
//! - `exited` settles the target once every frame up to `end_seq` is committed; `done`
//!   follows once the outcome is recorded.
//! - liveness is judged on the server clock: no frame for 3 heartbeats -> `lost` (253).

use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::roles::main::rules::target::exit_outcome;
use crate::roles::main::rules::target::{KillAction, PendingExit};
use crate::roles::main::rules::tokens;
use crate::roles::main::run::effects::{apply, finish_target, now_ms, transition, write_target};
use crate::roles::main::state::liveness::Verdict;
use crate::roles::main::state::{DbWait, Main};
use crate::roles::main::views::live;
use crate::roles::main::wrappers::welcome::{answer_hello, reject, staged_heartbeat_s};
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
            if !core.flight.recovering
                && !core.in_flight(run)
                && (hello.resume_key.is_some() || hello.proof.is_some())
            {
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
            core.reply_hub(id, HubReply::Verdict(verdict));
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
            salt_job
                && core
                    .check_minion_proof(hello.run, &hello.machine, proof)
                    .is_ok()
        }
        (None, Some(k)) => tokens::verify_resume_key(target.resume_key_sha256.as_deref(), &k.0),
        (None, None) => false,
    };
    if target.record.reason != Some(TargetReason::Lost) || !proven {
        // Only a peer that proved the target learns that its outcome is recorded.
        let verdict = if proven && target.record.state == TargetState::Finished {
            reject(
                RejectCode::Finished,
                format!(
                    "the outcome of {} in run {} is already recorded",
                    hello.machine, hello.run
                ),
            )
        } else {
            crate::roles::main::wrappers::welcome::not_in_flight(hello.run)
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
            update: crate::wire::db::RunUpdate {
                state: Some(crate::wire::records::RunState::Running),
                ..Default::default()
            },
        },
        DbWait::write("a reopened run"),
    );
    reopen_target(core, run, &hello.machine);
    crate::roles::main::run::recovery::restore(core, record, details);
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
    let (run, machine) = core.flight.sessions.get(&conn)?;
    let active = core.run(*run)?;
    let heard = active.targets.get(machine)?.last_seen()?;
    let heard_ms = now_ms() - i64::try_from(heard.elapsed().as_millis()).unwrap_or(i64::MAX);
    Some(active.go_at().map_or(heard_ms, |go| go.max(heard_ms)))
}

/// When a command started: the wrapper's word (`at`, its clock at the spawn), kept
/// inside what the server knows — not before `since` (what let it start) and not after
/// `now` (when the news arrived). A wrapper whose clock is off lands on an edge of that
/// window, never outside it; without a window, the arrival.
pub(crate) fn start_time(at: Millis, since: Option<Millis>, now: Millis) -> Millis {
    match since {
        Some(since) if since <= now => at.clamp(since, now),
        _ => now,
    }
}

/// The target of a bound connection, with its liveness clock refreshed. The first
/// message of a session opened with the launch token confirms it: from then on the token
/// is spent for good, also across restarts.
///
/// A bound connection main has no session for (its run ended, its target was settled) is
/// closed: its wrapper reconnects and gets a verdict instead of talking to nobody.
fn touch(core: &mut Main, conn: ConnId) -> Option<(RunId, String)> {
    let Some((run, machine)) = core.flight.sessions.get(&conn).cloned() else {
        log::debug!("a wrapper on connection {conn} has no session any more; closing it");
        core.tell_hub(crate::wire::link::MainToHub::CloseWrapper { conn });
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
                core.credit_output(conn, cost);
                return;
            };
            crate::roles::main::views::ui::output_arrived(core, run, &machine, seq, &data);
            let limit = core
                .run(run)
                .map(|r| r.job.output_limit)
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
                    core.credit_output(conn, cost);
                    let stored = result.is_ok();
                    output_stored(core, run, &machine, result);
                    if stored {
                        live::output_arrived(core, run, &machine);
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
        HubRequest::WrapperGone { conn } => {
            if let Some((run, machine)) = core.flight.sessions.remove(&conn) {
                log::debug!("run {run}: wrapper on {machine} disconnected");
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
            if refused_before.is_none() {
                log::error!(
                    "run {run}: output of {machine} not stored: {e}; its wrapper keeps it \
                     and sends it again (logged again once stored)"
                );
            } else if let Some(frames) = refused_before.map(|f| f.saturating_add(1))
                && frames.is_power_of_two()
            {
                // Logarithmic: a talker refused for a minute writes a dozen lines, not
                // one per frame.
                log::debug!(
                    "run {run}: output of {machine} still not stored ({frames} frames refused): {e}"
                );
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
/// Silence counts only over time the daemon ran (`state/liveness.rs`): after a stall of
/// main or the hub, or a pause (a stop, storage trouble), every wrapper gets a fresh
/// grace instead.
pub(crate) fn check_liveness(core: &mut Main, now: Instant) {
    if core.runs_in_flight() == 0 {
        core.liveness.idle();
        return;
    }
    // Wrappers cannot reach a stopping daemon, and may be refused while the database
    // does not store: their silence says nothing then.
    let held = core.flight.stopping || core.storage.trouble().is_some();
    let heartbeat_s = core.config.saltpeter.heartbeat_s.max(1);
    let silence = Duration::from_secs(heartbeat_s * 3);
    match core.liveness.check(now, held) {
        Verdict::Judge => {}
        Verdict::Paused => return,
        Verdict::Resumed => {
            let grace = silence.max(Duration::from_secs(core.config.saltpeter.recovery_grace_s));
            log::info!(
                "the daemon was stalled or paused; every wrapper has {} s to be heard again",
                grace.as_secs()
            );
            let runs: Vec<RunId> = core.runs().map(|r| r.id).collect();
            for run in runs {
                if let Some(active) = core.run_mut(run) {
                    for t in active.targets.values_mut() {
                        t.excuse_silence(now, grace);
                    }
                }
            }
            return;
        }
    }
    let staged = Duration::from_secs(staged_heartbeat_s(heartbeat_s) * 3);
    let mut lost = Vec::new();
    for active in core.runs() {
        let run = &active.id;
        let before_start = if active.is_prestaged() {
            staged
        } else {
            silence
        };
        for (machine, t) in &active.targets {
            // Not picked up yet: the pickup deadline applies instead.
            if t.silent_too_long(now, silence, before_start) {
                lost.push((*run, machine.clone()));
            }
        }
    }
    for (run, machine) in lost {
        log::warn!("run {run}: no word from the wrapper on {machine} for 3 heartbeats; lost");
        let job = core.run(run).map(|r| r.job.name.clone());
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
        && !active.targets.contains_key(m)
    {
        return Err(format!("{m} is not a target of run {run}"));
    }
    let now = now_ms();
    let mut reached = Vec::new();
    for (m, t) in active.targets.iter_mut() {
        if machine.is_some_and(|only| only != m) {
            continue;
        }
        match t.kill(now) {
            KillAction::None | KillAction::Deferred => {}
            KillAction::Sent(effects) | KillAction::Canceled(effects) => {
                reached.push((m.clone(), effects))
            }
        }
    }
    let job = active.job.name.clone();
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
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::start_time;

    #[test]
    fn a_start_is_the_wrappers_word_inside_what_the_server_knows() {
        // go at 1,000, the news at 1,150: the wrapper's 1,040 stands.
        assert_eq!(start_time(1_040, Some(1_000), 1_150), 1_040);
        // A wrapper clock behind or ahead lands on an edge of the window.
        assert_eq!(start_time(400, Some(1_000), 1_150), 1_000);
        assert_eq!(start_time(9_000, Some(1_000), 1_150), 1_150);
        // No window known, or an impossible one: the arrival.
        assert_eq!(start_time(1_040, None, 1_150), 1_150);
        assert_eq!(start_time(1_040, Some(2_000), 1_150), 1_150);
    }
}
