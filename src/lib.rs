//! Saltpeter: a distributed cron for fleets managed with SaltStack.

pub mod evloop;
pub mod ipc;
pub mod wire;
