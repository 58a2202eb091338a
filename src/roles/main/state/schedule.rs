//! The schedule's state: paused and skipping jobs (`jobctl`).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::wire::records::Millis;

/// A pause of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pause {
    /// The operator's uid (`None`: over the HTTP API).
    pub by: Option<u32>,
    pub at: Millis,
    pub until: Option<Millis>,
}

/// One job's control.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Control {
    pub paused: Option<Pause>,
    pub skip_next: u32,
    /// Who asked for the skips.
    pub skip_by: Option<u32>,
}

/// Job control and deferred slots, kept by main.
#[derive(Debug, Default)]
pub(crate) struct JobCtl {
    pub state: JobCtlState,
    /// `(run at, job, slot, window)`: slots deferred to a window's end.
    pub(crate) deferred: BTreeSet<(DateTime<Utc>, String, DateTime<Utc>, String)>,
    /// The deferred slot being fired now (it passed `hold` once; its skips are not taken
    /// again).
    pub(crate) refiring: Option<(String, DateTime<Utc>)>,
}

/// What is persisted: per job, its control (jobs with nothing set are absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobCtlState {
    pub jobs: BTreeMap<String, Control>,
}
