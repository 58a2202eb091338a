//! The run Workflow (docs/architecture.md, "A run's states") and the firing of slots.
//!
//! Steps (`flow.rs`): `resolve_targets` (the live targets) -> `plan_batches` (maintenance
//! hosts out, `number_of_targets`, batches) -> `record_run` (unique per job and slot: a
//! slot never runs twice) -> `await_capacity` -> `deploy_wrappers` -> per batch
//! `launch_batch` -> `await_launch` -> `await_slot` (pre-staged runs) -> `collect_batch`
//! (pickup deadline; exits, losses and kills arrive as run events) -> `next_batch` ->
//! `collect_all` -> always `finalize` (final state recorded, then `Message::RunEnded`). A
//! recovered run starts at `await_capacity`. Target outcomes are written by
//! `finish_target`, the one place a target becomes `finished`.
//!
//! A run is planned, then recorded with its id: the Workflow's env (`env.rs`) holds a
//! `RunPlan` until `record_run`, a `RecordedRun` from then on, so only a recorded run has
//! an id. What main keeps of a run in flight is the run part (`run/`: `ActiveRun`,
//! `Flight`, `RunRequest`, the target core), which names none of these steps.

pub(crate) mod batches;
mod capacity;
pub(crate) mod effects;
mod env;
mod failed;
mod fire;
mod flow;
pub(crate) mod orphans;
mod pickup;
pub(crate) mod plugins;
pub(crate) mod prestage;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod retry;
pub(crate) mod suspend;
pub(crate) mod targets;
pub(crate) mod unreachable;

pub(super) use fire::fire_as;
pub(super) use flow::{recovered_workflow, workflow};
