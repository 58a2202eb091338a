//! The typed half of the engine: a [`Workflow`] (its env and its list of steps) and the
//! [`StepCtx`] a step receives. The [`Registry`](super::Registry) only sees workflows
//! through the type-erased [`Flow`] trait, so one registry holds workflows of any env
//! type and children need not share their parent's env.

use std::any::Any;
use std::borrow::Cow;
use std::time::Instant;

use super::types::{
    DEFAULT_MAX_INSERTED_STEPS, Finished, Fired, Outcome, Step, WorkflowError, WorkflowId,
};

/// A step: reads and updates the env, starts work through the caller's state `C`, and
/// says what comes next.
pub type StepFn<E, C> = fn(&mut E, &mut C, &mut StepCtx<'_, E, C>) -> Step;

pub(super) struct StepDef<E, C> {
    name: Cow<'static, str>,
    run: StepFn<E, C>,
    /// A cleanup step: it runs even after `Done`, `Fail` or an interrupt.
    always: bool,
}

/// A flat list of named steps over an env of type `E`, run by a
/// [`Registry`](super::Registry) on behalf of the caller's state `C`.
pub struct Workflow<E, C> {
    name: Cow<'static, str>,
    env: E,
    steps: Vec<StepDef<E, C>>,
    /// Index of the step that runs (or waits) now; `steps.len()` once all have run.
    cursor: usize,
    /// Set once the normal steps are over (`Done`, `Fail`, interrupt): from then on
    /// only `always` steps run.
    cleanup: bool,
    inserted: usize,
    max_inserted: usize,
}

impl<E, C> Workflow<E, C> {
    pub fn new(name: impl Into<Cow<'static, str>>, env: E) -> Self {
        Workflow {
            name: name.into(),
            env,
            steps: Vec::new(),
            cursor: 0,
            cleanup: false,
            inserted: 0,
            max_inserted: DEFAULT_MAX_INSERTED_STEPS,
        }
    }

    /// Appends a normal step.
    pub fn step(mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) -> Self {
        self.steps.push(StepDef {
            name: name.into(),
            run,
            always: false,
        });
        self
    }

    /// Appends a cleanup step, which runs on every path (see the module outline).
    pub fn always(mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) -> Self {
        self.steps.push(StepDef {
            name: name.into(),
            run,
            always: true,
        });
        self
    }

    /// Caps the steps this workflow may insert over its life.
    pub fn max_inserted_steps(mut self, limit: usize) -> Self {
        self.max_inserted = limit;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn env(&self) -> &E {
        &self.env
    }

    /// Moves the cursor forward to the next step that may run in the current phase.
    fn skip_to_runnable(&mut self) {
        if self.cleanup {
            while self.steps.get(self.cursor).is_some_and(|step| !step.always) {
                self.cursor += 1;
            }
        }
    }
}

/// What the registry lends a step for one run.
pub(super) struct Shared<'a> {
    pub id: WorkflowId,
    pub now: Instant,
    pub fired: Option<Fired>,
    pub outcome: &'a Outcome,
    pub children_running: usize,
    pub child_outcomes: &'a mut Vec<Finished>,
    pub next_id: &'a mut u64,
}

/// What one run of a step hands back to the registry.
pub(super) struct Ran<C> {
    pub step: Step,
    pub spawned: Vec<(WorkflowId, Box<dyn Flow<C>>)>,
    pub interrupt_children: Option<String>,
}

/// A workflow as the registry drives it, whatever its env type.
pub(super) trait Flow<C> {
    fn name(&self) -> &str;
    /// The step at the cursor; `None` once every step has run.
    fn current_step(&self) -> Option<&str>;
    fn in_cleanup(&self) -> bool;
    /// Runs the step at the cursor once.
    fn run_current(&mut self, ctx: &mut C, shared: Shared<'_>) -> Ran<C>;
    /// The current step is over; `leave_normal` ends the normal steps (`Done`, `Fail`).
    fn advance(&mut self, leave_normal: bool);
    /// Ends the normal steps from outside. Returns whether the current step was skipped
    /// (it was a normal step); a cleanup step in progress is left to finish.
    fn interrupt(&mut self) -> bool;
    fn into_env(self: Box<Self>) -> Box<dyn Any>;
}

impl<E: 'static, C> Flow<C> for Workflow<E, C> {
    fn name(&self) -> &str {
        &self.name
    }

    fn current_step(&self) -> Option<&str> {
        self.steps.get(self.cursor).map(|step| &*step.name)
    }

    fn in_cleanup(&self) -> bool {
        self.cleanup
    }

    fn run_current(&mut self, ctx: &mut C, shared: Shared<'_>) -> Ran<C> {
        let Some(def) = self.steps.get(self.cursor) else {
            debug_assert!(false, "the registry runs a step only while one is left");
            return Ran {
                step: Step::Done,
                spawned: Vec::new(),
                interrupt_children: None,
            };
        };
        let run = def.run;
        let mut step_ctx = StepCtx {
            shared,
            workflow: &self.name,
            step: &def.name,
            always: def.always,
            inserts: Vec::new(),
            spawned: Vec::new(),
            interrupt_children: None,
        };
        let mut step = run(&mut self.env, ctx, &mut step_ctx);
        let StepCtx {
            inserts,
            spawned,
            interrupt_children,
            ..
        } = step_ctx;
        if !inserts.is_empty() {
            if self.inserted.saturating_add(inserts.len()) > self.max_inserted {
                step = Step::fail(WorkflowError::TooManyInsertedSteps {
                    workflow: self.name.to_string(),
                    step: def.name.to_string(),
                    limit: self.max_inserted,
                });
            } else {
                self.inserted += inserts.len();
                let at = self.cursor + 1;
                self.steps.splice(at..at, inserts);
            }
        }
        Ran {
            step,
            spawned,
            interrupt_children,
        }
    }

    fn advance(&mut self, leave_normal: bool) {
        debug_assert!(
            self.cursor < self.steps.len(),
            "only a step that ran can be left"
        );
        self.cleanup |= leave_normal;
        self.cursor += 1;
        self.skip_to_runnable();
    }

    fn interrupt(&mut self) -> bool {
        let was_cleanup = std::mem::replace(&mut self.cleanup, true);
        let current_is_normal = self.steps.get(self.cursor).is_some_and(|step| !step.always);
        if was_cleanup || !current_is_normal {
            return false;
        }
        self.skip_to_runnable();
        true
    }

    fn into_env(self: Box<Self>) -> Box<dyn Any> {
        Box::new(self.env)
    }
}

/// What a step can see and ask for besides its env and the caller's state.
pub struct StepCtx<'a, E, C> {
    shared: Shared<'a>,
    workflow: &'a str,
    step: &'a str,
    always: bool,
    inserts: Vec<StepDef<E, C>>,
    spawned: Vec<(WorkflowId, Box<dyn Flow<C>>)>,
    interrupt_children: Option<String>,
}

impl<E, C> StepCtx<'_, E, C> {
    pub fn id(&self) -> WorkflowId {
        self.shared.id
    }

    pub fn workflow(&self) -> &str {
        self.workflow
    }

    pub fn step(&self) -> &str {
        self.step
    }

    /// The `now` the caller passed to the registry for this round.
    pub fn now(&self) -> Instant {
        self.shared.now
    }

    /// The source that made this step run again; `None` on its first run.
    pub fn fired(&self) -> Option<&Fired> {
        self.shared.fired.as_ref()
    }

    pub fn first_run(&self) -> bool {
        self.shared.fired.is_none()
    }

    /// How the workflow will end if nothing else happens: `Done` during the normal
    /// steps, the failure or the interrupt reason in cleanup steps after one.
    pub fn outcome(&self) -> &Outcome {
        self.shared.outcome
    }

    /// Inserts a step to run right after this one (after the steps this run inserted
    /// before it). Inserted steps inherit this step's `always` flag, so cleanup steps
    /// can extend the cleanup. They are added whatever this step returns, so a step
    /// that runs several times should insert only on the run that returns `Next`.
    pub fn insert_next(&mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) {
        self.inserts.push(StepDef {
            name: name.into(),
            run,
            always: self.always,
        });
    }

    /// Inserts several steps, in this order, right after this one.
    pub fn insert_steps<N: Into<Cow<'static, str>>>(
        &mut self,
        steps: impl IntoIterator<Item = (N, StepFn<E, C>)>,
    ) {
        for (name, run) in steps {
            self.insert_next(name, run);
        }
    }

    /// Starts a child workflow once this step returns. Wait on [`Wake::Children`] to
    /// join; outcomes then appear in [`StepCtx::child_outcomes`].
    ///
    /// [`Wake::Children`]: super::Wake::Children
    pub fn spawn<E2: 'static>(&mut self, child: Workflow<E2, C>) -> WorkflowId
    where
        C: 'static,
    {
        *self.shared.next_id += 1;
        let id = WorkflowId(*self.shared.next_id);
        self.spawned.push((id, Box::new(child)));
        id
    }

    /// Children not ended yet, counting those spawned by this run.
    pub fn children_running(&self) -> usize {
        self.shared.children_running + self.spawned.len()
    }

    /// Children that have ended and not been taken yet, in the order they ended.
    pub fn child_outcomes(&self) -> &[Finished] {
        self.shared.child_outcomes
    }

    /// Takes the ended children's outcomes, e.g. to join one batch before the next.
    pub fn take_child_outcomes(&mut self) -> Vec<Finished> {
        std::mem::take(self.shared.child_outcomes)
    }

    /// Interrupts every running child (not those spawned by this very run) once this
    /// step returns.
    pub fn interrupt_children(&mut self, reason: impl Into<String>) {
        self.interrupt_children = Some(reason.into());
    }
}
