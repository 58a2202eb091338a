//! Runs the shared database has in flight that this leader does not drive.
//!
//! Recording a run is one transaction; when the connection to PostgreSQL breaks while
//! its `COMMIT` is out, db answers main with an error and main forgets the run, yet the
//! commit may have been applied: the run then sits in the database, `queued` or
//! `dispatching`, with nobody driving it, until the next takeover adopts it. So the
//! leader of a shared database sweeps every [`SWEEP`]:
//!
//! 1. read the runs in flight (`InFlightDetails`, as a takeover does);
//! 2. a run this leader does not drive is a suspect; a suspect of the previous sweep
//!    still there (a recording whose answer is merely on its way is not an orphan) is
//!    adopted exactly as a takeover adopts it (`recovery::restore`): its wrappers, if
//!    any, get `recovery_grace` to call, and its targets are settled as after a crash;
//! 3. the adoption is logged and recorded as a `run_orphan_adopted` event.
//!
//! A lone daemon on SQLite meets the same through a call that timed out: db, stopped or
//! stalled past `DB_TIMEOUT` (60 s), applies the
//! recording once it runs again, after main gave up on it. So every server sweeps, and
//! when storage comes back after a trouble it sweeps at once and again [`FOLLOW_UP`]
//! later, so such a run is driven within seconds of the database's return rather than a
//! minute.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::effects::write_target;
use crate::evloop::Ctx;
use crate::ipc::rpc::{Call, CallError, CallId, Due, RemoteError};
use crate::roles::main::state::Main;
use crate::roles::main::state::{DbWait, MainRole};
use crate::wire::db::{DbReply, DbRequest, RunUpdate, TargetUpdate, calls};
use crate::wire::records::{RunId, RunState, TargetReason, TargetState, now_ms};

/// How often the leader looks for runs it does not drive.
pub(crate) const SWEEP: Duration = Duration::from_secs(30);
/// After storage came back, the early sweep that adopts what the first one found.
pub(crate) const FOLLOW_UP: Duration = Duration::from_secs(3);

/// The timer's turn: read the runs in flight, when this server leads and is neither
/// starting nor stopping.
pub(crate) fn sweep(role: &mut MainRole, _: &mut Ctx<MainRole>) {
    read(&mut role.core, false);
}

/// The 1 s tick: an early sweep, when one is due.
pub(crate) fn tick(core: &mut Main, now: Instant) {
    if core.flight.orphans.soon.is_some_and(|at| now >= at) && !core.flight.orphans.reading {
        core.flight.orphans.soon = None;
        read(core, true);
    }
}

fn read(core: &mut Main, early: bool) {
    let idle = core.flight.recovering || core.flight.stopping || core.ha.holding();
    if !core.ha.leader() || idle || core.flight.orphans.reading {
        return;
    }
    core.flight.orphans.reading = true;
    core.flight.orphans.early = early;
    core.db_call(
        DbRequest::InFlightDetails,
        DbWait::then(|core, _, result| loaded(core, result)),
    );
}

/// db's answer: adopt the suspects of the last sweep that are still not driven here.
pub(crate) fn loaded(core: &mut Main, result: Result<DbReply, CallError>) {
    core.flight.orphans.reading = false;
    let runs = match calls::InFlightDetails::take(result) {
        Ok(runs) => runs,
        Err(e) => {
            log::warn!("could not read the runs in flight for the orphan sweep: {e}");
            return;
        }
    };
    let mut suspects = BTreeSet::new();
    for (run, details) in runs {
        if core.in_flight(run.id) {
            continue;
        }
        if !core.flight.orphans.suspects.contains(&run.id) {
            suspects.insert(run.id);
            continue;
        }
        let (id, job, state) = (run.id, run.job.clone(), run.state.as_str());
        log::warn!(
            "run {id} of {job} is {state} in the database but nobody drives it (its \
             recording's answer was lost): adopting it as a takeover would"
        );
        core.event(
            "run_orphan_adopted",
            Some(&job),
            Some(id),
            None,
            format!("{state} in the database with nobody driving it: adopted"),
        );
        super::recovery::restore(core, run, details);
    }
    if core.flight.orphans.early && !suspects.is_empty() {
        core.flight.orphans.soon = Some(Instant::now() + FOLLOW_UP);
    }
    core.flight.orphans.suspects = suspects;
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
