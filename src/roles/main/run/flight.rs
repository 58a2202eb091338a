//! The runs in flight on this server (`Flight`): the recorded runs by id, the jobs with a
//! run queued or being recorded (the overlap rule), the runs to start or to recover, and
//! where the daemon is in its life as far as runs care (recovering, stopping).

use std::collections::{BTreeMap, HashMap};

use crate::ipc::rpc::CallError;
use crate::roles::main::orphans::Orphans;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::request::{RecoveredRun, RunRequest};
use crate::wire::db::DbReply;
use crate::wire::records::RunId;

/// Runs in flight, as main keeps them.
#[derive(Default)]
pub(crate) struct Flight {
    runs: BTreeMap<RunId, ActiveRun>,
    /// Runs queued or being recorded, per job (the overlap rule; recorded runs are in
    /// `runs`).
    pub(crate) busy_jobs: HashMap<String, usize>,
    /// Runs to start, queued by handlers that cannot reach the registry.
    pub(crate) to_start: Vec<RunRequest>,
    /// Recovered runs whose Workflows are to start.
    pub(crate) to_recover: Vec<RecoveredRun>,
    /// Runs in flight are being loaded: no hello is vetted, no run started.
    pub recovering: bool,
    /// The recovery answer, handed to the loop (it needs the registry).
    pub(crate) recovery_reply: Option<Result<DbReply, CallError>>,
    /// New runs are not started once shutdown began.
    pub stopping: bool,
    /// The liveness check is armed (only while targets are picked up).
    pub(crate) liveness_armed: bool,
    /// Runs in flight in the database that nobody here drives (`orphans/`).
    pub orphans: Orphans,
}

impl Flight {
    /// A run in flight.
    pub(crate) fn get(&self, run: RunId) -> Option<&ActiveRun> {
        self.runs.get(&run)
    }

    pub(crate) fn get_mut(&mut self, run: RunId) -> Option<&mut ActiveRun> {
        self.runs.get_mut(&run)
    }

    /// The runs in flight, in run id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ActiveRun> {
        self.runs.values()
    }

    /// How many runs are in flight.
    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// A recorded run is in flight from now on.
    pub(crate) fn insert(&mut self, active: ActiveRun) {
        self.runs.insert(active.id, active);
    }

    /// A run ends: it is no longer in flight.
    pub(crate) fn remove(&mut self, run: RunId) -> Option<ActiveRun> {
        self.runs.remove(&run)
    }
}
