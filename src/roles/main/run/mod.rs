//! The run part: a run in flight as main keeps it (`active`: `ActiveRun` and its private
//! phase), what was asked (`request`), the runs in flight on this server (`flight`), one
//! target's life (`target/`, the pure core: private fields, transitions that return
//! effects), the run-level rules (`rules`: batches, the overlap rule, pre-staging,
//! pick-up deadlines) and the throttling queues' policy (`queue`: round-robin between
//! jobs, a bounded queue per job). Nothing here takes `Main`, a socket or a clock: the run Workflow
//! that drives them is the run's shell (`shell/run/`).

pub(crate) mod active;
pub(crate) mod flight;
pub(crate) mod queue;
pub(crate) mod request;
pub(crate) mod rules;
#[cfg(test)]
mod rules_tests;
pub(crate) mod target;

pub(crate) use flight::Flight;
