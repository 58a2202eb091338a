//! The admin protocol between `saltpeterctl` and the daemon (over the hub's Unix socket,
//! forwarded to main). Frames as on the internal links, after a `Hello` with role `Ctl`.

use serde::{Deserialize, Serialize};

use super::records::{Millis, RunId, RunRecord, RunState, TargetRecord, rfc3339};
use super::wrapper::Stream;

/// A process of the daemon, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessInfo {
    pub role: String,
    pub pid: u32,
}

/// The one vocabulary of questions and commands: `saltpeterctl` sends these over the
/// admin socket, the HTTP API and `/ws` translate their routes and messages into them,
/// and main answers each with one `AdminResponse` shape that the caller renders (tables,
/// `--json`, API JSON). Grouped as main handles them (`roles/main/requests/`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum AdminRequest {
    // The daemon (`requests/daemon.rs`).
    /// Versions, processes, counts (answered with `Status`).
    Status,
    /// `/metrics` in the Prometheus text format (answered with `Metrics`).
    Metrics,
    Reload,
    /// Deploy this build's wrapper to the minions of a glob (default `*`).
    DeployWrapper {
        target: Option<String>,
    },
    /// Which wrapper build each minion has (`saltpeterctl wrapper status`).
    WrapperStatus,
    /// The audit trail, newest first.
    Events {
        job: Option<String>,
        run: Option<RunId>,
        kind: Option<String>,
        since: Option<Millis>,
        limit: u32,
    },
    // Jobs (`requests/jobs.rs`).
    /// Jobs with their state, filtered (answered with `Jobs`).
    Jobs {
        group: Option<String>,
        state: Option<JobState>,
    },
    /// One job: its configuration (secrets redacted), its next `upcoming` fire times, its
    /// last runs (answered with `Job`).
    Job {
        job: String,
        upcoming: u32,
    },
    /// The next firings of a configured job, after `from` (default: now).
    NextFirings {
        job: String,
        from: Option<Millis>,
        count: u32,
    },
    /// Start a job now, on all its targets or on `targets` only (answered with `Started`).
    RunNow {
        job: String,
        targets: Option<Vec<String>>,
    },
    /// Kill the runs of a job in flight (`run`: only that run), or one machine of them.
    KillJob {
        job: String,
        machine: Option<String>,
        run: Option<RunId>,
    },
    // Runs (`requests/runs.rs`).
    /// Runs by job, state and time, newest first, with paging (answered with `Runs`).
    Runs(RunQuery),
    GetRun {
        run: RunId,
    },
    Kill {
        run: RunId,
        machine: Option<String>,
    },
    // Output (`requests/output.rs`).
    /// Part of a target's stored output (answered with `OutputSlice`).
    Output {
        run: RunId,
        machine: String,
        range: OutputRange,
    },
    /// Where a target's live output starts, for the hub's `/ws` views (answered with
    /// `LiveOutput`).
    LiveOutput {
        run: RunId,
        machine: String,
    },
    // Live streams (`roles/main/views/live/`).
    /// Output of a run (or of the newest run of a job) as it arrives: `FollowStart`, then
    /// `OutputChunk`s, then the final `Followed` once the run has ended (at once when
    /// `live` is false or the run is not in flight).
    Follow {
        run: Option<RunId>,
        job: Option<String>,
        machine: Option<String>,
        stream: Option<Stream>,
        tail: Option<u64>,
        live: bool,
    },
    /// A `RunProgress` snapshot and `TargetProgress` changes streamed before the final
    /// `Run`, answered when the run has finished.
    WatchRun {
        run: RunId,
    },
    // Maintenance (`requests/maintenance.rs`; windows in `windows.rs`).
    /// Show or change the run-time maintenance settings.
    Maintenance(MaintenanceChange),
    /// Notifications and exports queued, delivered or given up, newest first (answered
    /// with `Deliveries`).
    Deliveries(crate::wire::notify::DeliveryFilter),
    /// The next `count` openings of the maintenance windows (answered with `Windows`).
    MaintenanceWindows {
        count: u32,
    },
    // Job control (`roles/main/jobctl/`, which keeps the paused and skipping jobs).
    /// Show, pause, resume or skip jobs (answered with `JobControl`).
    JobControl(JobControl),
    // Runs again (`requests/runs.rs`), last so the variants before keep their numbers.
    /// Suspend (`suspend`) or resume (`!suspend`) a run in flight, or one of its targets:
    /// the wrappers stop or continue the commands' process groups (answered with `Done`).
    Suspend {
        run: RunId,
        machine: Option<String>,
        suspend: bool,
    },
}

impl AdminRequest {
    /// Requests whose answer may take as long as a run.
    pub(crate) fn is_long(&self) -> bool {
        matches!(
            self,
            AdminRequest::DeployWrapper { .. }
                | AdminRequest::Follow { .. }
                | AdminRequest::WatchRun { .. }
        )
    }
}

/// Which runs to list, newest first; `before_id` pages backwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunQuery {
    pub job: Option<String>,
    pub state: Option<RunState>,
    /// Runs created at or after this instant.
    pub since: Option<Millis>,
    /// Runs created at or before this instant.
    pub until: Option<Millis>,
    pub before_id: Option<RunId>,
    pub limit: u32,
}

/// Which bytes of a target's output to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputRange {
    /// Only this stream (default: both, interleaved as they came).
    pub stream: Option<Stream>,
    /// Absolute byte position to start at (a previous slice's `next_from`).
    pub from: u64,
    /// Only the last this many bytes of what is selected.
    pub tail: Option<u64>,
    /// At most this many bytes (and never more than main's 8 MiB per answer).
    pub max_bytes: Option<u64>,
}

/// Who sent an admin request on the socket (from SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AdminPeer {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

/// What `jobs --state` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum JobState {
    /// A run is in flight.
    Running,
    /// Enabled, nothing in flight.
    Idle,
    /// `enabled: false`.
    Disabled,
    /// Disabled by a configuration error.
    Invalid,
    /// The last run did not succeed.
    Failing,
    /// Paused with `saltpeterctl pause`: its slots are recorded as skipped.
    Paused,
}

impl JobState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Idle => "idle",
            JobState::Disabled => "disabled",
            JobState::Invalid => "invalid",
            JobState::Failing => "failing",
            JobState::Paused => "paused",
        }
    }
}

/// `saltpeterctl maintenance ...`: what to change in the run-time maintenance settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MaintenanceChange {
    Show,
    GlobalOn,
    GlobalOff,
    Add(String),
    Remove(String),
}

/// Where a maintenance entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MaintenanceSource {
    /// `saltpeter_maintenance` in a configuration file.
    File,
    /// Set with `saltpeterctl maintenance` (persisted in the database).
    Runtime,
}

impl MaintenanceSource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MaintenanceSource::File => "file",
            MaintenanceSource::Runtime => "runtime",
        }
    }
}

/// A job as `jobs` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobSummary {
    pub info: JobInfo,
    /// `running`, `idle`, `disabled` or `invalid`.
    pub state: JobState,
    /// Runs in flight.
    pub running: Vec<RunId>,
}

/// One job in detail, as `saltpeterctl show` and `/api/v1/jobs/NAME` show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobDetail {
    pub summary: JobSummary,
    /// The configuration as the UI and the API show it (`env` names only: values never
    /// leave main), or where a job disabled by errors is defined.
    pub config: super::ui::CronEntryView,
    /// The configuration as `saltpeterctl show` prints it (`Job::redacted_json`: every
    /// key, chains included, `env` values as `***`); `None` for a job disabled by errors.
    pub config_json: Option<String>,
    /// What disables the job, one message per error.
    pub errors: Vec<String>,
    /// The next fire times: the planned slot first (for a disabled job, when its
    /// schedule would fire).
    pub next_runs: Vec<Millis>,
    /// The newest runs, newest first.
    pub last_runs: Vec<RunRecord>,
}

/// A slice of one target's stored output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputSlice {
    #[serde(with = "crate::wire::bytes")]
    pub data: Vec<u8>,
    /// Bytes of the target dropped by its output limit.
    pub omitted_bytes: u64,
    /// Index in `data` where those bytes were, if `data` spans the gap.
    pub omitted_at: Option<usize>,
    /// Bytes received for the target, kept or not.
    pub total_bytes: u64,
    /// Position to continue from.
    pub next_from: u64,
}

/// One entry of the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EventInfo {
    pub id: u64,
    pub at: Millis,
    pub kind: String,
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub machine: Option<String>,
    pub message: String,
    /// The operator who asked for it (admin socket peer), `None` for the daemon itself.
    pub uid: Option<u32>,
}

impl MaintenanceInfo {
    /// The JSON shape `saltpeterctl maintenance show --json` and the HTTP API print.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let sources =
            |list: &[MaintenanceSource]| list.iter().map(|s| s.as_str()).collect::<Vec<_>>();
        serde_json::json!({
            "global": !self.global.is_empty(),
            "global_sources": sources(&self.global),
            "machines": self.machines.iter().map(|(m, from)| serde_json::json!({
                "machine": m,
                "sources": sources(from),
            })).collect::<Vec<_>>(),
            "note": self.note,
        })
    }
}

/// The effective maintenance (union of the file and the run-time settings), entry by entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MaintenanceInfo {
    /// Global maintenance is on, from these sources (empty: off).
    pub global: Vec<MaintenanceSource>,
    /// Machines in maintenance, each with its sources, sorted by name.
    pub machines: Vec<(String, Vec<MaintenanceSource>)>,
    /// What the change did, or why it could not do all that was asked.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StatusInfo {
    pub version: String,
    pub started_at: Millis,
    pub uptime_s: u64,
    pub processes: Vec<ProcessInfo>,
    pub jobs: usize,
    pub running_runs: usize,
    pub config_errors: Vec<String>,
    /// The port wrappers connect to.
    pub wrapper_port: u16,
    /// Why the database cannot store, while it cannot.
    pub db_error: Option<String>,
    /// The HTTP API's port; 0 when `api_ws` is off.
    pub api_port: u16,
    /// Among the servers sharing a PostgreSQL database (docs/ha.md); `None` on SQLite.
    pub ha: Option<HaInfo>,
}

/// This server's role among the servers sharing the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HaInfo {
    pub server: String,
    /// `leader`, `standby`, or `unconfirmed` (the database unreachable).
    pub role: String,
    /// The server holding the leader lease, as far as known.
    pub leader: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobInfo {
    pub name: String,
    pub group: String,
    pub next_run: Option<Millis>,
    pub last_run: Option<Millis>,
    pub last_result: Option<RunState>,
    pub enabled: bool,
    pub error: Option<String>,
    /// Why the job is paused (`saltpeterctl pause`), while it is.
    pub paused: Option<String>,
    /// Outside its `active_from` / `active_until` range: why it has no next run (ended) or
    /// why the next run is that late (not active yet).
    #[serde(default)]
    pub inactive: Option<String>,
}

/// One answer shape per question; the caller renders it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum AdminResponse {
    Status(StatusInfo),
    /// Answer to `WrapperStatus`.
    WrapperFleet(WrapperFleet),
    Metrics(String),
    /// A command was carried out; what it did, in words.
    Done(String),
    /// A run was created (`RunNow`).
    Started {
        run: RunId,
    },
    Failure(AdminFailure),
    /// A progress line of a long operation; the final answer follows.
    Progress(String),
    Events(Vec<EventInfo>),
    /// Answer to `Maintenance`: the effective maintenance after the change.
    Maintenance(MaintenanceInfo),
    /// The jobs listed, and how many invalid jobs the list leaves out (beyond the bounds
    /// of `config::ErrorDigest`).
    Jobs {
        jobs: Vec<JobSummary>,
        invalid_omitted: usize,
    },
    Job(Box<JobDetail>),
    /// Answer to `NextFirings`: instants in order.
    NextFirings(Vec<Millis>),
    Runs(Vec<RunRecord>),
    Run(RunRecord),
    OutputSlice(OutputSlice),
    LiveOutput(super::ui::LiveBase),
    /// Streamed by `Follow`: the run followed and its targets.
    FollowStart {
        run: RunId,
        job: String,
        machines: Vec<String>,
        /// The run is in flight: chunks keep coming until it ends.
        live: bool,
    },
    /// Streamed by `Follow`: output of one target, in order.
    OutputChunk {
        machine: String,
        #[serde(with = "crate::wire::bytes")]
        data: Vec<u8>,
        /// Bytes the output limit dropped at `omitted_at` within `data`.
        omitted_bytes: u64,
        omitted_at: Option<usize>,
    },
    /// Final answer of `Follow`: the run as it ended (or stands).
    Followed(RunRecord),
    /// Streamed by `WatchRun`: the run when watching starts.
    RunProgress(RunRecord),
    /// Streamed by `WatchRun`: a target changed state.
    TargetProgress {
        run: RunId,
        target: TargetRecord,
    },
    /// Answer to `MaintenanceWindows`: openings in order of start.
    Windows(Vec<WindowOccurrence>),
    /// Answer to `JobControl`: the paused and skipping jobs after the change.
    JobControl(JobControlInfo),
    /// Answer to `Deliveries`.
    Deliveries(Vec<crate::wire::notify::DeliveryRecord>),
}

impl AdminResponse {
    /// Streamed ahead of the final answer of a long request.
    pub(crate) fn is_stream(&self) -> bool {
        matches!(
            self,
            AdminResponse::Progress(_)
                | AdminResponse::FollowStart { .. }
                | AdminResponse::OutputChunk { .. }
                | AdminResponse::RunProgress(_)
                | AdminResponse::TargetProgress { .. }
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum AdminFailure {
    NotFound(String),
    Invalid(String),
    Internal(String),
}

impl std::fmt::Display for AdminFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminFailure::NotFound(m) | AdminFailure::Invalid(m) | AdminFailure::Internal(m) => {
                f.write_str(m)
            }
        }
    }
}

/// `saltpeterctl pause|resume|skip`: what to change in a job's run-time control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum JobControl {
    /// The paused and skipping jobs.
    Show,
    /// No slot of `job` runs (each is recorded as skipped) until `resume`, or until
    /// `until` has passed.
    Pause {
        job: String,
        until: Option<Millis>,
    },
    Resume {
        job: String,
    },
    /// The next `next` slots of `job` are recorded as skipped instead of running.
    Skip {
        job: String,
        next: u32,
    },
}

/// One job's run-time control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobControlEntry {
    pub job: String,
    pub paused: bool,
    /// Who paused it (admin socket uid; `None`: over the HTTP API).
    pub paused_by: Option<u32>,
    pub paused_at: Option<Millis>,
    /// The pause ends by itself at this instant.
    pub until: Option<Millis>,
    /// Slots still to skip.
    pub skip_next: u32,
}

/// The answer to `JobControl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobControlInfo {
    pub jobs: Vec<JobControlEntry>,
    /// What the change did.
    pub note: Option<String>,
}

impl JobControlInfo {
    /// The JSON shape `saltpeterctl --json` and the HTTP API print.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let ms = |t: Option<Millis>| t.and_then(rfc3339);
        serde_json::json!({
            "jobs": self.jobs.iter().map(|e| serde_json::json!({
                "job": e.job,
                "paused": e.paused,
                "paused_by": e.paused_by,
                "paused_at": ms(e.paused_at),
                "until": ms(e.until),
                "skip_next": e.skip_next,
            })).collect::<Vec<_>>(),
            "note": self.note,
        })
    }
}

/// One opening of a maintenance window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WindowOccurrence {
    pub name: String,
    pub start: Millis,
    pub end: Millis,
    /// Open now.
    pub open: bool,
    /// `skip` or `defer`.
    pub policy: String,
    /// Machine globs; empty: the whole fleet.
    pub machines: Vec<String>,
    /// Job groups; empty: every job.
    pub groups: Vec<String>,
    pub timezone: String,
}

impl WindowOccurrence {
    /// The JSON shape `saltpeterctl --json` and the HTTP API print.
    pub(crate) fn to_json(list: &[WindowOccurrence]) -> serde_json::Value {
        serde_json::Value::Array(
            list.iter()
                .map(|w| {
                    serde_json::json!({
                        "name": w.name,
                        "start": rfc3339(w.start),
                        "end": rfc3339(w.end),
                        "open": w.open,
                        "policy": w.policy,
                        "machines": w.machines,
                        "groups": w.groups,
                        "timezone": w.timezone,
                    })
                })
                .collect(),
        )
    }
}

/// The minions' wrapper builds, as main knows them (`saltpeterctl wrapper status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WrapperFleet {
    /// SHA-256 of this build's wrapper, once known.
    pub this_build: Option<String>,
    pub minions: Vec<MinionWrapper>,
}

/// One minion's wrapper at one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MinionWrapper {
    pub minion: String,
    pub path: String,
    /// Empty when the operator's `wrapper_source` was deployed and no hello said yet.
    pub sha256: String,
    /// When it was last seen (a hello) or deployed.
    pub seen: Millis,
    /// It is this build.
    pub current: bool,
    /// A deployment to it is in flight.
    pub deploying: bool,
    /// Deployments started to this minion since the daemon started.
    pub deployments: u32,
}
