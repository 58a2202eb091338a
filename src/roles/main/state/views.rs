//! What operators watch: streaming admin calls (`live`), the dashboard's view
//! and `/metrics` (`ui`, `metrics`), a standby's mirror of the leader's runs (`mirror`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::ipc::CallId;
use crate::metrics::Histogram;
use crate::roles::main::rules::job_metrics::PerJob;
use crate::wire::records::{
    Millis, RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState,
};
use crate::wire::ui::StatusView;
use crate::wire::wrapper::Stream;

#[derive(Default)]
pub(crate) struct Live {
    pub(crate) followers: HashMap<CallId, Follower>,
    pub(crate) watchers: HashMap<RunId, Vec<Watcher>>,
}

/// What `Follow` asked for.
#[derive(Debug, Clone)]
pub(crate) struct FollowSpec {
    pub run: Option<RunId>,
    pub job: Option<String>,
    pub machine: Option<String>,
    pub stream: Option<Stream>,
    pub tail: Option<u64>,
    pub live: bool,
}

pub(crate) struct Follower {
    pub(crate) spec: FollowSpec,
    pub(crate) run: RunId,
    pub(crate) in_flight: bool,
    pub(crate) cursors: BTreeMap<String, Cursor>,
    pub(crate) ending: bool,
}

#[derive(Default)]
pub(crate) struct Cursor {
    pub(crate) next_from: u64,
    pub(crate) read_once: bool,
    pub(crate) reading: bool,
    /// More may be there: read again once the read in flight is answered.
    pub(crate) dirty: bool,
}

pub(crate) struct Watcher {
    pub(crate) call: CallId,
    /// What each watcher last heard of each target: state, reason, suspended.
    pub(crate) seen: BTreeMap<String, (TargetState, Option<TargetReason>, bool)>,
}

/// The last finished run of a job, as the dashboard shows it.
#[derive(Debug, Clone)]
pub(crate) struct LastRun {
    pub(crate) id: RunId,
    pub(crate) state: RunState,
    pub(crate) started: Option<Millis>,
    pub(crate) targets: Vec<TargetRecord>,
    pub(crate) versions: BTreeMap<String, String>,
}

#[derive(Default)]
pub(crate) struct UiState {
    /// Jobs some `/ws` client is subscribed to.
    pub(crate) watched: BTreeSet<String>,
    pub(crate) dirty_jobs: BTreeSet<String>,
    pub(crate) config_dirty: bool,
    pub(crate) config_serial: i64,
    pub(crate) last_status: Option<StatusView>,
    pub(crate) last: BTreeMap<String, LastRun>,
    /// Highest output seq passed to db per target of runs in flight.
    pub(crate) sent: HashMap<RunId, HashMap<String, u64>>,
    pub(crate) versions: HashMap<(RunId, String), String>,
    /// When main first saw each run in flight.
    pub(crate) run_started: HashMap<RunId, Millis>,
    /// Jobs whose last firing was skipped because the previous run was still going.
    pub(crate) overlapped: BTreeSet<String>,
    pub metrics: MainMetrics,
}

impl UiState {
    /// `job`'s view is sent again at the end of the turn.
    pub(crate) fn job_changed(&mut self, job: &str) {
        self.dirty_jobs.insert(job.to_string());
    }
}

pub(crate) struct MainMetrics {
    pub(crate) runs_by_state: BTreeMap<&'static str, u64>,
    pub(crate) run_duration: Histogram,
    pub(crate) lateness: Histogram,
    /// Salt batch launches: the salt call to its answer.
    pub(crate) launch: Histogram,
    pub(crate) output_bytes: u64,
    pub(crate) output_frames: u64,
    /// The latest histogram db reported.
    pub db_commit: Option<Histogram>,
    /// Per job (rendered for the jobs configured now: jobs × states series at most).
    pub per_job: PerJob,
    /// Targets of ended runs by how they ended (`job_metrics::TARGET_RESULTS`).
    pub(crate) targets_by_result: BTreeMap<&'static str, u64>,
    /// Slots not acted on in time (the daemon down, the loop late).
    pub(crate) slots_missed: u64,
}

#[derive(Default)]
pub(crate) struct Mirror {
    pub(crate) runs: BTreeMap<RunId, Mirrored>,
    /// Runs whose record is to be read.
    pub(crate) stale: BTreeSet<RunId>,
    /// Runs whose record read is out.
    pub(crate) reading: BTreeSet<RunId>,
    /// Runs with output committed since the last poll.
    pub(crate) output: BTreeSet<RunId>,
    pub(crate) feeds: BTreeMap<(RunId, String), Feed>,
    pub(crate) resync: bool,
    pub(crate) resyncing: bool,
    pub(crate) resynced_at: Option<Instant>,
}

pub(crate) struct Mirrored {
    /// As the views show it.
    pub(crate) shown: RunRecord,
    /// Read, shown once the run's feeds have caught up with it.
    pub(crate) next: Option<RunRecord>,
}

/// The stored output of one target, as the hub's `/ws` view of it was given so far.
pub(crate) struct Feed {
    pub(crate) job: String,
    pub(crate) next_from: u64,
    pub(crate) reading: bool,
    /// More was committed while a read was out.
    pub(crate) dirty: bool,
    /// The hub's read of the stored output is out.
    pub(crate) base: bool,
}
