//! The vocabulary of workflows: what a step returns, what it waits for, what the caller
//! reports, how a workflow ended.

use std::fmt;
use std::time::Instant;

/// Most steps one workflow may insert over its whole life; a runaway insert fails the
/// workflow.
pub(super) const MAX_INSERTED_STEPS: usize = 4096;

/// How many times in a row a step may return `Wait` on a deadline that has already passed
/// before the workflow fails instead of spinning.
pub(super) const MAX_ALREADY_FIRED_WAITS: u32 = 64;

/// How many ended workflows [`Registry::drain_finished`](super::Registry::drain_finished)
/// keeps when nobody drains them; the oldest are dropped first.
pub(super) const MAX_FINISHED_KEPT: usize = 1024;

/// Identity of a registered workflow, unique for the life of a [`Registry`](super::Registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct WorkflowId(pub u64);

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wf#{}", self.0)
    }
}

/// What a step tells the engine to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Go on with the following step.
    Next,
    /// Park here; run this step again when the source fires.
    Wait(Wake),
    /// Skip the remaining normal steps; the `always` steps still run. In a cleanup
    /// step it means the same as `Next`.
    Done,
    /// End the normal steps with this reason; the `always` steps still run.
    Fail(String),
}

impl Step {
    /// `Step::Fail` from anything printable, e.g. an error of another module.
    pub(crate) fn fail(reason: impl fmt::Display) -> Step {
        Step::Fail(reason.to_string())
    }
}

/// What a waiting step waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The reply (or failure) of the IPC call with this id.
    Call(u64),
    /// A deadline the registry watches itself (see [`Registry::due_timers`](super::Registry::due_timers)).
    At(Instant),
    /// An event the caller announces (see [`WakeEvent`]).
    Event(WakeEvent),
    /// Whichever of these fires first. An empty list waits on nothing, which
    /// [`Registry::stalled`](super::Registry::stalled) reports at once.
    Any(Vec<Wake>),
}

impl Wake {
    pub(crate) fn event(event: WakeEvent) -> Wake {
        Wake::Event(event)
    }
}

/// The events a caller announces to [`Registry::wake`](super::Registry::wake): a closed, typed set, so a waiting
/// step and the handler that wakes it name the same value and nothing is parsed back from
/// a string. Ids are the caller's (main: run ids); the engine only compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WakeEvent {
    /// Something about the run with this id changed (a target exited, was lost, was
    /// killed, ...).
    RunChanged(u64),
    /// The caller's fleet state changed (main: a wrapper deployment ended, the minions'
    /// builds were loaded).
    Fleet,
    /// A place under a concurrency cap may have freed up (main: a target or a run ended).
    Capacity,
}

/// What the caller reports to [`Registry::wake`](super::Registry::wake): a source that lives outside the
/// registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum WakeKey {
    /// An IPC call completed (reply, remote error, `Timeout` or `PeerGone` alike).
    Call(u64),
    /// This event happened.
    Event(WakeEvent),
}

impl WakeKey {
    pub(crate) fn event(event: WakeEvent) -> WakeKey {
        WakeKey::Event(event)
    }
}

/// How a workflow ended (or, read from a cleanup step, how it is going to end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every normal step ran, or one returned `Done`.
    Done,
    /// A step returned `Fail` with this reason (the first failure wins).
    Failed(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// An ended workflow and its outcome, handed to the caller
/// ([`Registry::drain_finished`](super::Registry::drain_finished)).
#[derive(Debug)]
pub(crate) struct Finished {
    pub name: String,
    pub outcome: Outcome,
}

/// A workflow that looks stuck, by the name of the step it is parked in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StallReport {
    pub id: WorkflowId,
    pub workflow: String,
    pub step: String,
    pub waiting_on: Wake,
    pub waiting_since: Instant,
}

impl fmt::Display for StallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "workflow {} {} is stuck in step {} waiting on {:?}",
            self.workflow, self.id, self.step, self.waiting_on
        )
    }
}

/// The engine's loop guards: a workflow that trips one fails, with this text in
/// [`Outcome::Failed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WorkflowError {
    #[error("step {step} of workflow {workflow} would insert more than {limit} steps in all")]
    TooManyInsertedSteps {
        workflow: String,
        step: String,
        limit: usize,
    },
    #[error(
        "step {step} of workflow {workflow} waited {count} times in a row on a deadline that had already passed"
    )]
    WaitLoop {
        workflow: String,
        step: String,
        count: u32,
    },
}
