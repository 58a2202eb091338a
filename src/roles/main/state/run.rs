//! A run's state: what was asked (`RunRequest`), a recovered run to resume
//! (`RecoveredRun`), the run in flight as main keeps it (`ActiveRun`, in `active.rs`);
//! launches coalesced per round (`Rounds`), runs in flight that nobody here drives
//! (`Orphans`). How far a run's Workflow got is its env (`run/env.rs`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Job;
use crate::ipc::CallId;
use crate::wire::link::{MinionOutcome, SaltSettings};
use crate::wire::records::{Millis, RunId, Trigger};

/// A run to start.
pub(crate) struct RunRequest {
    pub job: JobRef,
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    /// The admin call (`saltpeterctl run`) to answer with the run id once recorded.
    pub admin_call: Option<CallId>,
    /// Launched ahead of its slot: wrappers wait for `go`, decided at the slot.
    pub prestaged: bool,
    /// Why a run that is not scheduled was started (a chain), recorded with it.
    pub reason: Option<String>,
}

/// A run in flight recovered after a restart, its Workflow to resume once start-up is
/// over (`run::recovered_workflow`): its open targets cut into `batches` again, and the
/// wrappers launched before the restart given until `reconnect_until` to reconnect.
pub(crate) struct RecoveredRun {
    pub req: RunRequest,
    pub id: RunId,
    pub batches: Vec<Vec<String>>,
    pub reconnect_until: Instant,
}

/// Shared handle to a job definition inside runs.
pub(crate) type JobRef = Arc<Job>;

/// One run's launch, queued for its round.
pub(crate) struct Queued {
    pub run: RunId,
    pub url: String,
    pub wrapper_path: String,
    pub minions: Vec<String>,
    pub settings: SaltSettings,
    /// Not pre-staged (a manual run): its round goes at once.
    pub urgent: bool,
}

/// A run's part of a round's answer.
pub(crate) struct Answer {
    pub outcomes: Result<Vec<MinionOutcome>, String>,
}

#[derive(Default)]
pub(crate) struct Rounds {
    /// Pre-staged salt runs per slot still on their way to their launch.
    pub(crate) staging: HashMap<Millis, usize>,
    pub(crate) queued: Vec<Queued>,
    pub(crate) first_queued: Option<Instant>,
    /// Launches out: the runs each serves and when it went.
    pub(crate) out: HashMap<CallId, (Vec<RunId>, Instant)>,
    pub(crate) answers: HashMap<RunId, Answer>,
    /// Publishes sent, for the log and `/metrics`.
    pub publishes: u64,
    /// Each (run, minion) launched, by its publish: what the launch latency is measured
    /// on (`arrived`).
    pub(crate) awaited: HashMap<(RunId, String), CallId>,
    pub(crate) arrivals: HashMap<CallId, Arrivals>,
}

/// The wrappers of one publish calling back.
pub(crate) struct Arrivals {
    pub(crate) sent: Instant,
    pub(crate) expected: usize,
    pub(crate) arrived: usize,
    pub(crate) latest: Option<Instant>,
}

#[derive(Default)]
pub(crate) struct Orphans {
    /// Runs in flight in the database, not driven here, at the last sweep.
    pub(crate) suspects: BTreeSet<RunId>,
    /// A sweep's read is out.
    pub(crate) reading: bool,
    /// An early sweep is due then (storage is back after a trouble, during which a call
    /// may have timed out and been applied later).
    pub(crate) soon: Option<std::time::Instant>,
    /// The sweep out is an early one: suspects it finds are looked at again soon.
    pub(crate) early: bool,
}

impl Orphans {
    /// Storage is back after a trouble: sweep a second from `now` (`run::orphans`).
    pub(crate) fn storage_back(&mut self, now: std::time::Instant) {
        self.soon = Some(now + std::time::Duration::from_secs(1));
    }
}
