//! The live view of main's state for the dashboard's `/ws` (docs/api.md, `/ws`).
//!
//! Event-driven: what changes a run or a job marks the job (a run changed, ended, a slot
//! came, the configuration was loaded, a `/ws` client started watching it), and at the
//! end of every turn the shell (`shell/views.rs`) sends the hub typed views
//! (`crate::wire::ui`) of what changed, in this order (`render.rs`):
//! 1. `ConfigView` (the jobs, `env` names only, maintenance, settings) when the
//!    configuration was (re)loaded;
//! 2. `StatusView` (runs in flight, last result per job) when it differs from the last one;
//! 3. `DetailsView` of each changed job that a `/ws` client watches (hub's `UiWatch`).
//!
//! The hub renders the JSON, re-sends it every 2 s while clients are connected, and keeps
//! the live output of watched targets from the wrapper frames it relays itself; main only
//! remembers the last output seq it passed to db per target, which is where the hub's
//! read of the stored output (`LiveOutput`) ends. Main keeps the last finished run of each
//! job in memory (loaded from db at start), so nothing here waits for db.

pub(crate) mod render;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ipc::rpc::Call;
use crate::roles::main::messages::{DbResult, FinishedRun, Message, Out, Then};
use crate::roles::main::views::job_metrics::{EndedRun, run_lateness};
use crate::roles::main::views::metrics::MainMetrics;
use crate::wire::db::{DbRequest, calls};
use crate::wire::records::{Millis, RunId, RunRecord, RunState, TargetRecord};
use crate::wire::ui::StatusView;

/// The dashboard's view of main: what changed since the last views went out, and what
/// only main knows of the runs.
#[derive(Default)]
pub(crate) struct UiState {
    /// Jobs some `/ws` client is subscribed to.
    watched: BTreeSet<String>,
    dirty_jobs: BTreeSet<String>,
    config_dirty: bool,
    last_status: Option<StatusView>,
    last: BTreeMap<String, LastRun>,
    /// Highest output seq passed to db per target of runs in flight.
    sent: HashMap<RunId, HashMap<String, u64>>,
    versions: HashMap<(RunId, String), String>,
    /// When main first saw each run in flight.
    run_started: HashMap<RunId, Millis>,
    /// Jobs whose last firing was skipped because the previous run was still going.
    overlapped: BTreeSet<String>,
}

/// The last finished run of a job, as the dashboard shows it.
#[derive(Debug, Clone)]
struct LastRun {
    id: RunId,
    state: RunState,
    started: Option<Millis>,
    targets: Vec<TargetRecord>,
    versions: BTreeMap<String, String>,
}

impl LastRun {
    fn from_record(r: &RunRecord) -> LastRun {
        LastRun {
            id: r.id,
            state: r.state,
            started: r.started.or(r.slot),
            targets: r.targets.clone(),
            versions: BTreeMap::new(),
        }
    }

    /// The original's current rule: a run is good when every target succeeded (one
    /// failed target makes it a failure).
    fn ok(&self) -> bool {
        self.state == RunState::Succeeded
    }
}

impl UiState {
    /// Start-up: the configuration goes out at once, the status once db said what ran
    /// last (`Message::LastRuns`).
    pub(crate) fn start(&mut self) -> Out {
        self.config_dirty = true;
        let mut out = Out::new();
        out.db(DbRequest::LastRuns, Then::tell(Message::LastRuns));
        out
    }

    /// db's newest run of every job (or why not).
    pub(crate) fn last_runs(&mut self, result: DbResult) {
        match calls::LastRuns::take(result) {
            Ok(runs) => {
                for (job, run) in runs {
                    if run.state.is_final() && run.state != RunState::Skipped {
                        self.last.insert(job, LastRun::from_record(&run));
                    }
                }
                let jobs: Vec<String> = self.last.keys().cloned().collect();
                self.dirty_jobs.extend(jobs);
            }
            Err(e) => log::warn!("dashboard: last runs not loaded: {e}"),
        }
    }

    /// `job`'s view is sent again at the end of the turn.
    pub(crate) fn job_changed(&mut self, job: &str) {
        self.dirty_jobs.insert(job.to_string());
    }

    /// `run` of `job`, in flight, changed at `now` (created, a target started or settled,
    /// ...).
    pub(super) fn run_changed(&mut self, run: RunId, job: &str, now: Millis) {
        self.run_started.entry(run).or_insert(now);
        self.dirty_jobs.insert(job.to_string());
    }

    /// A run the leader drove ended (on a standby): it becomes its job's last run.
    pub(super) fn mirrored_run_ended(&mut self, record: &RunRecord) {
        if record.state.is_final() && record.state != RunState::Skipped {
            let newer = self
                .last
                .get(&record.job)
                .is_some_and(|last| last.id > record.id);
            if !newer {
                let last = LastRun::from_record(record);
                self.last.insert(record.job.clone(), last);
            }
        }
        self.dirty_jobs.insert(record.job.clone());
    }

    /// A run ended at `now`: counted in `metrics`, and it becomes its job's last run.
    pub(super) fn run_finished(
        &mut self,
        end: FinishedRun,
        now: Millis,
        metrics: &mut MainMetrics,
    ) {
        let run = end.run;
        let started = self.run_started.remove(&run);
        let ended = EndedRun {
            state: end.state,
            duration_s: started.map(|s| (now - s) as f64 / 1000.0),
            now_ms: now,
            lateness_s: run_lateness(end.slot, end.trigger, &end.targets),
            targets: &end.targets,
        };
        metrics.run_ended(&end.job, &ended);
        let mut versions = BTreeMap::new();
        self.sent.remove(&run);
        for t in &end.targets {
            if let Some(v) = self.versions.remove(&(run, t.machine.clone())) {
                versions.insert(t.machine.clone(), v);
            }
        }
        if end.state != RunState::Skipped {
            let last = LastRun {
                id: run,
                state: end.state,
                started: started.or(end.slot),
                targets: end.targets,
                versions,
            };
            self.last.insert(end.job.clone(), last);
        }
        self.overlapped.remove(&end.job);
        self.dirty_jobs.insert(end.job);
    }

    /// A slot of `job` came: it ran or was skipped (`skip` says why).
    pub(super) fn slot_fired(&mut self, job: &str, skip: Option<&str>) {
        if skip.is_some_and(|why| why.starts_with("overlap")) {
            self.overlapped.insert(job.to_string());
        }
        // Its next run moved on.
        self.dirty_jobs.insert(job.to_string());
    }

    /// The wrapper of `machine` in `run` was welcomed, running `version`.
    pub(crate) fn wrapper_welcomed(&mut self, run: RunId, machine: &str, version: &str) {
        self.versions
            .insert((run, machine.to_string()), version.to_string());
    }

    /// Output seq `seq` of `machine` in `run` (in flight) goes to db.
    pub(super) fn output_framed(&mut self, run: RunId, machine: &str, seq: u64) {
        let per_run = self.sent.entry(run).or_default();
        match per_run.get_mut(machine) {
            Some(sent) => *sent = (*sent).max(seq),
            None => {
                per_run.insert(machine.to_string(), seq);
            }
        }
    }

    /// The last output seq passed to db for `machine` in `run`, `acked` the seq committed
    /// of a run in flight (`None`: not in flight): a read of its output sent now contains
    /// every frame up to it (the link to db keeps the order).
    pub(super) fn seen_seq(&self, run: RunId, machine: &str, acked: Option<u64>) -> u64 {
        let Some(acked) = acked else {
            return u64::MAX; // finished: everything is stored
        };
        self.sent
            .get(&run)
            .and_then(|m| m.get(machine))
            .copied()
            .unwrap_or(0)
            .max(acked)
    }

    /// The configuration was (re)loaded, with `jobs`.
    pub(crate) fn config_changed<'a>(&mut self, jobs: impl Iterator<Item = &'a String>) {
        self.config_dirty = true;
        self.dirty_jobs.extend(jobs.cloned());
    }

    /// The hub's `/ws` clients started or stopped watching `job`.
    pub(crate) fn watch(&mut self, job: String, watch: bool) {
        if watch {
            self.dirty_jobs.insert(job.clone());
            self.watched.insert(job);
        } else {
            self.watched.remove(&job);
        }
    }
}
