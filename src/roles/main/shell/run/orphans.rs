//! The orphan sweep (`orphans/`) acting on the runs in flight: whether this server may
//! sweep, the adoption of what it finds; and a run db recorded after main stopped
//! waiting for it, closed before any sweep could adopt it.

use std::time::Instant;

use super::effects::write_target;
use crate::evloop::Ctx;
use crate::ipc::rpc::{Call, CallError, CallId, Due, RemoteError};
use crate::roles::main::messages::DbResult;
use crate::roles::main::orphans::Orphans;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::{DbWait, MainRole};
use crate::wire::db::{DbReply, DbRequest, RunUpdate, TargetUpdate, calls};
use crate::wire::records::{RunId, RunState, TargetReason, TargetState, now_ms};

/// This server may sweep: it leads and is neither starting, stopping nor holding.
fn may_sweep(core: &Main) -> bool {
    let idle = core.flight.is_recovering() || core.flight.is_stopping() || core.ha.holding();
    core.ha.leader() && !idle
}

/// The timer's turn (every `orphans::SWEEP`): read the runs in flight.
pub(crate) fn sweep(role: &mut MainRole, _: &mut Ctx<MainRole>) {
    let core = &mut role.core;
    let may = may_sweep(core);
    let out = core.flight.orphans_mut().sweep(may, false);
    core.perform(out);
}

/// The 1 s tick: an early sweep, when one is due.
pub(crate) fn tick(core: &mut Main, now: Instant) {
    let may = may_sweep(core);
    let out = core.flight.orphans_mut().tick(now, may);
    core.perform(out);
}

/// db's answer to a sweep: adopt the suspects of the last sweep that are still not
/// driven here, as a takeover would.
pub(crate) fn loaded(core: &mut Main, result: DbResult) {
    let driven: std::collections::BTreeSet<RunId> = core.runs().map(|r| r.id()).collect();
    let adopt =
        core.flight
            .orphans_mut()
            .loaded(result, |run| driven.contains(&run), Instant::now());
    for (run, details) in adopt {
        core.perform(Orphans::adopting(&run));
        super::recovery::restore(core, run, details);
    }
}

/// db answered after main stopped waiting (db was stopped or stalled past the call's
/// deadline). A run it recorded so late was already given up here: its slot is counted
/// as not recorded (and recorded as skipped once the database stores), or the operator
/// who asked for it was told it could not be recorded. So it does not run late either:
/// it is closed as skipped with that reason, its targets canceled, before any sweep
/// could adopt it (db answers in order, so this close reaches it first).
pub(crate) fn answered_late(core: &mut Main, id: CallId, result: Result<DbReply, RemoteError>) {
    let Ok(DbReply::RunCreated(Some(run))) = result else {
        log::warn!("db answered call {id} after its deadline");
        return;
    };
    if core.in_flight(run) {
        return;
    }
    log::warn!(
        "run {run} was recorded by db after main stopped waiting for it (call {id}); it was \
         reported as not recorded, so it is closed as skipped instead of running late"
    );
    core.db_call(
        DbRequest::GetRun(run),
        DbWait::then(move |core, _, result| close_late(core, run, result)),
    );
}

const LATE: &str = "storage: the database recorded the run only after main stopped waiting for \
                    it; not run";

fn close_late(core: &mut Main, run: RunId, result: Result<DbReply, CallError>) {
    let record = match calls::GetRun::take(result) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(e) => {
            log::warn!("run {run}: could not read it to close it ({e}); the sweep adopts it");
            return;
        }
    };
    if record.state.is_final() || core.in_flight(run) {
        return;
    }
    let now = now_ms();
    for t in record
        .targets
        .iter()
        .filter(|t| t.state != TargetState::Finished)
    {
        let update = TargetUpdate {
            state: Some(TargetState::Finished),
            reason: Some(TargetReason::Canceled),
            ended: Some(now),
            ..Default::default()
        };
        write_target(
            core,
            run,
            &t.machine,
            update,
            "a target of a run recorded late",
            Due::Soon,
        );
    }
    core.db_call(
        DbRequest::UpdateRun {
            run,
            update: RunUpdate {
                state: Some(RunState::Skipped),
                reason: Some(LATE.to_string()),
                ended: Some(now),
                ..Default::default()
            },
        },
        DbWait::write("a run recorded late"),
    );
    core.event(
        "run_recorded_late",
        Some(&record.job),
        Some(run),
        None,
        LATE.to_string(),
    );
}
