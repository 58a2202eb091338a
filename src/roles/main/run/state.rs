//! A run's state as its Workflow steps keep it: what was asked (`RunRequest`) and how far
//! the run got (`RunEnv`). It names none of the steps.

use std::time::Instant;

use crate::ipc::CallId;
use crate::roles::main::state::{JobRef, Main};
use crate::wire::records::{Millis, RunId, RunState, Trigger};
use crate::workflow::StepCtx;

/// A run to start.
pub struct RunRequest {
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

pub struct RunEnv {
    pub(super) req: RunRequest,
    pub(super) run: Option<RunId>,
    /// Live targets found by resolution (before maintenance and `number_of_targets`).
    pub(super) live: Vec<String>,
    /// Matched but silent: recorded as unreachable (255) with the reason.
    pub(super) unreachable: Vec<(String, String)>,
    /// Why no target could be resolved at all (salt failed, nothing matched).
    pub(super) unresolved: Option<(RunState, String)>,
    pub(super) batches: Vec<Vec<String>>,
    pub(super) maintenance: Vec<String>,
    pub(super) batch: usize,
    pub(super) call: Option<CallId>,
    pub(super) pickup_deadline: Option<Instant>,
    pub(super) launch_started: Option<Instant>,
    /// A batch's wrappers, held until db has committed their `launching` state (the
    /// call id of that barrier): a server that dies in between must not leave them
    /// `pending` for the next leader to launch a second time (`launch_batch`).
    pub(super) launch_held: Option<(CallId, Vec<crate::wire::link::LaunchTarget>)>,
    /// Targets of the current batch waiting for their next attempt (`retry.rs`).
    pub(super) retry_at: std::collections::BTreeMap<String, Instant>,
    /// Salt's word on minions that did not return the launch (used if their wrapper
    /// never calls back before the pick-up deadline).
    pub(super) silent: std::collections::BTreeMap<String, String>,
    /// The targets came from the master's match, not a ping: a minion silent at the
    /// launch is unreachable.
    pub(super) resolved_from_cache: bool,
    /// The ping of minions waited for (`unreachable.rs`), and when the next one is due.
    pub(super) probe: Option<CallId>,
    pub(super) next_probe: Option<Instant>,
    /// The run's start was recorded (a later launch does not move it).
    pub(super) start_recorded: bool,
    /// The launch round (its slot) this pre-staged salt run belongs to until its launch
    /// is queued (`rounds.rs`).
    pub(super) round: Option<crate::wire::records::Millis>,
    /// Its launch waits in its round or for the round's answer.
    pub(super) launch_queued: bool,
    /// Since when the batch waits for its minions' wrapper deployment (`fleet.rs`).
    pub(super) deploy_since: Option<Instant>,
    /// The ping of targets whose wrappers never called back by the pick-up deadline: its
    /// call and those targets (255 only if the minion does not answer either).
    pub(super) pickup_probe: Option<(CallId, Vec<String>)>,
    /// Counted in `Main::busy_jobs` until recorded.
    pub(super) counted: bool,
    /// Since when the run waits for a place under `max_runs_in_flight` (`capacity.rs`).
    pub(super) capacity_since: Option<Instant>,
}

pub type Sc<'a> = StepCtx<'a, RunEnv, Main>;

impl RunEnv {
    /// The pick-up deadline moves to `at`, never earlier than it stands (after a restart
    /// it starts at the wrappers' reconnect grace).
    pub(super) fn extend_pickup(&mut self, at: Instant) {
        self.pickup_deadline = Some(self.pickup_deadline.map_or(at, |d| d.max(at)));
    }
}
