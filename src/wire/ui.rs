//! Types of the HTTP API and of the dashboard's live updates (PROTOCOLS.md section 2)
//! that cross the hub-main link.
//!
//! The API's questions and commands are `AdminRequest`s (`wire/admin.rs`, one vocabulary
//! with the admin socket); the live pushes of `/ws` travel as `MainToHub` casts whose
//! payloads are either JSON text main has already shaped for the original UI protocol, or
//! the typed targets below, which the hub needs to keep each subscriber's output position.

use serde::{Deserialize, Serialize};

use super::records::RunId;

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
