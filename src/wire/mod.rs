//! Message types shared across process and network boundaries.
//!
//! - `records`: run and target states and records (CLI, API, database)
//! - `wrapper`: the wrapper <-> hub WebSocket protocol v1

pub mod records;
pub mod wrapper;
