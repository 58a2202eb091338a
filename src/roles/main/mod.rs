//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Outline:
//! 1. Start-up: load the configuration and the server secret, connect the links, plan the
//!    schedule, say `Ready`.
//! 2. The schedule timer fires at the earliest slot; each due slot becomes a run Workflow
//!    (`run`), or a recorded skip (overlap, missed).
//! 3. Wrapper sessions (`sessions`) arrive from the hub; main vets hellos, keeps the
//!    liveness clock, forwards output to db and acks only what db committed.
//! 4. Requests (`requests/`, one file per topic) from the admin socket, the HTTP API and
//!    `/ws` read and change the same state.
//!
//! Everything that changes a run emits a wake key; after each event the loop hands the
//! keys to the Workflow registry, which resumes the steps waiting on them. The registry
//! lives beside the state (`MainRole`), so steps get `&mut Main` without shared cells.
//!
//! The state is in `state/`, below every part; each part makes its own db calls with its
//! own continuation (`DbWait`), and no part names this file.

mod fleet;
mod health;
mod jobctl;
mod lifecycle;
mod maintenance;
mod masters;
mod messages;
mod notify;
mod orphans;
mod rounds;
mod rules;
mod run;
mod sessions;
mod shell;
mod views;

pub use rules::tokens;

pub(crate) use shell::main_loop::run;
