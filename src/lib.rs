//! Saltpeter: a distributed cron for fleets managed with SaltStack.
//!
//! Process map (see docs/architecture.md):
//! ```text
//! systemd ── saltpeter-daemon (supervisor)
//!              ├── hub       wrapper WebSockets, HTTP API, admin socket
//!              ├── main      configuration, schedules, runs, Workflows
//!              ├── db        SQLite
//!              └── blocking  slow commands (salt, wrapper launches)
//! ```
//!
//! Modules:
//! - `evloop`: the mio event loop (listeners, timers, signals, children with drained pipes)
//! - `ipc`: frames, codec, typed channels, calls with deadlines
//! - `wire`: messages crossing process and network boundaries
//! - `supervisor`: start-up checks, spawning, ordered stop, sd_notify
//! - `roles`: the four child processes
//! - `logging`, `paths`: shared plumbing
//! - `access`: who may use the admin socket
//! - `json`: the JSON shapes of `saltpeterctl --json`, the HTTP API and `/ws`
//! - `metrics`: histograms and the Prometheus text format for `/metrics`

pub mod access;
pub mod cleanup;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod evloop;
pub mod ipc;
pub mod json;
pub mod logging;
pub mod metrics;
pub mod paths;
pub mod roles;
pub mod schedule;
pub mod startup;
pub mod supervisor;
pub mod wire;
pub mod workflow;
pub mod wrapper;
