//! Which server the wrapper dials next, and after how long.
//!
//! `SP_URL` may name several servers sharing one database (docs/ha.md); one of them leads
//! and the others refuse the wrapper with `retry_later`. The rules:
//!
//! 1. Every failed attempt moves to the next server exactly once, whatever it was: a
//!    refusal (`retry_later`, a server that does not know the run), a connect failure or
//!    timeout, a link that closed. (A refusal is followed by the hub closing the link;
//!    the session counts the two as one failure, `session::hub_link`.)
//! 2. Within a round (fewer failures in a row than there are servers) the next server is
//!    dialled after a short [`HOP`], so a wrapper refused by a standby reaches the leader
//!    well within a heartbeat period.
//! 3. Each time a full round has failed the reconnect backoff applies (0.5 s doubling to
//!    30 s by default, jittered): a failover with no leader yet, or a daemon that is
//!    down, is not hammered. With one server every failure ends a round, as before.
//! 4. A welcome ends the streak: the next loss starts a new round from the base delay.
//!
//! Pure: the caller passes the random number for the jitter, so the rules are tested
//! without a clock or a socket.

use std::time::Duration;

use super::settings::{Backoff, HubUrl};

/// The pause before the next server within a round (jittered to 0.5-1.5 times): short,
/// yet the wrappers moving off a standby together do not arrive as one.
pub(super) const HOP: Duration = Duration::from_millis(100);

pub(super) struct Rotation {
    /// Never empty: the launching server first, then the others of `SP_URL`.
    servers: Vec<HubUrl>,
    current: usize,
    /// Failed attempts in a row since the last welcome.
    failures: usize,
    backoff: Backoff,
    hop: Duration,
}

impl Rotation {
    pub(super) fn new(first: HubUrl, others: Vec<HubUrl>, backoff: Backoff) -> Rotation {
        let mut servers = vec![first];
        servers.extend(others);
        Rotation {
            servers,
            current: 0,
            failures: 0,
            backoff,
            hop: HOP,
        }
    }

    /// The server to dial (or the one the link is on).
    pub(super) fn current(&self) -> &HubUrl {
        &self.servers[self.current]
    }

    pub(super) fn several(&self) -> bool {
        self.servers.len() > 1
    }

    /// One failed attempt on the current server: move to the next one (once) and say how
    /// long to wait before dialling it. `unit` is a random number in [0, 1).
    pub(super) fn failed(&mut self, unit: f64) -> Duration {
        self.failures += 1;
        self.current = (self.current + 1) % self.servers.len();
        if self.failures.is_multiple_of(self.servers.len()) {
            self.backoff.next_delay(unit)
        } else {
            self.hop
                .min(self.backoff.base())
                .mul_f64(0.5 + unit.clamp(0.0, 1.0))
        }
    }

    /// A server welcomed the wrapper: the streak of failures is over.
    pub(super) fn welcomed(&mut self) {
        self.failures = 0;
        self.backoff.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrapper::settings::parse_hub_url;

    const MS: Duration = Duration::from_millis(1);

    fn rotation(urls: &[&str]) -> Rotation {
        let mut hubs = urls.iter().map(|u| parse_hub_url(u).unwrap());
        let first = hubs.next().unwrap();
        let backoff = Backoff::new(500 * MS, 30_000 * MS);
        Rotation::new(first, hubs.collect(), backoff)
    }

    fn at(r: &Rotation) -> u16 {
        r.current().port
    }

    #[test]
    fn one_failure_moves_exactly_one_server_so_two_servers_alternate() {
        let mut r = rotation(&["ws://a:1", "ws://b:2"]);
        assert_eq!(at(&r), 1);
        let mut visited = Vec::new();
        for _ in 0..6 {
            r.failed(0.5);
            visited.push(at(&r));
        }
        assert_eq!(visited, [2, 1, 2, 1, 2, 1]);
    }

    #[test]
    fn a_round_is_quick_and_the_backoff_grows_only_after_a_full_round() {
        let mut r = rotation(&["ws://a:1", "ws://b:2", "ws://c:3"]);
        // Refused by a (a standby): b within a hop, not a backoff.
        assert_eq!(r.failed(0.5), HOP);
        assert_eq!(r.failed(0.5), HOP);
        // All three failed: the backoff, from its base.
        assert_eq!(r.failed(0.5), 500 * MS);
        assert_eq!(r.failed(0.5), HOP);
        assert_eq!(r.failed(0.5), HOP);
        assert_eq!(r.failed(0.5), 1000 * MS);
        // The jitter keeps a hop within half and one and a half of it.
        assert_eq!(r.failed(0.0), HOP / 2);
        assert_eq!(r.failed(1.0), HOP * 3 / 2);
    }

    #[test]
    fn a_standby_refusal_reaches_the_leader_within_a_heartbeat() {
        // Welcomed by the leader b, which then drops the link: a (standby) refuses,
        // and b is dialled again after a hop plus the base delay at most.
        let mut r = rotation(&["ws://a:1", "ws://b:2"]);
        r.failed(0.5);
        r.welcomed();
        assert_eq!(at(&r), 2);
        let to_standby = r.failed(0.999);
        assert_eq!(at(&r), 1);
        let to_leader = r.failed(0.999);
        assert_eq!(at(&r), 2);
        assert!(to_standby + to_leader < Duration::from_secs(1));
    }

    #[test]
    fn a_welcome_ends_the_streak_and_resets_the_backoff() {
        let mut r = rotation(&["ws://a:1", "ws://b:2"]);
        // Ten rounds: the backoff has reached its cap.
        for _ in 0..20 {
            r.failed(0.5);
        }
        assert!(r.failed(0.5) < Duration::from_secs(1), "mid-round: a hop");
        assert_eq!(
            r.failed(0.5),
            30_000 * MS,
            "end of round: the grown backoff"
        );
        r.welcomed();
        assert_eq!(r.failed(0.5), HOP);
        assert_eq!(r.failed(0.5), 500 * MS);
    }

    #[test]
    fn one_server_keeps_the_plain_backoff() {
        let mut r = rotation(&["ws://a:1"]);
        assert!(!r.several());
        assert_eq!(r.failed(0.5), 500 * MS);
        assert_eq!(r.failed(0.5), 1000 * MS);
        assert_eq!(at(&r), 1);
    }

    #[test]
    fn a_hop_is_never_longer_than_the_base_delay() {
        let mut hubs = ["ws://a:1", "ws://b:2"]
            .iter()
            .map(|u| parse_hub_url(u).unwrap());
        let first = hubs.next().unwrap();
        let mut r = Rotation::new(first, hubs.collect(), Backoff::new(10 * MS, 100 * MS));
        assert_eq!(r.failed(0.5), 10 * MS);
    }
}
