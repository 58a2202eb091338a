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
    /// Deploy this build's wrapper to the minions of a glob (default `*`).
    DeployWrapper {
        target: Option<String>,
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
    /// Why the database cannot store, while it cannot.
    pub db_error: Option<String>,
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
