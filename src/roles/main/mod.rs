//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Outline:
//! 1. Start-up: load the configuration and the server secret, connect the links, plan the
//!    schedule, say `Ready`.
//! 2. The schedule timer fires at the earliest slot; each due slot becomes a run Workflow
//!    (`shell/run/`), or a recorded skip (overlap, missed).
//! 3. Wrapper sessions (`sessions/`, driven by `shell/wrappers/`) arrive from the hub;
//!    main vets hellos, keeps the liveness clock, forwards output to db and acks only what
//!    db committed.
//! 4. Requests (`shell/requests/`, one file per topic) from the admin socket, the HTTP API
//!    and `/ws` read and change the same parts.
//!
//! Each part (`fleet/`, `maintenance/`, `jobctl/`, `notify/`, `masters/`, `lifecycle/`,
//! `views/`, `sessions/`, `rounds/`, `orphans/`, `health/`, `run/`, `rules/`) keeps its
//! state private and returns what should happen (`messages::Out`); the shell (`shell/`)
//! holds `Main`, the struct of the parts, performs it and hands the parts' messages
//! (`messages::Message`) on in one match (`shell/dispatch.rs`). Everything that changes a
//! run emits a wake key; after each event the loop hands the keys to the Workflow registry,
//! which resumes the steps waiting on them. No part names the shell, nor this file
//! (docs/architecture.md, "Inside main").

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
