//! Types of the HTTP API and of the dashboard's live updates (PROTOCOLS.md section 2)
//! that cross the hub-main link.
//!
//! The API's requests travel as `AdminRequest` variants (the admin socket can use them
//! too); the live pushes of `/ws` travel as `MainToHub` casts whose payloads are either
//! JSON text main has already shaped for the original UI protocol, or the typed targets
//! below, which the hub needs to keep each subscriber's output position.

use serde::{Deserialize, Serialize};

use super::admin::JobInfo;
use super::records::{Millis, RunId, RunState};

/// Which runs to list, newest first; `before_id` pages backwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
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
pub struct OutputRange {
    /// Absolute byte position to start at (a previous `next_from`).
    pub from: u64,
    /// Only the last this many bytes of what is selected.
    pub tail: Option<u64>,
    /// At most this many bytes.
    pub max_bytes: Option<u64>,
}

/// A slice of a target's stored output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSlice {
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

/// One job, as `/api/v1/jobs/NAME` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDetail {
    pub info: JobInfo,
    /// The next fire times (UTC milliseconds).
    pub next_runs: Vec<Millis>,
    /// The job's configuration as JSON, `env` values replaced by `***` (`null` for a job
    /// disabled by an error).
    pub config_json: String,
    /// Runs of the job in flight.
    pub running: Vec<RunId>,
}

/// Where the live output of one target starts for the hub: the stored output, and the
/// last frame it contains (later frames arrive as `MainToHub::UiOutput`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveBase {
    pub data: Vec<u8>,
    pub omitted_bytes: u64,
    pub omitted_at: Option<usize>,
    /// Frames up to this seq are in `data`; `u64::MAX` for a finished run.
    pub upto_seq: u64,
}

/// A target whose output a `details` message covers: the hub keeps its text for
/// subscribers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveTarget {
    pub machine: String,
    pub run: RunId,
    /// The target's outcome is recorded: no more output will come.
    pub finished: bool,
}

/// The instance name of a run in the original UI protocol (`job_12`).
pub fn instance(job: &str, run: RunId) -> String {
    format!("{job}_{run}")
}

/// The run id of an instance name (`job_12`, or `12`).
pub fn run_of_instance(instance: &str) -> Option<RunId> {
    instance.rsplit('_').next().and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_round_trip() {
        assert_eq!(instance("backup_db", 12), "backup_db_12");
        assert_eq!(run_of_instance("backup_db_12"), Some(12));
        assert_eq!(run_of_instance("12"), Some(12));
        assert_eq!(run_of_instance("backup"), None);
    }
}
