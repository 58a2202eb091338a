//! The typed half of the engine: a [`Workflow`] (its env and its list of steps) and the
//! [`StepCtx`] a step receives. The [`Registry`](super::Registry) only sees workflows
//! through the type-erased [`Flow`] trait, so one registry holds workflows of any env
//! type.

use std::borrow::Cow;
use std::time::Instant;

use super::types::{MAX_INSERTED_STEPS, Outcome, Step, WorkflowError};

/// A step: reads and updates the env, starts work through the caller's state `C`, and
/// says what comes next.
pub(crate) type StepFn<E, C> = fn(&mut E, &mut C, &mut StepCtx<'_, E, C>) -> Step;

pub(super) struct StepDef<E, C> {
    name: Cow<'static, str>,
    run: StepFn<E, C>,
    /// A cleanup step: it runs even after `Done` or `Fail`.
    always: bool,
}

/// A flat list of named steps over an env of type `E`, run by a
/// [`Registry`](super::Registry) on behalf of the caller's state `C`.
pub(crate) struct Workflow<E, C> {
    name: Cow<'static, str>,
    env: E,
    steps: Vec<StepDef<E, C>>,
    /// Index of the step that runs (or waits) now; `steps.len()` once all have run.
    cursor: usize,
    /// Set once the normal steps are over (`Done`, `Fail`): from then on
    /// only `always` steps run.
    cleanup: bool,
    inserted: usize,
}

impl<E, C> Workflow<E, C> {
    pub(crate) fn new(name: impl Into<Cow<'static, str>>, env: E) -> Self {
        Workflow {
            name: name.into(),
            env,
            steps: Vec::new(),
            cursor: 0,
            cleanup: false,
            inserted: 0,
        }
    }

    /// Appends a normal step.
    pub(crate) fn step(mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) -> Self {
        self.steps.push(StepDef {
            name: name.into(),
            run,
            always: false,
        });
        self
    }

    /// Appends a cleanup step, which runs on every path (see the module outline).
    pub(crate) fn always(mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) -> Self {
        self.steps.push(StepDef {
            name: name.into(),
            run,
            always: true,
        });
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
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
    pub now: Instant,
    pub outcome: &'a Outcome,
}

/// A workflow as the registry drives it, whatever its env type.
pub(super) trait Flow<C> {
    fn name(&self) -> &str;
    /// The step at the cursor; `None` once every step has run.
    fn current_step(&self) -> Option<&str>;
    /// Runs the step at the cursor once.
    fn run_current(&mut self, ctx: &mut C, shared: Shared<'_>) -> Step;
    /// The current step is over; `leave_normal` ends the normal steps (`Done`, `Fail`).
    fn advance(&mut self, leave_normal: bool);
}

impl<E, C> Flow<C> for Workflow<E, C> {
    fn name(&self) -> &str {
        &self.name
    }

    fn current_step(&self) -> Option<&str> {
        self.steps.get(self.cursor).map(|step| &*step.name)
    }

    fn run_current(&mut self, ctx: &mut C, shared: Shared<'_>) -> Step {
        let Some(def) = self.steps.get(self.cursor) else {
            debug_assert!(false, "the registry runs a step only while one is left");
            return Step::Done;
        };
        let run = def.run;
        let mut step_ctx = StepCtx {
            shared,
            step: &def.name,
            always: def.always,
            inserts: Vec::new(),
        };
        let mut step = run(&mut self.env, ctx, &mut step_ctx);
        let inserts = step_ctx.inserts;
        if !inserts.is_empty() {
            if self.inserted.saturating_add(inserts.len()) > MAX_INSERTED_STEPS {
                step = Step::fail(WorkflowError::TooManyInsertedSteps {
                    workflow: self.name.to_string(),
                    step: def.name.to_string(),
                    limit: MAX_INSERTED_STEPS,
                });
            } else {
                self.inserted += inserts.len();
                let at = self.cursor + 1;
                self.steps.splice(at..at, inserts);
            }
        }
        step
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
}

/// What a step can see and ask for besides its env and the caller's state.
pub(crate) struct StepCtx<'a, E, C> {
    shared: Shared<'a>,
    step: &'a str,
    always: bool,
    inserts: Vec<StepDef<E, C>>,
}

impl<E, C> StepCtx<'_, E, C> {
    pub(crate) fn step(&self) -> &str {
        self.step
    }

    /// The `now` the caller passed to the registry for this round.
    pub(crate) fn now(&self) -> Instant {
        self.shared.now
    }

    /// How the workflow will end if nothing else happens: `Done` during the normal
    /// steps, the failure in cleanup steps after one.
    pub(crate) fn outcome(&self) -> &Outcome {
        self.shared.outcome
    }

    /// Inserts a step to run right after this one (after the steps this run inserted
    /// before it). Inserted steps inherit this step's `always` flag, so cleanup steps
    /// can extend the cleanup. They are added whatever this step returns, so a step
    /// that runs several times should insert only on the run that returns `Next`.
    pub(crate) fn insert_next(&mut self, name: impl Into<Cow<'static, str>>, run: StepFn<E, C>) {
        self.inserts.push(StepDef {
            name: name.into(),
            run,
            always: self.always,
        });
    }

    /// Inserts several steps, in this order, right after this one.
    pub(crate) fn insert_steps<N: Into<Cow<'static, str>>>(
        &mut self,
        steps: impl IntoIterator<Item = (N, StepFn<E, C>)>,
    ) {
        for (name, run) in steps {
            self.insert_next(name, run);
        }
    }
}
