//! Notifications decided, queued and in flight (`notify`).

use std::collections::HashMap;

use crate::ipc::CallId;
use crate::notify::RateLimiter;
use crate::wire::records::{Millis, RunState};

/// A message being sent.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    pub(crate) id: u64,
    pub(crate) attempts: u32,
    pub(crate) job: Option<String>,
    pub(crate) run: Option<u64>,
    pub(crate) event: String,
    pub(crate) destination: String,
}

#[derive(Debug, Default)]
pub(crate) struct Notifier {
    pub(crate) limiter: RateLimiter,
    /// Each job's last final state (skips not counted), for `recovery`.
    pub(crate) last: HashMap<String, RunState>,
    pub(crate) in_flight: HashMap<CallId, InFlight>,
    /// A take is on its way to db.
    pub(crate) taking: bool,
    /// When the outbox may next have something due; `None`: nothing pending.
    pub(crate) due_at: Option<Millis>,
}
