//! Workflows: the step engine behind every job run in the `main` process.
//!
//! `main` runs one `mio` loop and must never block, yet a job run is a long sequence
//! (resolve targets, record the run, launch wrappers, await pickup, collect exits,
//! finalize, notify) that waits on IPC replies, deadlines and wrapper events. A
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
//!    calls [`Registry::wake`] when an IPC reply or an event ([`WakeKey`]) arrives and
//!    [`Registry::due_timers`] when a [`Wake::At`] deadline may have passed
//!    ([`Registry::next_deadline`] is the earliest). A wake re-runs the step that waited;
//!    the step looks at its env and the caller's state (the reply it waited for, the run
//!    it watches) and decides whether it is satisfied: returning `Wait` again keeps it
//!    waiting.
//! 3. Steps added with [`Workflow::always`] are cleanup steps, like a `finally`: they run
//!    in order on every path. After `Done` or `Fail` only the remaining `always` steps
//!    run, so a failed run still records its result; [`StepCtx::outcome`] tells a
//!    cleanup step how the workflow is going to end.
//! 4. A step can insert steps right after itself ([`StepCtx::insert_next`],
//!    [`StepCtx::insert_steps`]), e.g. one launch and one collect step per batch.
//! 5. Nothing loops silently: `Next` always moves forward, inserted steps are capped per
//!    workflow, and a step that keeps waiting on a deadline that has already passed
//!    fails. [`Registry::stalled`] names the step of any workflow waiting on nothing, or
//!    waiting past a threshold on sources that nothing will fire.
//! 6. Ended workflows are taken with [`Registry::drain_finished`]. Shutdown: the loop
//!    stops starting runs and polls [`Registry::shutdown_complete`] until every workflow
//!    has ended or the grace period is over.
//!
//! The engine's tests (`tests.rs`) show a small run written this way.

mod registry;
mod steps;
#[cfg(test)]
mod tests;
mod types;

pub(crate) use registry::Registry;
pub(crate) use steps::{StepCtx, Workflow};
pub(crate) use types::{Outcome, Step, Wake, WakeEvent, WakeKey};
