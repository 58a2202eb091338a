//! The vocabulary of workflows: what a step returns, what it waits for, what woke it,
//! how a workflow ended.

use std::any::Any;
use std::fmt;
use std::time::Instant;

/// Most steps one workflow may insert over its whole life, unless
/// [`Workflow::max_inserted_steps`](super::Workflow::max_inserted_steps) says otherwise; a runaway insert fails the workflow.
pub const DEFAULT_MAX_INSERTED_STEPS: usize = 4096;

/// How many times in a row a step may return `Wait` on a source that has already fired
/// (children all ended, deadline passed) before the workflow fails instead of spinning.
pub const MAX_ALREADY_FIRED_WAITS: u32 = 64;

/// How many ended top-level workflows [`Registry::drain_finished`](super::Registry::drain_finished) keeps when nobody
/// drains them; the oldest are dropped first.
pub const MAX_FINISHED_KEPT: usize = 1024;

/// Identity of a registered workflow, unique for the life of a [`Registry`](super::Registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkflowId(pub u64);

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wf#{}", self.0)
    }
}

/// What a step tells the engine to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
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
    pub fn fail(reason: impl fmt::Display) -> Step {
        Step::Fail(reason.to_string())
    }
}

/// What a waiting step waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// The reply (or failure) of the IPC call with this id.
    Call(u64),
    /// A timer the caller created in its loop and will report by this id.
    Timer(u64),
    /// A deadline the registry watches itself (see [`Registry::due_timers`](super::Registry::due_timers)).
    At(Instant),
    /// An event the caller announces (see [`WakeEvent`]).
    Event(WakeEvent),
    /// Every child workflow of this one has ended.
    Children,
    /// Whichever of these fires first. An empty list waits on nothing, which
    /// [`Registry::stalled`](super::Registry::stalled) reports at once.
    Any(Vec<Wake>),
}

impl Wake {
    pub fn event(event: WakeEvent) -> Wake {
        Wake::Event(event)
    }
}

/// The events a caller announces to [`Registry::wake`](super::Registry::wake): a closed, typed set, so a waiting
/// step and the handler that wakes it name the same value and nothing is parsed back from
/// a string. Ids are the caller's (main: run ids); the engine only compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeEvent {
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
pub enum WakeKey {
    /// An IPC call completed (reply, remote error, `Timeout` or `PeerGone` alike).
    Call(u64),
    /// A caller-owned timer fired.
    Timer(u64),
    /// This event happened.
    Event(WakeEvent),
}

impl WakeKey {
    pub fn event(event: WakeEvent) -> WakeKey {
        WakeKey::Event(event)
    }
}

/// Why a step is running again: the source that fired. [`StepCtx::fired`](super::StepCtx::fired) is `None` on
/// a step's first run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// The IPC call with this id completed.
    Call(u64),
    /// The caller's timer with this id fired.
    Timer(u64),
    /// The deadline given in [`Wake::At`] passed.
    At(Instant),
    /// This event happened.
    Event(WakeEvent),
    /// Every child has ended.
    Children,
}

impl From<WakeKey> for Fired {
    fn from(key: WakeKey) -> Fired {
        match key {
            WakeKey::Call(id) => Fired::Call(id),
            WakeKey::Timer(id) => Fired::Timer(id),
            WakeKey::Event(event) => Fired::Event(event),
        }
    }
}

/// How a workflow ended (or, read from a cleanup step, how it is going to end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every normal step ran, or one returned `Done`.
    Done,
    /// A step returned `Fail` with this reason (the first failure wins).
    Failed(String),
    /// [`Registry::interrupt`](super::Registry::interrupt) was called with this reason during the normal steps.
    Interrupted(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::Failed(reason) => write!(f, "failed: {reason}"),
            Outcome::Interrupted(reason) => write!(f, "interrupted: {reason}"),
        }
    }
}

/// An ended workflow: its outcome and its env, handed to the parent
/// ([`StepCtx::child_outcomes`](super::StepCtx::child_outcomes)) or to the caller ([`Registry::drain_finished`](super::Registry::drain_finished)).
pub struct Finished {
    pub id: WorkflowId,
    pub name: String,
    pub outcome: Outcome,
    pub(super) env: Box<dyn Any>,
}

impl Finished {
    /// The ended workflow's env, if it is of type `T`.
    pub fn env<T: 'static>(&self) -> Option<&T> {
        self.env.downcast_ref()
    }

    /// Takes the env out, if it is of type `T`.
    pub fn into_env<T: 'static>(self) -> Option<T> {
        self.env.downcast().ok().map(|env| *env)
    }
}

impl fmt::Debug for Finished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Finished")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

/// A workflow that looks stuck, by the name of the step it is parked in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallReport {
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

/// What went wrong in the engine. The loop-guard variants end up, as text, in
/// [`Outcome::Failed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowError {
    #[error("could not interrupt workflow {0}: it is not running")]
    NotRunning(WorkflowId),
    #[error("step {step} of workflow {workflow} would insert more than {limit} steps in all")]
    TooManyInsertedSteps {
        workflow: String,
        step: String,
        limit: usize,
    },
    #[error(
        "step {step} of workflow {workflow} waited {count} times in a row on a source that had already fired"
    )]
    WaitLoop {
        workflow: String,
        step: String,
        count: u32,
    },
}
