//! Output the server could not store: back-pressure on an open link.
//!
//! A server whose database refuses output (a full disk, a failing write) answers
//! `output_held {from_seq, retry_after_ms}` instead of dropping the link (docs/
//! protocols.md). The session keeps every frame from `from_seq` on (`outbuf`: memory,
//! then the spool file, bounded by both caps) and the hold paces their resending:
//!
//! 1. Until `retry_after` has passed no output frame goes (control messages and
//!    heartbeats do: the link and the target stay alive).
//! 2. Then one frame, the first the server lacks, as a probe: the server either stores
//!    it (its `ack` ends the hold, and everything else follows at once) or refuses it
//!    again (a new `output_held`, a new wait). A disk that stays full costs one refused
//!    frame per wait, not the whole backlog.
//! 3. A probe answered by neither within [`PROBE_WAIT`] lifts the hold: the wrapper
//!    sends as usual, and the server says again if it must.
//!
//! One episode (the first `output_held` until the `ack` that ends it) logs two lines,
//! whatever number of frames was refused meanwhile.
//!
//! Pure: every method takes `now`.

use std::time::{Duration, Instant};

/// Longest wait a server may ask for: a hostile or confused one cannot park output.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long a probe may go unanswered before the hold is lifted.
pub(super) const PROBE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(super) struct OutputHold {
    /// When the episode began (the first `output_held` since output was last stored).
    since: Instant,
    /// No frame before this.
    until: Instant,
    /// When the probe went, once it has.
    probe_sent: Option<Instant>,
}

impl OutputHold {
    pub(super) fn new(now: Instant, retry_after: Duration) -> OutputHold {
        OutputHold {
            since: now,
            until: now + retry_after.min(MAX_RETRY_AFTER),
            probe_sent: None,
        }
    }

    /// Another `output_held` in the same episode (the probe, or frames sent before the
    /// first one, were refused too): wait again, then probe again.
    pub(super) fn renew(&mut self, now: Instant, retry_after: Duration) {
        self.until = now + retry_after.min(MAX_RETRY_AFTER);
        self.probe_sent = None;
    }

    /// Whether an output frame may go now.
    pub(super) fn may_send(&self, now: Instant) -> bool {
        match self.probe_sent {
            None => now >= self.until,
            Some(at) => now >= at + PROBE_WAIT,
        }
    }

    /// An output frame went (the probe, the first time after the wait).
    pub(super) fn sent(&mut self, now: Instant) {
        if self.probe_sent.is_none() {
            self.probe_sent = Some(now);
        }
    }

    /// The probe went unanswered for [`PROBE_WAIT`]: the hold is over.
    pub(super) fn lifted(&self, now: Instant) -> bool {
        self.probe_sent.is_some_and(|at| now >= at + PROBE_WAIT)
    }

    /// When the loop must wake for the hold: the end of the wait, or of the probe's.
    pub(super) fn deadline(&self) -> Instant {
        match self.probe_sent {
            None => self.until,
            Some(at) => at + PROBE_WAIT,
        }
    }

    /// How long the episode has lasted.
    pub(super) fn held_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn nothing_during_the_wait_then_one_probe() {
        let t0 = Instant::now();
        let mut h = OutputHold::new(t0, 2 * S);
        assert!(!h.may_send(t0));
        assert!(!h.may_send(t0 + S));
        assert_eq!(h.deadline(), t0 + 2 * S);
        assert!(h.may_send(t0 + 2 * S));
        h.sent(t0 + 2 * S);
        assert!(!h.may_send(t0 + 3 * S), "one probe at a time");
        assert_eq!(h.deadline(), t0 + 2 * S + PROBE_WAIT);
    }

    #[test]
    fn a_refused_probe_waits_again_and_the_episode_keeps_its_start() {
        let t0 = Instant::now();
        let mut h = OutputHold::new(t0, S);
        h.sent(t0 + S);
        h.renew(t0 + 2 * S, 4 * S);
        assert!(!h.may_send(t0 + 5 * S));
        assert!(h.may_send(t0 + 6 * S));
        assert_eq!(h.held_for(t0 + 6 * S), 6 * S);
    }

    #[test]
    fn an_unanswered_probe_lifts_the_hold() {
        let t0 = Instant::now();
        let mut h = OutputHold::new(t0, S);
        h.sent(t0 + S);
        assert!(!h.may_send(t0 + S + PROBE_WAIT - Duration::from_millis(1)));
        assert!(h.may_send(t0 + S + PROBE_WAIT));
        assert!(h.lifted(t0 + S + PROBE_WAIT));
    }

    #[test]
    fn a_server_cannot_park_output_for_longer_than_a_minute() {
        let t0 = Instant::now();
        let h = OutputHold::new(t0, 3600 * S);
        assert!(h.may_send(t0 + MAX_RETRY_AFTER));
    }
}
