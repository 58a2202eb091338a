//! Saltpeter: a distributed cron for fleets managed with SaltStack.
//!
//! Process map (see docs/architecture.md):
//! ```text
//! systemd ── saltpeter-daemon (supervisor)
//!              ├── hub       wrapper WebSockets, HTTP API, admin socket
//!              ├── main      configuration, schedules, runs, Workflows
//!              ├── db        the database (SQLite, or PostgreSQL shared by several servers)
//!              └── blocking  slow commands (salt, wrapper launches)
//! ```
//!
//! Modules:
//! - `access`: who may use the admin socket (peer credentials, admin group)
//! - `cleanup`: `saltpeter-cleanup`, repairing what a crashed daemon left behind
//! - `client_addr`: what counts as one client address (IPv6 by its /64)
//! - `config`: the configuration directory: YAML files loaded, validated, diagnosed
//! - `ctl`: `saltpeterctl`, the admin tool over the admin socket
//! - `daemon`: `saltpeter-daemon`'s arguments: supervisor, child role or helper mode
//! - `evloop`: the mio event loop (listeners, timers, signals, children with drained pipes)
//! - `ipc`: frames, codec, typed channels, calls with deadlines
//! - `log_budget`: log lines and records that all peers share, with a summary of the rest
//! - `logging`: log set-up, the role on every line
//! - `json`: the JSON shapes of `saltpeterctl --json`, the HTTP API and `/ws`, role-free
//! - `metrics`: histograms and the Prometheus text format for `/metrics`
//! - `minion_key`: wrapper identity from Salt's keys (signed challenges, accepted keys)
//! - `minion_trust`: which accepted key stands for a minion across several masters
//! - `paths`: where the configuration, state and runtime files live
//! - `roles`: the four child processes (hub, main, db, blocking)
//! - `salt_master`: the Salt master's configuration file, read in one place
//! - `schedule`: cron fields and when a job fires, as pure functions of `now`
//! - `supervisor`: start-up settings and checks, spawning, ordered stop, sd_notify
//! - `wire`: messages crossing process and network boundaries
//! - `workflow`: the step engine behind every job run in `main`
//! - `wrapper`: `saltpeter-wrapper`, which runs a job on a target and reports to the hub
#![warn(unreachable_pub)]

mod access;
pub mod cleanup;
mod client_addr;
pub mod config;
pub mod ctl;
pub mod daemon;
mod evloop;
pub mod executor;
mod ipc;
mod json;
mod log_budget;
mod logging;
mod logsafe;
mod metrics;
pub mod minion_key;
mod minion_trust;
mod notify;
mod paths;
mod roles;
mod salt_master;
mod schedule;
mod supervisor;
pub mod tls;
pub mod wire;
pub(crate) mod workflow;
pub mod wrapper;

/// Launch tokens and session keys from the server secret (the integration tests forge and
/// check them as a wrapper would).
pub use roles::main::tokens;

/// Base64 as SMTP AUTH sends it (the integration tests check what a mail server receives).
pub use notify::send::base64;
