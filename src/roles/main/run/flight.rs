//! The runs in flight on this server (`Flight`): the recorded runs by id, the jobs with a
//! run queued or being recorded (the overlap rule), the runs to start or to recover, and
//! where the daemon is in its life as far as runs care (recovering, stopping).
//!
//! Its fields are private: the shell moves it with the transitions below (a run queued,
//! recovery begun or done, shutdown begun, the liveness check armed or fired).

use std::collections::{BTreeMap, HashMap};

use crate::roles::main::orphans::Orphans;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::request::{RecoveredRun, RunRequest};
use crate::wire::records::RunId;

#[cfg(test)]
mod tests;

/// Runs in flight, as main keeps them.
#[derive(Default)]
pub(crate) struct Flight {
    runs: BTreeMap<RunId, ActiveRun>,
    /// Runs queued or being recorded, per job (the overlap rule; recorded runs are in
    /// `runs`).
    busy_jobs: HashMap<String, usize>,
    /// Runs to start, queued by handlers that cannot reach the registry.
    to_start: Vec<RunRequest>,
    /// Recovered runs whose Workflows are to start.
    to_recover: Vec<RecoveredRun>,
    /// Runs in flight are being loaded: no hello is vetted, no run started.
    recovering: bool,
    /// New runs are not started once shutdown began.
    stopping: bool,
    /// The liveness check is armed (only while targets are picked up).
    liveness_armed: bool,
    /// Runs in flight in the database that nobody here drives (`orphans/`).
    orphans: Orphans,
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
        self.runs.insert(active.id(), active);
    }

    /// A run ends: it is no longer in flight.
    pub(crate) fn remove(&mut self, run: RunId) -> Option<ActiveRun> {
        self.runs.remove(&run)
    }

    /// Queue a run to start; until it is recorded it counts as busy for the overlap rule
    /// (a pre-staged run counts only once it has gone).
    pub(crate) fn queue_start(&mut self, req: RunRequest) {
        if !req.prestaged {
            *self.busy_jobs.entry(req.job.name.clone()).or_insert(0) += 1;
        }
        self.to_start.push(req);
    }

    /// The runs queued to start, in order; the queue is empty afterwards.
    pub(crate) fn take_to_start(&mut self) -> Vec<RunRequest> {
        std::mem::take(&mut self.to_start)
    }

    /// How many runs of `job` are queued to start.
    pub(crate) fn queued_of(&self, job: &str) -> usize {
        self.to_start.iter().filter(|r| r.job.name == job).count()
    }

    /// How many runs of `job` are queued or being recorded (the overlap rule).
    pub(crate) fn busy_count(&self, job: &str) -> usize {
        self.busy_jobs.get(job).copied().unwrap_or(0)
    }

    /// A run of `job` no longer counts as queued or being recorded.
    pub(crate) fn release_job(&mut self, job: &str) {
        if let Some(n) = self.busy_jobs.get_mut(job) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.busy_jobs.remove(job);
            }
        }
    }

    /// A recovered run's Workflow is to start.
    pub(crate) fn queue_recovery(&mut self, run: RecoveredRun) {
        self.to_recover.push(run);
    }

    /// The recovered runs whose Workflows are to start; the queue is empty afterwards.
    pub(crate) fn take_to_recover(&mut self) -> Vec<RecoveredRun> {
        std::mem::take(&mut self.to_recover)
    }

    /// The runs in flight are being loaded (start-up, a takeover): no hello is vetted,
    /// nothing fires, no run starts.
    pub(crate) fn begin_recovery(&mut self) {
        self.recovering = true;
    }

    /// Start-up has what it needs: runs may start again.
    pub(crate) fn recovered(&mut self) {
        self.recovering = false;
    }

    /// Whether the runs in flight are being loaded.
    pub(crate) fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// Shutdown (or an ordered stop) began: no new run starts from now on.
    pub(crate) fn stop(&mut self) {
        self.stopping = true;
    }

    /// Whether shutdown (or an ordered stop) began.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Arm the liveness check, when runs are in flight and it is not armed yet: whether
    /// it was armed now (the caller sets its timer).
    pub(crate) fn arm_liveness(&mut self) -> bool {
        if self.runs.is_empty() || self.liveness_armed {
            return false;
        }
        self.liveness_armed = true;
        true
    }

    /// The liveness check's timer fired: it may be armed again.
    pub(crate) fn liveness_fired(&mut self) {
        self.liveness_armed = false;
    }

    /// The runs in flight in the database that nobody here drives.
    pub(crate) fn orphans_mut(&mut self) -> &mut Orphans {
        &mut self.orphans
    }
}
