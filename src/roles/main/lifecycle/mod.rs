//! The server's life: what start-up loads before anything fires ([`Boot`], `boot.rs`),
//! configuration reloads ([`Reloads`], `reload.rs`, with the watch of the configuration
//! directory, `watch.rs`, and the heap handed back after a load, `heap.rs`), and leader or
//! standby among servers sharing a PostgreSQL database ([`Ha`], `ha.rs`).
//!
//! Each part keeps its state private and returns what should happen (`messages::Out`): db
//! calls whose replies come back as messages (`StartupLoaded`, `ConfigRead`), and messages
//! to the loop (`Adopt`, `StartupDone`, `ScheduleChanged`, `LeaseLost`). What those do to
//! the rest of main (start recovery, arm the schedule, put a configuration in effect, catch
//! up missed slots) is the loop's glue, `shell/dispatch/lifecycle.rs`: it needs parts this
//! folder sits below.

pub(crate) mod boot;
pub(crate) mod ha;
pub(crate) mod heap;
pub(crate) mod reload;
pub(crate) mod watch;

pub(crate) use boot::Boot;
pub(crate) use ha::Ha;
pub(crate) use reload::Reloads;
