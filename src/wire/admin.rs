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
    /// The next firings of a configured job, after `from` (default: now).
    NextFirings {
        job: String,
        from: Option<Millis>,
        count: u32,
    },
    /// Show or change the run-time maintenance settings.
    Maintenance(MaintenanceChange),
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
    /// Answer to `NextFirings`: instants in order.
    NextFirings(Vec<Millis>),
    /// Answer to `Maintenance`: the effective maintenance after the change.
    Maintenance(MaintenanceInfo),
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
