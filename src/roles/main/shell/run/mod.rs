//! The run Workflow (docs/architecture.md, Event loop and Workflows) and the firing of slots.
//!
//! Steps: `resolve_targets` (maintenance hosts out, `number_of_targets`, batches) ->
//! `record_run` (unique per job and slot: a slot never runs twice) -> per batch
//! `launch_batch` -> `await_launch` -> `collect_batch` (pickup deadline; exits, losses
//! and kills arrive as run events) -> `next_batch` -> always `finalize` (final state
//! recorded, waiters answered). Target outcomes are written by `finish_target`, the one
//! place a target becomes `finished`.
//!
//! A run is planned, then recorded with its id: the Workflow's env (`env.rs`) holds a
//! `RunPlan` until `record_run`, a `RecordedRun` from then on, so only a recorded run has
//! an id. What main keeps of a run in flight is in `state/` (`ActiveRun`, `RunRequest`),
//! below every step; `flow` is the Workflow's shape.

pub(crate) mod batches;
mod capacity;
pub(crate) mod effects;
mod env;
mod failed;
mod fire;
mod flow;
pub(crate) mod orphans;
mod pickup;
pub(crate) mod prestage;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod retry;
pub(crate) mod suspend;
pub(crate) mod targets;
pub(crate) mod unreachable;

pub(super) use fire::fire_as;
pub(super) use flow::{recovered_workflow, workflow};
