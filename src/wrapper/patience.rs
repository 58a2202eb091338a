//! How long the wrapper waits for a server that knows its run, once it has none.
//!
//! A server "knows the run" while the wrapper is welcomed on an open link. When it has
//! none (the link is down, connecting, answered `retry_later`, or the server said it
//! does not know the run), two limits apply:
//!
//! 1. A wrapper that has not started its command (waiting for its welcome, pre-staged
//!    and waiting for `go`, in its splay, or ended without running: canceled, lock busy)
//!    gives up once its slot plus the stage grace (at most two minutes) has passed and
//!    the grace has also passed since a server last knew the run. It exits without
//!    running anything: its daemon was stopped for good, crashed and stayed down, or came
//!    back with another state directory — nothing would ever send `go`, and the wrapper
//!    would hold its target's slot and overlap lock. Counting from the last contact too
//!    means a daemon restarted on the same state within the grace finds it waiting.
//!    The slot comes from the welcome (`slot_in_ms`, relative, so the clocks of server and
//!    host need not agree). Before its first welcome the wrapper does not know its slot
//!    and counts from its own start (it is launched at its slot, or a lead before it); a
//!    pre-staging server that does not say (an older build) is assumed to stage at most
//!    [`FALLBACK_LEAD`] ahead, the default `prestage_cap`.
//! 2. A wrapper whose command has started keeps it running, spools its output and keeps
//!    reconnecting; it gives up (killing the command) only after `give_up` (a day by
//!    default) without a server that knows the run.
//!
//! Pure: every method takes `now`, so the rules are tested without a process.

use std::time::{Duration, Instant};

/// Default and largest stage grace.
pub(crate) const MAX_STAGE_GRACE: Duration = Duration::from_secs(120);
/// How far ahead of its slot a pre-staging server that does not send `slot_in_ms` is
/// assumed to have launched the wrapper (the default `prestage_cap`).
pub(super) const FALLBACK_LEAD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub(super) struct Patience {
    grace: Duration,
    /// The run's slot as far as the wrapper knows it (its own start until welcomed).
    slot: Instant,
    /// When a server that knows the run was last heard (start, until the first welcome).
    known_at: Instant,
    /// Why no server knows the run right now, for the log line when giving up.
    trouble: String,
}

impl Patience {
    pub(super) fn new(now: Instant, grace: Duration) -> Patience {
        Patience {
            grace: grace.min(MAX_STAGE_GRACE),
            slot: now,
            known_at: now,
            trouble: "no server has answered yet".into(),
        }
    }

    /// A welcome: the server knows the run; a pre-staged one says when the slot is.
    pub(super) fn welcomed(&mut self, now: Instant, wait_for_go: bool, slot_in: Option<Duration>) {
        self.known_at = now;
        if wait_for_go {
            self.slot = now + slot_in.unwrap_or(FALLBACK_LEAD);
        }
    }

    /// The link to a server that knew the run is gone; it was last heard at `last_heard`.
    pub(super) fn lost(&mut self, last_heard: Instant, why: &str) {
        self.known_at = self.known_at.max(last_heard);
        self.trouble = why.to_string();
    }

    /// No server knows the run, for this reason (connect failure, rejection...).
    pub(super) fn trouble(&mut self, why: &str) {
        self.trouble = why.to_string();
    }

    pub(super) fn why(&self) -> &str {
        &self.trouble
    }

    /// When a server that knows the run was last heard, as of `served` (the link's last
    /// receive time while welcomed on it).
    pub(super) fn last_known(&self, served: Option<Instant>) -> Instant {
        served.map_or(self.known_at, |t| t.max(self.known_at))
    }

    /// When a wrapper that has not started its command gives up with no server.
    pub(super) fn start_deadline(&self) -> Instant {
        self.slot.max(self.known_at) + self.grace
    }

    /// Whether a wrapper that has not started its command should give up now.
    pub(super) fn start_abandoned(&self, now: Instant, served: bool) -> bool {
        !served && now >= self.start_deadline()
    }

    /// How long no server has known the run, as of `now`.
    pub(super) fn unknown_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.known_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn never_welcomed_gives_up_a_grace_after_its_start() {
        let t0 = Instant::now();
        let p = Patience::new(t0, 10 * S);
        assert!(!p.start_abandoned(t0 + 9 * S, false));
        assert!(p.start_abandoned(t0 + 10 * S, false));
        assert!(
            !p.start_abandoned(t0 + 100 * S, true),
            "served: keep waiting"
        );
    }

    #[test]
    fn staged_waits_for_its_slot_plus_grace_and_a_grace_after_the_loss() {
        let t0 = Instant::now();
        let mut p = Patience::new(t0, 10 * S);
        p.welcomed(t0, true, Some(30 * S));
        // Lost early: the slot decides.
        p.lost(t0 + S, "connection refused");
        assert_eq!(p.start_deadline(), t0 + 40 * S);
        assert!(!p.start_abandoned(t0 + 39 * S, false));
        assert!(p.start_abandoned(t0 + 40 * S, false));
        assert_eq!(p.why(), "connection refused");
        // Lost late (the server stayed long after the slot): a grace from the loss.
        p.lost(t0 + 100 * S, "the hub went silent");
        assert_eq!(p.start_deadline(), t0 + 110 * S);
    }

    #[test]
    fn a_rewelcome_moves_the_slot_and_an_older_server_gets_the_fallback_lead() {
        let t0 = Instant::now();
        let mut p = Patience::new(t0, 10 * S);
        p.welcomed(t0, true, None);
        assert_eq!(p.start_deadline(), t0 + FALLBACK_LEAD + 10 * S);
        p.welcomed(t0 + 5 * S, true, Some(Duration::ZERO));
        assert_eq!(p.start_deadline(), t0 + 15 * S);
    }

    #[test]
    fn the_grace_is_capped_at_two_minutes() {
        let t0 = Instant::now();
        let p = Patience::new(t0, 3600 * S);
        assert_eq!(p.start_deadline(), t0 + MAX_STAGE_GRACE);
    }

    #[test]
    fn last_known_follows_the_link_while_served() {
        let t0 = Instant::now();
        let mut p = Patience::new(t0, 10 * S);
        p.welcomed(t0 + S, false, None);
        assert_eq!(p.last_known(Some(t0 + 7 * S)), t0 + 7 * S);
        p.lost(t0 + 7 * S, "reset");
        assert_eq!(p.last_known(None), t0 + 7 * S);
        assert_eq!(p.unknown_for(t0 + 9 * S), 2 * S);
    }
}
