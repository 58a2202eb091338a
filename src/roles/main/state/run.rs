//! A run's state: what was asked (`RunRequest`), how far its Workflow got (`RunEnv`), the
//! run in flight as main keeps it (`ActiveRun`, in `active.rs`); launches coalesced per round (`Rounds`),
//! runs in flight that nobody here drives (`Orphans`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Job;
use crate::ipc::CallId;
use crate::wire::link::{MinionOutcome, SaltSettings};
use crate::wire::records::{Millis, RunId, RunState, Trigger};

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

pub(crate) struct RunEnv {
    pub(crate) req: RunRequest,
    pub(crate) run: Option<RunId>,
    /// Live targets found by resolution (before maintenance and `number_of_targets`).
    pub(crate) live: Vec<String>,
    /// Matched but silent: recorded as unreachable (255) with the reason.
    pub(crate) unreachable: Vec<(String, String)>,
    /// Why no target could be resolved at all (salt failed, nothing matched).
    pub(crate) unresolved: Option<(RunState, String)>,
    pub(crate) batches: Vec<Vec<String>>,
    pub(crate) maintenance: Vec<String>,
    pub(crate) batch: usize,
    pub(crate) call: Option<CallId>,
    pub(crate) pickup_deadline: Option<Instant>,
    pub(crate) launch_started: Option<Instant>,
    /// A batch's wrappers, held until db has committed their `launching` state (the
    /// call id of that barrier): a server that dies in between must not leave them
    /// `pending` for the next leader to launch a second time (`launch_batch`).
    pub(crate) launch_held: Option<(CallId, Vec<crate::wire::link::LaunchTarget>)>,
    /// Targets of the current batch waiting for their next attempt (`retry.rs`).
    pub(crate) retry_at: std::collections::BTreeMap<String, Instant>,
    /// Salt's word on minions that did not return the launch (used if their wrapper
    /// never calls back before the pick-up deadline).
    pub(crate) silent: std::collections::BTreeMap<String, String>,
    /// The targets came from the master's match, not a ping: a minion silent at the
    /// launch is unreachable.
    pub(crate) resolved_from_cache: bool,
    /// The ping of minions waited for (`unreachable.rs`), and when the next one is due.
    pub(crate) probe: Option<CallId>,
    pub(crate) next_probe: Option<Instant>,
    /// The run's start was recorded (a later launch does not move it).
    pub(crate) start_recorded: bool,
    /// The launch round (its slot) this pre-staged salt run belongs to until its launch
    /// is queued (`rounds.rs`).
    pub(crate) round: Option<crate::wire::records::Millis>,
    /// Its launch waits in its round or for the round's answer.
    pub(crate) launch_queued: bool,
    /// Since when the batch waits for its minions' wrapper deployment (`fleet/`).
    pub(crate) deploy_since: Option<Instant>,
    /// The ping of targets whose wrappers never called back by the pick-up deadline: its
    /// call and those targets (255 only if the minion does not answer either).
    pub(crate) pickup_probe: Option<(CallId, Vec<String>)>,
    /// Counted in `Main::busy_jobs` until recorded.
    pub(crate) counted: bool,
    /// Since when the run waits for a place under `max_runs_in_flight` (`capacity.rs`).
    pub(crate) capacity_since: Option<Instant>,
    /// Its end as decided, and how often its write failed (`finalize`).
    pub(crate) end: Option<RunEnd>,
}

/// A run's end, written until stored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunEnd {
    pub at: Millis,
    pub failures: u32,
}

impl RunEnd {
    /// The wait before the next write: 0.5 s, twice as long each time, up to 10 s.
    pub(crate) fn retry_in(&self) -> std::time::Duration {
        let first = crate::roles::main::state::storage::FIRST_RETRY;
        let shift = self.failures.saturating_sub(1).min(5);
        (first * (1 << shift)).min(crate::roles::main::state::storage::LAST_RETRY)
    }
}

/// Shared handle to a job definition inside runs.
pub(crate) type JobRef = Arc<Job>;

impl RunEnv {
    /// The pick-up deadline moves to `at`, never earlier than it stands (after a restart
    /// it starts at the wrappers' reconnect grace).
    pub(crate) fn extend_pickup(&mut self, at: Instant) {
        self.pickup_deadline = Some(self.pickup_deadline.map_or(at, |d| d.max(at)));
    }
}

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
