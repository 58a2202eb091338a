//! Message types shared across process and network boundaries.
//!
//! - `records`: run and target states and records (CLI, API, database)
//! - `link`: roles, hello and the messages of the internal links
//! - `admin`: `saltpeterctl` requests and responses
//! - `wrapper`: the wrapper <-> hub WebSocket protocol v1

pub mod admin;
pub mod link;
pub mod records;
pub mod wrapper;
