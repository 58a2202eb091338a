//! The admin protocol between `saltpeterctl` and the daemon (over the hub's Unix socket,
//! forwarded to main). Frames as on the internal links, after a `Hello` with role `Ctl`.

use serde::{Deserialize, Serialize};

use super::link::ProcessInfo;
use super::records::{Millis, RunId, RunRecord, RunState};

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
    /// Kill the runs of a job in flight, or one machine of them (`run`: only that run).
    KillJob {
        job: String,
        machine: Option<String>,
        run: Option<RunId>,
    },
    /// `/metrics` in the Prometheus text format (answered with `Metrics`).
    Metrics,
    /// Where a target's live output starts (answered with `LiveOutput`).
    LiveOutput {
        run: RunId,
        machine: String,
    },
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
    Job(super::ui::JobDetail),
    OutputSlice(super::ui::OutputSlice),
    Metrics(String),
    LiveOutput(super::ui::LiveBase),
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
