//! Restart recovery: runs left in flight are loaded back from db at start-up.
//!
//! Until db has answered (and the other start-up loads of `lifecycle/boot.rs` are in), main
//! vets no wrapper (`retry_later`), fires no slot and starts no run. Each run in flight
//! becomes an `ActiveRun` again, with what its targets had durably reached: state, the last
//! committed output seq (so a resumed wrapper resends only what is missing), whether the
//! launch token was spent and the hash of the resume key. Wrappers that reconnect with
//! their resume key are re-attached; those that stay silent for 3 heartbeats become `lost`
//! (253); those never picked up get the pickup deadline (254); targets never launched are
//! launched now. A slot already recorded is never launched again: its run is this one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::evloop::Ctx;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::roles::main::messages::Message;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::run::rules;
use crate::roles::main::run::target::Target;
use crate::roles::main::shell::run::effects::write_target;
use crate::roles::main::shell::{DbWait, Main, MainRole, history};
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::db::{RunUpdate, TargetDetail, TargetUpdate};
use crate::wire::records::{RunRecord, RunState, TargetReason, TargetState};

/// Ask db for the runs in flight; the answer arrives in `recovered`.
pub(crate) fn start(core: &mut Main) {
    core.flight.begin_recovery();
    core.db_call(
        DbRequest::InFlightDetails,
        DbWait::then(|core, _, result| core.post(Message::InFlightRead { result })),
    );
}

/// db's answer: rebuild the runs and resume their Workflows.
pub(crate) fn recovered(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    result: Result<DbReply, CallError>,
) {
    let runs = match calls::InFlightDetails::take(result) {
        Ok(runs) => runs,
        // Asking again would get the same answer, at once and forever.
        Err(e @ CallError::WrongReply { .. }) => {
            log::error!("{e}");
            Vec::new()
        }
        Err(e) => {
            // Without the runs in flight main cannot tell a slot that ran from one that
            // did not; retry rather than guess.
            log::error!("could not load the runs in flight ({e}); retrying");
            start(&mut role.core);
            return;
        }
    };
    let count = runs.len();
    for (run, details) in runs {
        restore(&mut role.core, run, details);
    }
    // A standby that took over: the runs it mirrored are its own now, or ended.
    crate::roles::main::shell::views::adopted(&mut role.core);
    let out = role.core.boot.in_flight_loaded();
    role.core.perform(out);
    if count > 0 {
        log::info!("recovered {count} run(s) in flight");
    }
    history::apply_retention_to_all(&mut role.core);
    // The start-up hold is lifted, and the schedule armed, once every start-up load is in
    // (`Message::StartupDone`, handled in the pump).
    role.pump(ctx);
}

pub(crate) fn restore(core: &mut Main, run: RunRecord, details: Vec<TargetDetail>) {
    let now = Instant::now();
    let grace = std::time::Duration::from_secs(core.config.saltpeter.recovery_grace_s);
    let Some(job) = core
        .config
        .jobs
        .get(&run.job)
        .and_then(|e| e.job())
        .cloned()
    else {
        give_up(core, &run, "its job is no longer configured");
        return;
    };
    let mut targets = BTreeMap::new();
    let mut unsettled = Vec::new();
    for d in details {
        let r = &d.record;
        let mut t = Target::restored(
            r,
            d.token_used,
            d.resume_key_sha256.clone(),
            d.contiguous_seq,
            now,
            grace,
        );
        // Retries already made count against `retries` after a restart too.
        t.restore_attempt(d.attempt);
        // `retry_unreachable`: the window starts over (its deadline is not stored).
        t.restart_waiting(now, std::time::Duration::from_secs(job.retry_unreachable_s));
        if !t.is_settled() {
            unsettled.push((r.machine.clone(), t.is_pending()));
        }
        targets.insert(r.machine.clone(), t);
    }
    let job = Arc::new(job);
    // Staged wrappers were welcomed (their token is spent) but nothing ran: the run is
    // still pre-staged, and waits for its slot again.
    let started_any = targets.values().any(|t| t.started().is_some());
    let prestaged = run.slot.is_some()
        && !started_any
        && core.launcher.leads(&core.config.saltpeter).of(&job) > chrono::Duration::zero();
    log::info!(
        "run {} of {}: recovered with {} target(s) still open",
        run.id,
        job.name,
        unsettled.len()
    );
    let active = ActiveRun::new(
        run.id,
        job.clone(),
        run.slot,
        run.trigger,
        prestaged,
        run.started.unwrap_or(0),
    )
    .with_targets(targets);
    core.insert_run(active);
    let batch_size = job.batch_size;
    core.recover_run(
        RunRequest {
            job,
            slot: run.slot,
            trigger: run.trigger,
            admin_call: None,
            prestaged,
            reason: None,
        },
        run.id,
        rules::recovered_batches(unsettled, batch_size),
    );
}

/// A run that cannot continue (its job is gone): its open targets are lost.
fn give_up(core: &mut Main, run: &RunRecord, why: &str) {
    log::warn!("run {} of {}: {why}; closing it", run.id, run.job);
    let now = chrono::Utc::now().timestamp_millis();
    for t in run.targets.iter().filter(|t| {
        !matches!(
            t.state,
            TargetState::Finished | TargetState::SkippedMaintenance
        )
    }) {
        core.event(
            "target_lost",
            Some(&run.job),
            Some(run.id),
            Some(&t.machine),
            format!("closed after a restart: {why}"),
        );
        let update = TargetUpdate {
            state: Some(TargetState::Finished),
            reason: Some(TargetReason::Lost),
            exit_code: Some(253),
            ended: Some(now),
            ..Default::default()
        };
        let what = "a target of a closed run";
        write_target(core, run.id, &t.machine, update, what, Due::Soon);
    }
    core.db_call(
        DbRequest::UpdateRun {
            run: run.id,
            update: RunUpdate {
                state: Some(RunState::Failed),
                reason: Some(why.to_string()),
                ended: Some(now),
                ..Default::default()
            },
        },
        DbWait::write("a closed run"),
    );
}
