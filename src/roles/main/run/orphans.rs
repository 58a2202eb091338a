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
//! A lone daemon on SQLite has no such outcome (its commits are local) and never sweeps.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::evloop::Ctx;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::state::Main;
use crate::roles::main::state::{DbWait, MainRole};
use crate::wire::db::{DbReply, DbRequest, calls};

/// How often the leader looks for runs it does not drive.
pub(crate) const SWEEP: Duration = Duration::from_secs(30);

/// The timer's turn: read the runs in flight, when this server leads a shared database
/// and is neither starting nor stopping.
pub(crate) fn sweep(role: &mut MainRole, _: &mut Ctx<MainRole>) {
    let core = &mut role.core;
    let idle = core.flight.recovering || core.flight.stopping || core.ha.holding();
    if !core.ha.shared || !core.ha.leader || idle || core.flight.orphans.reading {
        return;
    }
    core.flight.orphans.reading = true;
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
    core.flight.orphans.suspects = suspects;
}
