//! The supervisor's liveness check of its children, as pure logic (`now` is an input).
//!
//! Once every child is ready the supervisor pings each one on its control link; the
//! child's event loop answers (`roles::common::control_event`), so a loop that stops
//! turning — a deadlock, an endless loop, a process stopped by a signal — stops
//! answering. A child silent for longer than `saltpeter_config.watchdog` is hung: the
//! supervisor kills it and stops the daemon with exit status 1, for systemd to restart.
//!
//! Only time the supervisor itself ran counts as silence: a gap between two of its turns
//! longer than [`TURN_GAP`] (the whole daemon paused, a VM stopped) moves every clock
//! forward by the gap, so what nobody could have answered during it is not held against
//! anyone. systemd's own watchdog (`WatchdogSec=`) gets `WATCHDOG=1` at every turn while
//! every child has answered within the limit: if the supervisor itself hangs, systemd
//! restarts the daemon; a hung child is the supervisor's to find, with a clear log line.

use std::time::{Duration, Instant};

use crate::ipc::Role;

/// How often the supervisor's loop turns for the watchdog.
pub(crate) const TURN: Duration = Duration::from_secs(1);
/// A longer gap between two turns means the supervisor did not run meanwhile.
pub(crate) const TURN_GAP: Duration = Duration::from_millis(2500);
/// The longest interval between two pings.
const MAX_PING_EVERY: Duration = Duration::from_secs(5);
const MIN_PING_EVERY: Duration = Duration::from_millis(500);

struct Watched {
    role: Role,
    /// When it last answered (or when watching began), moved forward over gaps.
    answered: Instant,
}

pub(crate) struct Watchdog {
    limit: Duration,
    ping_every: Duration,
    watched: Vec<Watched>,
    last_turn: Instant,
    last_ping: Option<Instant>,
    seq: u64,
    hung_reported: bool,
}

/// What one turn asks the supervisor to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Send `Ping(n)` to every child.
    pub ping: Option<u64>,
    /// A child silent beyond the limit: its role and how long (reported once).
    pub hung: Option<(Role, Duration)>,
    /// Every child answered within the limit: tell systemd `WATCHDOG=1`.
    pub healthy: bool,
}

impl Watchdog {
    /// Watch `roles` from `now`; `None` when `limit` is zero (the check is off).
    pub(crate) fn new(limit: Duration, roles: &[Role], now: Instant) -> Option<Watchdog> {
        if limit.is_zero() {
            return None;
        }
        let ping_every = (limit / 4).clamp(MIN_PING_EVERY, MAX_PING_EVERY);
        Some(Watchdog {
            limit,
            ping_every,
            watched: roles
                .iter()
                .map(|&role| Watched {
                    role,
                    answered: now,
                })
                .collect(),
            last_turn: now,
            last_ping: None,
            seq: 0,
            hung_reported: false,
        })
    }

    /// A child answered a ping (any ping: an answer at all means its loop turns).
    pub(crate) fn answered(&mut self, role: Role, now: Instant) {
        if let Some(w) = self.watched.iter_mut().find(|w| w.role == role) {
            w.answered = w.answered.max(now);
        }
    }

    /// How long `role` has been silent at `now` (zero for a role not watched).
    #[cfg(test)]
    fn silence(&self, role: Role, now: Instant) -> Duration {
        self.watched
            .iter()
            .find(|w| w.role == role)
            .map(|w| now.saturating_duration_since(w.answered))
            .unwrap_or_default()
    }

    /// One turn of the supervisor's loop at `now`.
    pub(crate) fn turn(&mut self, now: Instant) -> Turn {
        let gap = now.saturating_duration_since(self.last_turn);
        self.last_turn = now;
        if gap > TURN_GAP {
            // The supervisor was not running: nobody could answer, nobody is blamed.
            for w in &mut self.watched {
                w.answered += gap;
            }
        }
        let mut out = Turn::default();
        let due = self
            .last_ping
            .is_none_or(|at| now.saturating_duration_since(at) >= self.ping_every);
        if due {
            self.seq += 1;
            self.last_ping = Some(now);
            out.ping = Some(self.seq);
        }
        let (role, silence) = self
            .watched
            .iter()
            .map(|w| (w.role, now.saturating_duration_since(w.answered)))
            .max_by_key(|(_, s)| *s)
            .unwrap_or((Role::Supervisor, Duration::ZERO));
        if silence > self.limit && !self.hung_reported {
            self.hung_reported = true;
            out.hung = Some((role, silence));
        }
        out.healthy = silence <= self.limit;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: [Role; 2] = [Role::Main, Role::Db];

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    /// Turns every second from `from` to `to` (ms), with both roles answering each
    /// ping except `silent`; returns the first hang reported.
    fn run(
        dog: &mut Watchdog,
        start: Instant,
        from: u64,
        to: u64,
        silent: Option<Role>,
    ) -> Option<(Role, Duration, u64)> {
        let mut t = from;
        while t <= to {
            let now = at(start, t);
            let turn = dog.turn(now);
            if let Some((role, s)) = turn.hung {
                return Some((role, s, t));
            }
            if turn.ping.is_some() {
                for role in ROLES.iter().filter(|r| Some(**r) != silent) {
                    dog.answered(*role, at(start, t + 10));
                }
            }
            t += 1000;
        }
        None
    }

    #[test]
    fn zero_turns_the_check_off() {
        assert!(Watchdog::new(Duration::ZERO, &ROLES, Instant::now()).is_none());
    }

    #[test]
    fn children_that_answer_are_never_hung_and_systemd_hears_from_us() {
        let start = Instant::now();
        let mut dog = Watchdog::new(Duration::from_secs(20), &ROLES, start).unwrap();
        assert_eq!(run(&mut dog, start, 0, 600_000, None), None);
        assert!(dog.turn(at(start, 601_000)).healthy);
    }

    #[test]
    fn a_silent_child_is_hung_once_past_the_limit_and_reported_once() {
        let start = Instant::now();
        let mut dog = Watchdog::new(Duration::from_secs(20), &ROLES, start).unwrap();
        let (role, silence, t) = run(&mut dog, start, 0, 60_000, Some(Role::Db)).unwrap();
        assert_eq!(role, Role::Db);
        assert!(silence > Duration::from_secs(20), "{silence:?}");
        assert_eq!(t, 21_000, "the first turn past the limit");
        assert_eq!(run(&mut dog, start, 22_000, 90_000, Some(Role::Db)), None);
    }

    #[test]
    fn systemd_stops_hearing_from_us_once_a_child_is_past_the_limit() {
        let start = Instant::now();
        let mut dog = Watchdog::new(Duration::from_secs(30), &ROLES, start).unwrap();
        let mut t = 0;
        let mut last_healthy = 0;
        while t <= 60_000 {
            let turn = dog.turn(at(start, t));
            if turn.ping.is_some() {
                dog.answered(Role::Main, at(start, t));
            }
            if turn.healthy {
                last_healthy = t;
            }
            t += 1000;
        }
        assert_eq!(last_healthy, 30_000, "healthy up to the limit, not after");
    }

    #[test]
    fn time_the_supervisor_did_not_run_is_not_silence() {
        let start = Instant::now();
        let mut dog = Watchdog::new(Duration::from_secs(20), &ROLES, start).unwrap();
        assert_eq!(run(&mut dog, start, 0, 10_000, None), None);
        // The whole daemon paused for 5 minutes: the next turn comes 300 s later, and
        // the children's answers to its ping follow at once.
        assert_eq!(run(&mut dog, start, 310_000, 400_000, None), None);
        assert!(dog.silence(Role::Db, at(start, 310_000)) < Duration::from_secs(1));
    }

    #[test]
    fn a_gap_does_not_hide_a_child_that_stays_silent_afterwards() {
        let start = Instant::now();
        let mut dog = Watchdog::new(Duration::from_secs(20), &ROLES, start).unwrap();
        assert_eq!(run(&mut dog, start, 0, 10_000, None), None);
        let (role, _, t) = run(&mut dog, start, 310_000, 400_000, Some(Role::Main)).unwrap();
        assert_eq!(role, Role::Main);
        assert!((320_000..=335_000).contains(&t), "hung at {t}");
    }

    #[test]
    fn pings_follow_the_limit_within_bounds() {
        let start = Instant::now();
        let short = Watchdog::new(Duration::from_secs(1), &ROLES, start).unwrap();
        assert_eq!(short.ping_every, MIN_PING_EVERY);
        let long = Watchdog::new(Duration::from_secs(3600), &ROLES, start).unwrap();
        assert_eq!(long.ping_every, MAX_PING_EVERY);
        let mut dog = Watchdog::new(Duration::from_secs(120), &ROLES, start).unwrap();
        let pings: Vec<u64> = (0..=20)
            .filter_map(|s| dog.turn(at(start, s * 1000)).ping)
            .collect();
        assert_eq!(pings, vec![1, 2, 3, 4, 5], "every 5 s from the first turn");
    }
}
