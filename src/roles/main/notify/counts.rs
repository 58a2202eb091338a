//! The outbox's numbers for `/metrics`: what waits in it, and the attempts by result.

use std::collections::BTreeMap;

use crate::wire::records::Millis;

/// The `result` of a delivery attempt: `delivered`, `failed` (tried again later) or
/// `given_up` (its last attempt).
pub(crate) const DELIVERY_RESULTS: &[&str] = &["delivered", "failed", "given_up"];

/// The notification outbox (db's `deliveries` in state `pending`, leased or not), as of
/// db's last count (each take of due messages), less what was settled since; and the
/// attempts since start by result.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Outbox {
    pending: u64,
    /// When the oldest pending message was queued (unix milliseconds).
    oldest: Option<Millis>,
    attempts: BTreeMap<&'static str, u64>,
}

impl Outbox {
    /// Messages pending.
    pub(crate) fn pending(&self) -> u64 {
        self.pending
    }

    /// When the oldest pending message was queued.
    pub(crate) fn oldest(&self) -> Option<Millis> {
        self.oldest
    }

    /// Attempts since start with `result` (one of [`DELIVERY_RESULTS`]).
    pub(crate) fn attempts(&self, result: &str) -> u64 {
        self.attempts.get(result).copied().unwrap_or(0)
    }

    /// db counted the outbox: `pending` messages, the oldest queued at `oldest`.
    pub(crate) fn counted(&mut self, pending: u64, oldest: Option<Millis>) {
        self.pending = pending;
        self.oldest = oldest;
    }

    /// A delivery attempt came back: `ok`, or failed and `retried` later or not. A
    /// message delivered or given up leaves the outbox (until db counts it again).
    pub(crate) fn attempted(&mut self, ok: bool, retried: bool) {
        let result = match (ok, retried) {
            (true, _) => "delivered",
            (false, true) => "failed",
            (false, false) => "given_up",
        };
        *self.attempts.entry(result).or_insert(0) += 1;
        if result != "failed" {
            self.pending = self.pending.saturating_sub(1);
            if self.pending == 0 {
                self.oldest = None;
            }
        }
    }
}
