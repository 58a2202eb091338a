//! When a wrapper's silence may be judged: only over time the daemon itself ran.
//!
//! Main judges silence once a second (`shell::wrappers::sessions::check_liveness`); the
//! frames it judges come through the hub. Two stalls make every wrapper look silent without
//! any wrapper being so:
//!
//! - main itself was stopped (SIGSTOP, a VM pause, a swap storm): the gap between two
//!   checks is far over a second, and the heartbeats of the whole gap are still waiting
//!   in the hub's link;
//! - the hub was stopped: main runs, but no frame reaches it. The hub ticks main every
//!   half second (`wire::link::HUB_TICK`); no tick for [`HUB_SILENT`] means the hub is not passing
//!   anything on.
//!
//! Either way no silence is judged while it lasts, and when it ends every wrapper gets a
//! fresh grace (`Resumed`), as after a restart, and the pick-up deadlines move past it.
//! The same happens after a pause asked for by main itself (a stop, storage trouble).
//! Pure: every call takes `now`.

use std::time::{Duration, Instant};

/// No tick from the hub for this long: the hub is stalled. Shorter than the shortest
/// silence judged (3 heartbeats of 1 s) by more than a tick, so that a stalled hub is
/// noticed before any wrapper looks silent.
pub(crate) const HUB_SILENT: Duration = Duration::from_secs(2);
/// Two checks this far apart (they are a second apart): main was stalled.
pub(crate) const MAIN_GAP: Duration = Duration::from_millis(2500);

/// What a check may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Judge silence as usual.
    Judge,
    /// Judge nothing now.
    Paused,
    /// A stall or pause just ended: give every wrapper a fresh grace, judge nothing now.
    Resumed,
}

#[derive(Debug, Default)]
pub(crate) struct Liveness {
    last_check: Option<Instant>,
    hub_heard: Option<Instant>,
    paused: bool,
    resumed_at: Option<Instant>,
    stalls: u64,
}

impl Liveness {
    /// The hub's tick arrived at `now`.
    pub(crate) fn hub_ticked(&mut self, now: Instant) {
        self.hub_heard = Some(now);
    }

    /// Nothing in flight: the next check starts a new series (its gap is no stall).
    pub(crate) fn idle(&mut self) {
        self.last_check = None;
        self.paused = false;
    }

    /// The check at `now`; `held` while main itself pauses judging (a stop, storage
    /// trouble).
    pub(crate) fn check(&mut self, now: Instant, held: bool) -> Verdict {
        let main_stalled = self
            .last_check
            .is_some_and(|last| now.saturating_duration_since(last) > MAIN_GAP);
        self.last_check = Some(now);
        let hub_silent = self
            .hub_heard
            .is_some_and(|heard| now.saturating_duration_since(heard) > HUB_SILENT);
        if held || hub_silent {
            if !self.paused && hub_silent {
                self.stalls += 1;
            }
            self.paused = true;
            return Verdict::Paused;
        }
        if main_stalled || std::mem::take(&mut self.paused) {
            if main_stalled {
                self.stalls += 1;
            }
            self.resumed_at = Some(now);
            return Verdict::Resumed;
        }
        Verdict::Judge
    }

    /// Judging is paused now (the hub is silent, or main holds it).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// When the last stall or pause ended.
    pub(crate) fn resumed_at(&self) -> Option<Instant> {
        self.resumed_at
    }

    /// Stalls of main or the hub seen since the start (`saltpeter_stalls_total`).
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls
    }
}

/// A pick-up deadline `deadline` (of a window `window` long) at `now`: while judging is
/// paused it is not reached; when a stall ended at `resumed` while its window was open,
/// it moves to a whole window after the stall.
pub(crate) fn pickup_after_stall(
    deadline: Instant,
    window: Duration,
    resumed: Option<Instant>,
    paused: bool,
    now: Instant,
) -> Instant {
    let deadline = match resumed {
        Some(r) if r + window > deadline => r + window,
        _ => deadline,
    };
    if paused {
        deadline.max(now + window)
    } else {
        deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn checks_a_second_apart_judge() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.hub_ticked(t0);
        assert_eq!(l.check(t0, false), Verdict::Judge);
        l.hub_ticked(t0 + S);
        assert_eq!(l.check(t0 + S, false), Verdict::Judge);
        assert_eq!(l.stalls(), 0);
    }

    #[test]
    fn a_gap_between_checks_is_a_stall_of_main() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        assert_eq!(l.check(t0, false), Verdict::Judge);
        // Stopped 31 s; the hub's ticks of that time arrive first (input before timers).
        l.hub_ticked(t0 + 31 * S);
        assert_eq!(l.check(t0 + 31 * S, false), Verdict::Resumed);
        assert_eq!(l.resumed_at(), Some(t0 + 31 * S));
        assert_eq!(l.check(t0 + 32 * S, false), Verdict::Judge);
        assert_eq!(l.stalls(), 1);
    }

    #[test]
    fn a_silent_hub_pauses_until_it_ticks_again() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        l.hub_ticked(t0);
        assert_eq!(l.check(t0 + S, false), Verdict::Judge);
        assert_eq!(l.check(t0 + 2 * S, false), Verdict::Judge);
        assert_eq!(l.check(t0 + 3 * S, false), Verdict::Paused);
        assert!(l.is_paused());
        for i in 4..45 {
            assert_eq!(l.check(t0 + i * S, false), Verdict::Paused);
        }
        l.hub_ticked(t0 + 45 * S);
        assert_eq!(l.check(t0 + 45 * S, false), Verdict::Resumed);
        assert_eq!(l.check(t0 + 46 * S, false), Verdict::Judge);
        assert_eq!(l.stalls(), 1);
    }

    #[test]
    fn a_pause_main_asks_for_ends_with_a_fresh_grace() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        assert_eq!(l.check(t0, true), Verdict::Paused);
        assert_eq!(l.check(t0 + S, true), Verdict::Paused);
        assert_eq!(l.check(t0 + 2 * S, false), Verdict::Resumed);
        assert_eq!(l.stalls(), 0, "not a stall");
    }

    #[test]
    fn an_idle_daemon_is_not_stalled_when_a_run_starts() {
        let t0 = Instant::now();
        let mut l = Liveness::default();
        assert_eq!(l.check(t0, false), Verdict::Judge);
        l.idle();
        assert_eq!(l.check(t0 + 600 * S, false), Verdict::Judge);
    }

    #[test]
    fn a_pickup_window_open_during_a_stall_moves_past_it() {
        let t0 = Instant::now();
        let w = 30 * S;
        // Deadline at t0+30; the stall ended at t0+20: a whole window from then.
        let now = t0 + 25 * S;
        assert_eq!(
            pickup_after_stall(t0 + w, w, Some(t0 + 20 * S), false, now),
            t0 + 50 * S
        );
        // The stall ended long before the window opened: unchanged.
        assert_eq!(
            pickup_after_stall(t0 + 200 * S, w, Some(t0 + 20 * S), false, now),
            t0 + 200 * S
        );
        assert_eq!(pickup_after_stall(t0 + w, w, None, false, now), t0 + w);
        // Paused (the hub is silent): never reached while it lasts.
        let late = t0 + 90 * S;
        assert!(pickup_after_stall(t0 + w, w, None, true, late) > late);
    }
}
