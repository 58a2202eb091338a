//! A budget of log lines and records that all peers share.
//!
//! A limit per peer address (`logsafe::PerKey`) keeps one peer from drowning the others,
//! but not many peers together: one refused hello from each of 5,000 addresses wrote
//! 5,000 lines and event rows. A [`Budget`] lets at most `allowance` records through per
//! `window`, whoever causes them; the rest are counted, and the count is said once, in one
//! summary line, when the window in which they were held has ended ([`Budget::summary_due`]
//! on the caller's timer, or before its next record). So a flood costs at most
//! `allowance` + 1 lines a window, however many peers it comes from.

use std::time::{Duration, Instant};

/// At most `allowance` records per `window` in all; the rest counted for one summary.
#[derive(Debug)]
pub(crate) struct Budget {
    window: Duration,
    allowance: u32,
    /// When the current window began (`None`: nothing recorded yet).
    start: Option<Instant>,
    used: u32,
    /// Held back since the last summary.
    held: u64,
}

impl Budget {
    pub(crate) const fn new(window: Duration, allowance: u32) -> Budget {
        Budget {
            window,
            allowance,
            start: None,
            used: 0,
            held: 0,
        }
    }

    /// The length of a window.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// The records a window lets through.
    pub(crate) fn allowance(&self) -> u32 {
        self.allowance
    }

    fn ended(&self, now: Instant) -> bool {
        self.start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window)
    }

    /// Whether one more record may go out now: `true` spends it; `false` counts it as held
    /// back (said by the next [`Budget::summary_due`] after this window).
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        if self.ended(now) {
            self.start = Some(now);
            self.used = 0;
        }
        if self.used < self.allowance {
            self.used += 1;
            true
        } else {
            self.held += 1;
            false
        }
    }

    /// Whether a record would go out now, without spending anything.
    pub(crate) fn has_room(&self, now: Instant) -> bool {
        self.ended(now) || self.used < self.allowance
    }

    /// Count one record held back by another limit (a per-peer one) as this budget's.
    pub(crate) fn hold(&mut self) {
        self.held += 1;
    }

    /// How many were held back, once the window they were held in has ended (then the
    /// count starts again); `None` while that window lasts or when none were.
    pub(crate) fn summary_due(&mut self, now: Instant) -> Option<u64> {
        (self.held > 0 && self.ended(now)).then(|| std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_lets_its_allowance_through_and_counts_the_rest_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = Budget::new(10 * s, 3);
        assert!(b.summary_due(t0).is_none());
        assert!((0..3).all(|_| b.admit(t0)));
        assert!(!b.has_room(t0 + s));
        assert!(!b.admit(t0 + s) && !b.admit(t0 + 2 * s));
        b.hold();
        assert_eq!(b.summary_due(t0 + 9 * s), None, "the window lasts");
        assert!(b.has_room(t0 + 10 * s));
        assert_eq!(b.summary_due(t0 + 10 * s), Some(3));
        assert_eq!(b.summary_due(t0 + 11 * s), None, "said once");
        // A new window: a fresh allowance.
        assert!(b.admit(t0 + 12 * s));
        assert_eq!(b.summary_due(t0 + 30 * s), None, "nothing held");
    }

    #[test]
    fn records_held_just_before_a_new_window_are_said_before_its_first_record() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = Budget::new(10 * s, 1);
        assert!(b.admit(t0));
        assert!(!b.admit(t0 + 9 * s));
        // The caller asks for the summary before its next record.
        assert_eq!(b.summary_due(t0 + 10 * s), Some(1));
        assert!(b.admit(t0 + 10 * s));
    }
}
