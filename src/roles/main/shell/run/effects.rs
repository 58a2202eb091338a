//! The shell around the pure target core (`run/target/`): performs the [`Effect`]s a
//! transition returns — messages to the wrapper through the hub, writes to db, events —
//! and offers the transitions that every part of main uses by name.

use std::time::Instant;

use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::roles::main::run::target::{Effect, Outcome, Target};
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::TargetUpdate;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::MainToHub;
pub(crate) use crate::wire::records::now_ms;
use crate::wire::records::{RunId, TargetReason, TargetState};
use crate::wire::wrapper::{KillReason, ServerMsg};

/// Perform the effects of a transition of `machine`'s target in `run`.
pub(crate) fn apply(core: &mut Main, run: RunId, machine: &str, effects: Vec<Effect>) {
    for effect in effects {
        match effect {
            Effect::Kill(conn) => {
                let grace_s = core.run(run).map_or(0, |r| r.job().kill_grace_s);
                core.links.tell_wrapper(
                    conn,
                    ServerMsg::Kill {
                        reason: KillReason::User,
                        grace_s,
                    },
                );
            }
            Effect::Suspend(conn) => core.links.tell_wrapper(conn, ServerMsg::Suspend {}),
            Effect::Resume(conn) => core.links.tell_wrapper(conn, ServerMsg::Resume {}),
            Effect::StoreSuspended(suspended) => {
                let update = TargetUpdate {
                    suspended: Some(suspended),
                    ..Default::default()
                };
                write_target(
                    core,
                    run,
                    machine,
                    update,
                    "a target's suspension",
                    Due::Soon,
                );
                // The dashboard and `run --wait` show the flag at once.
                core.post(crate::roles::main::messages::Message::RunChanged(run));
            }
            Effect::Ack(conn, seq) => core.links.tell_wrapper(conn, ServerMsg::Ack { seq }),
            Effect::Done(conn) => core.links.tell_wrapper(conn, ServerMsg::Done {}),
            Effect::HoldOutput {
                conn,
                from_seq,
                retry_after,
            } => {
                // A leader that cannot confirm its lease may have lost it to a server that
                // stores: the wrapper is sent on to the next server instead of held here.
                if core.ha.holding() {
                    core.sessions.unbind(conn);
                    core.links.tell_hub(MainToHub::CloseWrapper { conn });
                    continue;
                }
                let retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
                let msg = ServerMsg::OutputHeld {
                    from_seq,
                    retry_after_ms,
                };
                core.links.tell_wrapper(conn, msg);
            }
            Effect::Close(conn) => {
                core.sessions.unbind(conn);
                core.links.tell_hub(MainToHub::CloseWrapper { conn });
            }
            Effect::StoreState(state, started) => {
                let update = TargetUpdate {
                    state: Some(state),
                    started,
                    ..Default::default()
                };
                let due = core.write_due(run);
                write_target(core, run, machine, update, "a target's state", due);
            }
            Effect::StoreLimits(text) => {
                let update = TargetUpdate {
                    limits: Some(text),
                    ..Default::default()
                };
                let what = "how a target's limits applied";
                write_target(core, run, machine, update, what, Due::Soon);
            }
            Effect::StoreTokenSpent => {
                let update = TargetUpdate {
                    token_used: Some(true),
                    ..Default::default()
                };
                write_target(
                    core,
                    run,
                    machine,
                    update,
                    "a spent launch token",
                    Due::Soon,
                );
            }
            Effect::RecordOutcome {
                outcome,
                ended,
                waited,
            } => {
                let due = core
                    .run(run)
                    .map_or(Due::Soon, |r| r.exit_due(now_ms(), waited));
                core.db_call_due(
                    DbRequest::UpdateTarget {
                        run,
                        machine: machine.to_string(),
                        update: TargetUpdate {
                            state: Some(TargetState::Finished),
                            reason: outcome.reason,
                            exit_code: outcome.code,
                            ended: Some(ended),
                            suspended: Some(false),
                            ..Default::default()
                        },
                    },
                    {
                        let machine = machine.to_string();
                        DbWait::then(move |core, _, result| {
                            outcome_recorded(core, run, &machine, result)
                        })
                    },
                    due,
                );
            }
            Effect::Reconciled => {
                log::info!(
                    "run {run}: the wrapper on {machine} came back after being declared lost"
                );
                let job = core.run(run).map(|r| r.job().name.clone());
                core.event(
                    "target_reconciled",
                    job.as_deref(),
                    Some(run),
                    Some(machine),
                    "its wrapper came back after the target was declared lost".into(),
                );
            }
            Effect::WakeRun => core.wake_run(run),
            Effect::StoreRetry { attempt, previous } => {
                store_retry(core, run, machine, attempt, previous)
            }
            Effect::StoreWaiting { ended } => {
                let update = TargetUpdate {
                    state: Some(TargetState::WaitingUnreachable),
                    // No exit code yet: a cancel (none) or the window's end (255) decides
                    // it; a return copies it to the history.
                    reason: Some(TargetReason::Unreachable),
                    ended: Some(ended),
                    ..Default::default()
                };
                let what = "a target waiting for its minion";
                write_target(core, run, machine, update, what, Due::Soon);
            }
        }
    }
}

/// Store `update` of `machine`'s target in `run`, a write nothing waits for (a failure is
/// logged as one of `what`), due at `due`.
pub(crate) fn write_target(
    core: &mut Main,
    run: RunId,
    machine: &str,
    update: TargetUpdate,
    what: &'static str,
    due: Due,
) {
    let machine = machine.to_string();
    let req = DbRequest::UpdateTarget {
        run,
        machine,
        update,
    };
    core.db_call_due(req, DbWait::write(what), due);
}

/// Run a transition on a target of a run in flight and perform its effects; nothing when
/// the target is not (or no longer) in flight.
pub(crate) fn transition(
    core: &mut Main,
    run: RunId,
    machine: &str,
    f: impl FnOnce(&mut Target) -> Vec<Effect>,
) {
    if let Some(t) = core.target_mut(run, machine) {
        let effects = f(t);
        apply(core, run, machine, effects);
    }
}

/// Decide a target's outcome: the one place a target starts to become `finished`. The
/// in-memory phase becomes `Finished` when db confirms (`outcome_recorded`).
pub(crate) fn finish_target(
    core: &mut Main,
    run: RunId,
    machine: &str,
    reason: TargetReason,
    code: Option<i32>,
) {
    transition(core, run, machine, |t| t.finish(reason, code, now_ms()));
}

/// Persist a new attempt (the target core's `StoreRetry`) and say so in the audit trail.
fn store_retry(core: &mut Main, run: RunId, machine: &str, attempt: u32, previous: Outcome) {
    // The history keeps exactly the outcome the core decided for the attempt that ended.
    if previous.reason.is_some() || previous.code.is_some() {
        let update = TargetUpdate {
            reason: previous.reason,
            exit_code: previous.code,
            ..Default::default()
        };
        write_target(
            core,
            run,
            machine,
            update,
            "an attempt's outcome",
            Due::Soon,
        );
    }
    core.db_call(
        DbRequest::RetryTarget {
            run,
            machine: machine.to_string(),
            attempt,
        },
        DbWait::write("a new attempt"),
    );
    let job = core.run(run).map(|r| r.job().name.clone());
    let how = match (previous.reason, previous.code) {
        (Some(reason), Some(code)) => format!("{reason} {code}"),
        (Some(reason), None) => reason.to_string(),
        (None, _) => "no outcome".to_string(),
    };
    core.event(
        "target_retry",
        job.as_deref(),
        Some(run),
        Some(machine),
        format!(
            "attempt {} ended ({how}); attempt {attempt} starts",
            attempt - 1
        ),
    );
}

/// db answered the write of a target's outcome: final now (its wrapper may exit), or to
/// be written again.
pub(crate) fn outcome_recorded(
    core: &mut Main,
    run: RunId,
    machine: &str,
    result: Result<DbReply, CallError>,
) {
    if let Err(e) = result {
        let first = core.storage.outcomes_waiting() == 0;
        core.storage
            .outcome_not_stored(run, machine, Instant::now());
        if first {
            log::error!(
                "run {run}: the outcome of {machine} is not stored yet ({e}); its wrapper keeps \
                 it and the write is tried again until it succeeds"
            );
        } else {
            log::debug!("run {run}: the outcome of {machine} is not stored yet: {e}");
        }
        return;
    }
    core.storage.outcome_settled(run, machine);
    let Some(t) = core.target_mut(run, machine) else {
        return;
    };
    let effects = match result {
        Ok(DbReply::OutcomeKept(kept)) => {
            log::warn!(
                "run {run}: {machine} already had its outcome stored (by the server that \
                 drove the run before this one); that outcome stands"
            );
            let outcome = Outcome {
                reason: Some(kept.reason),
                code: kept.exit_code,
            };
            t.recorded_as(outcome, kept.ended)
        }
        _ => t.recorded(),
    };
    let outcome = t.outcome();
    log::info!(
        "run {run}: {machine} finished ({}, exit {})",
        outcome
            .and_then(|o| o.reason)
            .map(|r| r.as_str())
            .unwrap_or("-"),
        outcome
            .and_then(|o| o.code)
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    );
    apply(core, run, machine, effects);
}
