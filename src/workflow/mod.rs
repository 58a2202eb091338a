//! Workflows: the step engine behind every job run in the `main` process.
//!
//! `main` runs one `mio` loop and must never block, yet a job run is a long sequence
//! (resolve targets, record the run, launch wrappers, await pickup, collect exits,
//! finalize, notify) that waits on IPC replies, timers and wrapper events. A
//! [`Workflow`] writes that sequence down as a flat list of named steps over a typed env
//! struct, so the loop can drive it one event at a time and a stuck run can be reported
//! by the name of the step it is stuck in. This module is pure logic: it does no I/O and
//! never reads the clock; the loop passes `now` and its own state (`C`) in.
//!
//! # Outline
//!
//! 1. A step is `fn(&mut E, &mut C, &mut StepCtx<E, C>) -> Step`. It returns
//!    [`Step::Next`], [`Step::Wait`] with a [`Wake`] source, [`Step::Done`] (skip the
//!    rest of the normal steps) or [`Step::Fail`].
//! 2. [`Registry::start`] runs a workflow until its first wait or its end. The loop then
//!    calls [`Registry::wake`] when an IPC reply, a timer or an event arrives and
//!    [`Registry::due_timers`] when a [`Wake::At`] deadline may have passed. A wake
//!    re-runs the step that waited; the step looks at [`StepCtx::fired`] and decides
//!    whether it is satisfied (returning `Wait` again keeps it waiting).
//! 3. Steps added with [`Workflow::always`] are cleanup steps, like a `finally`: they run
//!    in order on every path. After `Done`, `Fail` or [`Registry::interrupt`] only the
//!    remaining `always` steps run, so a failed or killed run still records its result.
//!    An interrupt never cuts a cleanup step short.
//! 4. A step can insert steps right after itself ([`StepCtx::insert_next`]) and spawn
//!    child workflows with any env type ([`StepCtx::spawn`]). [`Wake::Children`] fires
//!    once every child has ended; the parent then reads [`StepCtx::child_outcomes`].
//!    Interrupting a parent interrupts its children; a parent that ends before its
//!    children interrupts them and they are reported as top-level workflows.
//! 5. Nothing loops silently: `Next` always moves forward, inserted steps are capped per
//!    workflow, and a step that keeps waiting on a source that has already fired fails.
//!    [`Registry::stalled`] names the step of any workflow waiting on nothing, or
//!    waiting past a threshold on sources that nothing will fire.
//! 6. Shutdown: the loop stops starting runs and polls [`Registry::shutdown_complete`]
//!    until every workflow has ended or the grace period is over.
//!
//! # Example
//!
//! ```
//! use std::time::Instant;
//! use saltpeter::workflow::{Fired, Outcome, Registry, Step, StepCtx, Wake, WakeKey, Workflow};
//!
//! /// The caller's state: here it only hands out call ids and keeps a log.
//! #[derive(Default)]
//! struct Main { next_call: u64, log: Vec<String> }
//!
//! #[derive(Default)]
//! struct RunEnv { call: u64, exit_code: Option<i32> }
//!
//! type Ctx<'a> = StepCtx<'a, RunEnv, Main>;
//!
//! fn launch_wrapper(env: &mut RunEnv, main: &mut Main, _: &mut Ctx) -> Step {
//!     main.next_call += 1;
//!     env.call = main.next_call; // a real step would queue an IPC request here
//!     Step::Next
//! }
//!
//! fn await_exit(env: &mut RunEnv, _: &mut Main, s: &mut Ctx) -> Step {
//!     match s.fired() {
//!         Some(Fired::Call(id)) if *id == env.call => {
//!             env.exit_code = Some(0);
//!             Step::Next
//!         }
//!         _ => Step::Wait(Wake::Call(env.call)),
//!     }
//! }
//!
//! fn finalize(env: &mut RunEnv, main: &mut Main, s: &mut Ctx) -> Step {
//!     main.log.push(format!("{:?} exit={:?}", s.outcome(), env.exit_code));
//!     Step::Next
//! }
//!
//! let now = Instant::now();
//! let mut main = Main::default();
//! let mut registry = Registry::new();
//! let run = Workflow::new("job-run", RunEnv::default())
//!     .step("launch_wrapper", launch_wrapper)
//!     .step("await_exit", await_exit)
//!     .always("finalize", finalize);
//! let id = registry.start(run, &mut main, now);
//! assert_eq!(registry.current_step(id), Some("await_exit"));
//!
//! registry.wake(&WakeKey::Call(1), &mut main, now);
//! assert!(registry.is_idle());
//! assert_eq!(main.log, ["Done exit=Some(0)"]);
//! let finished = registry.drain_finished();
//! assert_eq!(finished[0].outcome, Outcome::Done);
//! ```

mod registry;
mod steps;
#[cfg(test)]
mod tests;
mod types;

pub use registry::Registry;
pub use steps::{StepCtx, StepFn, Workflow};
pub use types::{
    DEFAULT_MAX_INSERTED_STEPS, Finished, Fired, MAX_ALREADY_FIRED_WAITS, MAX_FINISHED_KEPT,
    Outcome, StallReport, Step, Wake, WakeEvent, WakeKey, WorkflowError, WorkflowId,
};
