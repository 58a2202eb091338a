//! The state of main's life cycle: start-up's loads, configuration reloads, the lease
//! among servers sharing the database (`boot`, `reload`, `ha`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use crate::ipc::CallId;
use crate::wire::admin::AdminRequest;
use crate::wire::db::LeaseReport;
use crate::wire::records::Millis;

/// One of the loads start-up waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Load {
    Maintenance,
    LastSlots,
    JobCtl,
}

/// What start-up has received so far.
#[derive(Debug, Default)]
pub(crate) struct Boot {
    pub(crate) maintenance_loaded: bool,
    pub(crate) jobctl_loaded: bool,
    pub(crate) last_slots: Option<BTreeMap<String, Millis>>,
    pub(crate) in_flight_loaded: bool,
    /// Loads that failed, to ask again once `retry_at` has come.
    pub(crate) failed: Vec<Load>,
    pub(crate) retry_at: Option<Instant>,
    pub(crate) done: bool,
    /// Admin requests waiting for start-up to finish, with the uid of the admin socket's
    /// peer that made each (their audit names it once they are handled).
    pub(crate) parked: Vec<(CallId, AdminRequest, Option<u32>)>,
}

/// Reloads in flight and asked for.
#[derive(Debug, Default)]
pub(crate) struct Reloads {
    /// The blocking call of the load in flight, and when it started.
    pub(crate) in_flight: Option<(CallId, Instant)>,
    /// Another load is due when the one in flight is done.
    pub(crate) again: bool,
    /// Admin calls answered when the load in flight is applied.
    pub(crate) waiting: Vec<CallId>,
    /// Admin calls that came during it: answered by the next one.
    pub(crate) waiting_next: Vec<CallId>,
    /// Unchanged files the load in flight reads again all the same.
    pub(crate) reread: BTreeSet<PathBuf>,
}

/// Where this daemon stands.
#[derive(Debug, Default)]
pub(crate) struct Ha {
    /// The database is shared (PostgreSQL): leading comes from the lease.
    pub shared: bool,
    /// This server's name (`server_name`, or the host name).
    pub server: String,
    /// This daemon holds the lease (always true when not shared).
    pub leader: bool,
    /// The database answered db's last try.
    pub reachable: bool,
    /// Who leads, as far as known.
    pub holder: Option<String>,
    /// This daemon has adopted the schedule and the runs (it led once).
    pub(crate) adopted: bool,
    /// Times this daemon took the lease.
    pub takeovers: u64,
    /// The newest report, for the loop to apply (it needs the registry and timers).
    pub(crate) pending: Option<LeaseReport>,
}
