//! Dashboard login sessions and the login throttle.
//!
//! A login creates a random session id (32 bytes from the OS generator) that only the
//! browser holds, in an `HttpOnly; SameSite=Strict` cookie (`Secure` under TLS); the hub
//! keeps its SHA-256 with the identity and an expiry ([`SESSION_TTL`]). Logout forgets
//! it, so a copied cookie stops working. Both tables are bounded: sessions by
//! [`MAX_SESSIONS`] (the oldest goes), the throttle by [`MAX_TRACKED`] addresses.
//!
//! The throttle counts failed logins per client address (an IPv6 /64 counts as one):
//! [`MAX_FAILURES`] within [`WINDOW`] and further attempts get 429 until it passes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::ApiRole;

pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
pub const MAX_SESSIONS: usize = 10_000;
pub const MAX_FAILURES: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(60);
pub const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone)]
pub struct Session {
    pub name: String,
    pub role: ApiRole,
    pub expires: Instant,
}

#[derive(Default)]
pub struct Sessions {
    by_digest: HashMap<[u8; 32], Session>,
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

impl Sessions {
    /// A new session; returns the id for the cookie.
    pub fn create(&mut self, name: &str, role: ApiRole, now: Instant) -> String {
        self.by_digest.retain(|_, s| s.expires > now);
        if self.by_digest.len() >= MAX_SESSIONS
            && let Some(oldest) = self
                .by_digest
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
        {
            self.by_digest.remove(&oldest);
        }
        let id: [u8; 32] = rand::random();
        let value = crate::tls::hex(&id);
        self.by_digest.insert(
            digest(&value),
            Session {
                name: name.to_string(),
                role,
                expires: now + SESSION_TTL,
            },
        );
        value
    }

    pub fn find(&self, value: &str, now: Instant) -> Option<&Session> {
        self.by_digest
            .get(&digest(value))
            .filter(|s| s.expires > now)
    }

    pub fn revoke(&mut self, value: &str) -> bool {
        self.by_digest.remove(&digest(value)).is_some()
    }
}

#[derive(Default)]
pub struct Throttle {
    failures: HashMap<IpAddr, (Instant, u32)>,
}

/// The key an address is counted under: IPv6 by its /64 (one host has many).
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let mut seg = v6.segments();
            seg[4..].iter_mut().for_each(|s| *s = 0);
            IpAddr::V6(seg.into())
        }
    }
}

impl Throttle {
    /// Whether `ip` may try a login now.
    pub fn allows(&self, ip: IpAddr, now: Instant) -> bool {
        match self.failures.get(&key(ip)) {
            Some((since, n)) => now.duration_since(*since) >= WINDOW || *n < MAX_FAILURES,
            None => true,
        }
    }

    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.failures.len() >= MAX_TRACKED {
            self.failures
                .retain(|_, (since, _)| now.duration_since(*since) < WINDOW);
        }
        if self.failures.len() >= MAX_TRACKED && !self.failures.contains_key(&key(ip)) {
            return; // full of live entries: count nothing new rather than grow
        }
        let entry = self.failures.entry(key(ip)).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_random_expire_and_revoke() {
        let now = Instant::now();
        let mut s = Sessions::default();
        let a = s.create("alice", ApiRole::Viewer, now);
        let b = s.create("alice", ApiRole::Viewer, now);
        assert_ne!(a, b, "random per login");
        assert_eq!(s.find(&a, now).map(|x| x.name.as_str()), Some("alice"));
        assert!(s.find(&a, now + SESSION_TTL).is_none(), "expired");
        assert!(s.revoke(&a));
        assert!(s.find(&a, now).is_none(), "revoked");
        assert!(s.find("forged", now).is_none());
    }

    #[test]
    fn throttle_counts_failures_per_address_in_a_window() {
        let now = Instant::now();
        let mut t = Throttle::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            assert!(t.allows(ip, now));
            t.failed(ip, now);
        }
        assert!(!t.allows(ip, now));
        assert!(t.allows(other, now));
        assert!(t.allows(ip, now + WINDOW));
        let v6a: IpAddr = "2001:db8::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8::2".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            t.failed(v6a, now);
        }
        assert!(!t.allows(v6b, now), "one /64 is one client");
    }
}
