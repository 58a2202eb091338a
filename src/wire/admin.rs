//! The admin protocol between `saltpeterctl` and the daemon (over the hub's Unix socket,
//! forwarded to main). Frames as on the internal links, after a `Hello` with role `Ctl`.

use serde::{Deserialize, Serialize};

use super::link::ProcessInfo;
use super::records::{Millis, RunId, RunRecord, RunState, TargetRecord};
use super::wrapper::Stream;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AdminRequest {
    Status,
    Jobs,
    Runs {
        job: Option<String>,
        limit: u32,
    },
    GetRun {
        run: RunId,
    },
    RunNow {
        job: String,
    },
    /// Answered when the run has finished.
    WaitRun {
        run: RunId,
    },
    Output {
        run: RunId,
        machine: String,
    },
    Kill {
        run: RunId,
        machine: Option<String>,
    },
    Reload,
    /// Deploy this build's wrapper to the minions of a glob (default `*`).
    DeployWrapper {
        target: Option<String>,
    },
    /// Jobs with their state, filtered.
    ListJobs {
        group: Option<String>,
        state: Option<JobState>,
    },
    /// One job: its configuration (secrets redacted), next fire times, last runs.
    ShowJob {
        job: String,
    },
    /// Runs, newest first, filtered.
    FindRuns {
        job: Option<String>,
        state: Option<RunState>,
        since: Option<Millis>,
        limit: u32,
    },
    /// A slice of one target's output.
    ReadOutput {
        run: RunId,
        machine: String,
        stream: Option<Stream>,
        tail: Option<u64>,
        /// Position to start at (a previous slice's `next_from`).
        from: u64,
    },
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
    /// Start a job now on some of its targets.
    RunWith {
        job: String,
        targets: Vec<String>,
    },
    /// Like `WaitRun`, with a `RunProgress` snapshot and `TargetProgress` changes streamed
    /// before the final `Run`.
    WatchRun {
        run: RunId,
    },
    /// Kill the runs of a job in flight, or one machine of them (`run`: only that run).
    KillJob {
        job: String,
        machine: Option<String>,
        run: Option<RunId>,
    },
    /// The audit trail, newest first.
    Events {
        job: Option<String>,
        run: Option<RunId>,
        kind: Option<String>,
        since: Option<Millis>,
        limit: u32,
    },
    /// One job with its next `upcoming` fire times (answered with `Job`).
    JobDetail {
        job: String,
        upcoming: u32,
    },
    /// Runs by job, state and time, with paging (answered with `Runs`).
    RunsQuery(super::ui::RunQuery),
    /// Part of a target's output (answered with `OutputSlice`).
    OutputRange {
        run: RunId,
        machine: String,
        range: super::ui::OutputRange,
    },
    /// `/metrics` in the Prometheus text format (answered with `Metrics`).
    Metrics,
    /// Where a target's live output starts (answered with `LiveOutput`).
    LiveOutput {
        run: RunId,
        machine: String,
    },
    /// The next firings of a configured job, after `from` (default: now).
    NextFirings {
        job: String,
        from: Option<Millis>,
        count: u32,
    },
    /// Show or change the run-time maintenance settings.
    Maintenance(MaintenanceChange),
    /// Notifications and exports queued, delivered or given up, newest first (answered
    /// with `Deliveries`).
    Deliveries(crate::wire::notify::DeliveryFilter),
    /// The next `count` openings of the maintenance windows (answered with `Windows`).
    MaintenanceWindows {
        count: u32,
    },
    /// Show, pause, resume or skip jobs (answered with `JobControl`).
    JobControl(JobControl),
}

impl AdminRequest {
    /// Requests whose answer may take as long as a run.
    pub fn is_long(&self) -> bool {
        matches!(
            self,
            AdminRequest::WaitRun { .. }
                | AdminRequest::DeployWrapper { .. }
                | AdminRequest::Follow { .. }
                | AdminRequest::WatchRun { .. }
        )
    }

    /// Requests that change something (recorded in the audit trail with the peer's uid).
    pub fn changes_state(&self) -> bool {
        matches!(
            self,
            AdminRequest::RunNow { .. }
                | AdminRequest::RunWith { .. }
                | AdminRequest::Kill { .. }
                | AdminRequest::KillJob { .. }
                | AdminRequest::Reload
                | AdminRequest::DeployWrapper { .. }
        ) || matches!(self, AdminRequest::JobControl(c) if *c != JobControl::Show)
    }
}

/// Who sent an admin request on the socket (from SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminPeer {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

/// What `jobs --state` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
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
    pub fn as_str(self) -> &'static str {
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
pub enum MaintenanceChange {
    Show,
    GlobalOn,
    GlobalOff,
    Add(String),
    Remove(String),
}

/// Where a maintenance entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaintenanceSource {
    /// `saltpeter_maintenance` in a configuration file.
    File,
    /// Set with `saltpeterctl maintenance` (persisted in the database).
    Runtime,
}

impl MaintenanceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenanceSource::File => "file",
            MaintenanceSource::Runtime => "runtime",
        }
    }
}

/// A job as `jobs` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSummary {
    pub info: JobInfo,
    /// `running`, `idle`, `disabled` or `invalid`.
    pub state: JobState,
    /// Runs in flight.
    pub running: Vec<RunId>,
}

/// A job as `show` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDetail {
    pub summary: JobSummary,
    /// `Job::redacted_json` as text (no secrets); `None` for a job disabled by errors.
    pub config_json: Option<String>,
    pub errors: Vec<String>,
    pub next_runs: Vec<Millis>,
    pub last_runs: Vec<RunRecord>,
}

/// A slice of one target's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutputSlice {
    pub data: Vec<u8>,
    /// Bytes dropped by the output limit, and where in `data` they were.
    pub omitted_bytes: u64,
    pub omitted_at: Option<usize>,
    /// Bytes received for the target in total.
    pub total_bytes: u64,
    /// Position after this slice.
    pub next_from: u64,
}

/// One entry of the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventInfo {
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
    pub fn to_json(&self) -> serde_json::Value {
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
pub struct MaintenanceInfo {
    /// Global maintenance is on, from these sources (empty: off).
    pub global: Vec<MaintenanceSource>,
    /// Machines in maintenance, each with its sources, sorted by name.
    pub machines: Vec<(String, Vec<MaintenanceSource>)>,
    /// What the change did, or why it could not do all that was asked.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusInfo {
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInfo {
    pub name: String,
    pub group: String,
    pub next_run: Option<Millis>,
    pub last_run: Option<Millis>,
    pub last_result: Option<RunState>,
    pub enabled: bool,
    pub error: Option<String>,
    /// Why the job is paused (`saltpeterctl pause`), while it is.
    pub paused: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AdminResponse {
    Status(StatusInfo),
    Jobs(Vec<JobInfo>),
    Runs(Vec<RunRecord>),
    Run(RunRecord),
    Started {
        run: RunId,
    },
    Output {
        data: Vec<u8>,
        /// Bytes dropped by the output limit, and where in `data` they were.
        omitted_bytes: u64,
        omitted_at: Option<usize>,
    },
    Done(String),
    /// A progress line of a long operation; the final answer follows.
    Progress(String),
    Failure(AdminFailure),
    JobList(Vec<JobSummary>),
    JobDetail(Box<JobDetail>),
    OutputSlice(OutputSlice),
    Events(Vec<EventInfo>),
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
    Job(super::ui::JobDetail),
    /// A slice of output for the HTTP API (`OutputRange`).
    UiOutputSlice(super::ui::OutputSlice),
    Metrics(String),
    LiveOutput(super::ui::LiveBase),
    /// Answer to `NextFirings`: instants in order.
    NextFirings(Vec<Millis>),
    /// Answer to `Maintenance`: the effective maintenance after the change.
    Maintenance(MaintenanceInfo),
    /// Answer to `Deliveries`.
    Deliveries(Vec<crate::wire::notify::DeliveryRecord>),
    /// Answer to `MaintenanceWindows`: openings in order of start.
    Windows(Vec<WindowOccurrence>),
    /// Answer to `JobControl`: the paused and skipping jobs after the change.
    JobControl(JobControlInfo),
}

impl AdminResponse {
    /// Streamed ahead of the final answer of a long request.
    pub fn is_stream(&self) -> bool {
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
pub enum AdminFailure {
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
pub enum JobControl {
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
pub struct JobControlEntry {
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
pub struct JobControlInfo {
    pub jobs: Vec<JobControlEntry>,
    /// What the change did.
    pub note: Option<String>,
}

impl JobControlInfo {
    /// The JSON shape `saltpeterctl --json` and the HTTP API print.
    pub fn to_json(&self) -> serde_json::Value {
        let ms = |t: Option<Millis>| {
            t.and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        };
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
pub struct WindowOccurrence {
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
    pub fn to_json(list: &[WindowOccurrence]) -> serde_json::Value {
        let t = |ms: Millis| {
            chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        };
        serde_json::Value::Array(
            list.iter()
                .map(|w| {
                    serde_json::json!({
                        "name": w.name,
                        "start": t(w.start),
                        "end": t(w.end),
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
