//! Runs the shared database has in flight that this leader does not drive.
//!
//! Recording a run is one transaction; when the connection to PostgreSQL breaks while
//! its `COMMIT` is out, db answers main with an error and main forgets the run, yet the
//! commit may have been applied: the run then sits in the database, `queued` or
//! `dispatching`, with nobody driving it, until the next takeover adopts it. So the
//! leader of a shared database sweeps every [`SWEEP`]:
//!
//! 1. read the runs in flight (`InFlightDetails`, as a takeover does);
//! 2. a run this leader does not drive is a suspect; a suspect of the previous sweep still
//!    there (a recording whose answer is merely on its way is not an orphan) is adopted
//!    exactly as a takeover adopts it (`shell::run::recovery::restore`): its wrappers, if
//!    any, get `recovery_grace` to call, and its targets are settled as after a crash;
//! 3. the adoption is logged and recorded as a `run_orphan_adopted` event.
//!
//! A lone daemon on SQLite meets the same through a call that timed out: db, stopped or
//! stalled past `DB_TIMEOUT` (60 s), applies the
//! recording once it runs again, after main gave up on it. So every server sweeps, and
//! when storage comes back after a trouble it sweeps at once and again [`FOLLOW_UP`]
//! later, so such a run is driven within seconds of the database's return rather than a
//! minute.
//!
//! `Orphans` keeps the sweep's state private; its methods take the time and whether this
//! server may sweep, and return what is to be done. The adoption itself, and the close of a
//! run recorded after main stopped waiting, act on the runs in flight:
//! `shell/run/orphans.rs`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::ipc::rpc::Call;
use crate::roles::main::messages::{DbResult, Event, Message, Out, Then};
use crate::wire::db::{DbRequest, TargetDetail, calls};
use crate::wire::records::{RunId, RunRecord};

#[cfg(test)]
mod tests;

/// How often the leader looks for runs it does not drive.
pub(crate) const SWEEP: Duration = Duration::from_secs(30);
/// After storage came back, the early sweep that adopts what the first one found.
pub(crate) const FOLLOW_UP: Duration = Duration::from_secs(3);

/// A run to adopt: its record and its targets as db has them.
pub(crate) type Adoption = (RunRecord, Vec<TargetDetail>);

/// Runs in flight in the database that nobody here drives.
#[derive(Default)]
pub(crate) struct Orphans {
    /// Runs in flight in the database, not driven here, at the last sweep.
    suspects: BTreeSet<RunId>,
    /// A sweep's read is out.
    reading: bool,
    /// An early sweep is due then (storage is back after a trouble, during which a call
    /// may have timed out and been applied later).
    soon: Option<Instant>,
    /// The sweep out is an early one: suspects it finds are looked at again soon.
    early: bool,
}

impl Orphans {
    /// Storage is back after a trouble: sweep a second from `now`.
    pub(crate) fn storage_back(&mut self, now: Instant) {
        self.soon = Some(now + Duration::from_secs(1));
    }

    /// Read the runs in flight, when this server may sweep (`may`: it leads and is
    /// neither starting, stopping nor holding) and no read is out. `early`: a sweep
    /// after storage came back.
    pub(crate) fn sweep(&mut self, may: bool, early: bool) -> Out {
        let mut out = Out::new();
        if !may || self.reading {
            return out;
        }
        self.reading = true;
        self.early = early;
        out.db(
            DbRequest::InFlightDetails,
            Then::tell(|result| Message::OrphansRead { result }),
        );
        out
    }

    /// The 1 s tick at `now`: an early sweep, when one is due.
    pub(crate) fn tick(&mut self, now: Instant, may: bool) -> Out {
        if self.soon.is_some_and(|at| now >= at) && !self.reading {
            self.soon = None;
            return self.sweep(may, true);
        }
        Out::new()
    }

    /// db's answer at `now`: the suspects of the last sweep that are still not
    /// `driven` here, to adopt (`adopting`, then `run::recovery::restore`).
    pub(crate) fn loaded(
        &mut self,
        result: DbResult,
        driven: impl Fn(RunId) -> bool,
        now: Instant,
    ) -> Vec<Adoption> {
        self.reading = false;
        let runs = match calls::InFlightDetails::take(result) {
            Ok(runs) => runs,
            Err(e) => {
                log::warn!("could not read the runs in flight for the orphan sweep: {e}");
                return Vec::new();
            }
        };
        let mut suspects = BTreeSet::new();
        let mut adopt = Vec::new();
        for (run, details) in runs {
            if driven(run.id) {
                continue;
            }
            if !self.suspects.contains(&run.id) {
                suspects.insert(run.id);
                continue;
            }
            adopt.push((run, details));
        }
        if self.early && !suspects.is_empty() {
            self.soon = Some(now + FOLLOW_UP);
        }
        self.suspects = suspects;
        adopt
    }

    /// An orphan is adopted: said in the log and recorded as an event.
    pub(crate) fn adopting(run: &RunRecord) -> Out {
        let (id, job, state) = (run.id, run.job.clone(), run.state.as_str());
        log::warn!(
            "run {id} of {job} is {state} in the database but nobody drives it (its \
             recording's answer was lost): adopting it as a takeover would"
        );
        let mut out = Out::new();
        out.event(Event {
            kind: "run_orphan_adopted",
            job: Some(job),
            run: Some(id),
            machine: None,
            message: format!("{state} in the database with nobody driving it: adopted"),
        });
        out
    }
}
