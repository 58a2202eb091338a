//! A run's state: what was asked (`RunRequest`), a recovered run to resume
//! (`RecoveredRun`), the run in flight as main keeps it (`ActiveRun`, in `active.rs`); how
//! far a run's Workflow got is its env (`shell/run/env.rs`). Launches coalesced per round
//! and runs in flight that nobody here drives are parts of their own (`rounds/`,
//! `orphans/`).

use std::sync::Arc;
use std::time::Instant;

use crate::config::Job;
use crate::ipc::CallId;
use crate::wire::records::{Millis, RunId, Trigger};

/// A run to start.
pub(crate) struct RunRequest {
    pub job: JobRef,
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    /// The admin call (`saltpeterctl run`) to answer with the run id once recorded.
    pub admin_call: Option<CallId>,
    /// Launched ahead of its slot: wrappers wait for `go`, decided at the slot.
    pub prestaged: bool,
    /// Why a run that is not scheduled was started (a chain), recorded with it.
    pub reason: Option<String>,
}

/// A run in flight recovered after a restart, its Workflow to resume once start-up is
/// over (`run::recovered_workflow`): its open targets cut into `batches` again, and the
/// wrappers launched before the restart given until `reconnect_until` to reconnect.
pub(crate) struct RecoveredRun {
    pub req: RunRequest,
    pub id: RunId,
    pub batches: Vec<Vec<String>>,
    pub reconnect_until: Instant,
}

/// Shared handle to a job definition inside runs.
pub(crate) type JobRef = Arc<Job>;
