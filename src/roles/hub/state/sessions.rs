//! Dashboard login sessions and the login throttle.
//!
//! A login creates a session: a random id (128 bits from the OS generator), the identity's
//! name and an expiry ([`SESSION_TTL`]), signed with HMAC-SHA256 under a key kept in the
//! state directory (`session.key`, 0600, created on first start). The browser holds it in
//! an `HttpOnly; SameSite=Strict` cookie (`Secure` under TLS). Because it is signed, not
//! stored, a session survives a daemon restart (the dashboard reconnects by itself) and
//! the hub keeps no table that logins could grow. The role is looked up by name on each
//! request, so a changed or removed identity takes effect at once. Logout revokes the id:
//! kept in memory until it expires and appended to `revoked-sessions` in the state
//! directory, which is read back (and pruned) at start, so a restart does not bring a
//! revoked session back. Revocations are bounded by [`MAX_REVOKED`].
//!
//! The throttle counts failed credentials per client address (an IPv6 /64 counts as one),
//! however they were presented (login form, Bearer header, session cookie, `/ws`):
//! [`MAX_FAILURES`] within [`WINDOW`] and every further wrong credential from that
//! address gets 429 until it passes. A right credential is always accepted
//! (`http/auth.rs`): the throttle keeps guesses cheap and tells a guesser to stop, it
//! never locks the right clients of a shared address (every local client comes from
//! 127.0.0.1) out.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;

use crate::roles::hub::client_addr::client_key as key;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
pub(crate) const MAX_REVOKED: usize = 10_000;
pub(crate) const MAX_FAILURES: u32 = 5;
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
pub(crate) const MAX_TRACKED: usize = 10_000;
const KEY_FILE: &str = "session.key";
const REVOKED_FILE: &str = "revoked-sessions";

/// Why the session key or the revocations could not be kept in the state directory.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionsError {
    #[error("{path} is not 64 hex digits")]
    BadKey { path: PathBuf },
    #[error("could not create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A valid session: who, and its id (for logout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub name: String,
    pub id: String,
    pub expires: u64,
}

pub(crate) struct Sessions {
    key: [u8; 32],
    /// Revoked ids and their expiry (unix seconds).
    revoked: HashMap<String, u64>,
    /// Where revocations are kept (`None` in unit tests).
    revoked_file: Option<PathBuf>,
}

/// Now in unix seconds, from the daemon's one clock (`wire::records::now_ms`).
fn unix_now() -> u64 {
    u64::try_from(crate::wire::records::now_ms() / 1000).unwrap_or(0)
}

impl Sessions {
    /// In memory only, with a random key (unit tests; a hub without a state directory).
    pub(crate) fn ephemeral() -> Sessions {
        Sessions {
            key: rand::random(),
            revoked: HashMap::new(),
            revoked_file: None,
        }
    }

    /// The key and revocations of `state`, created when missing. Errors are logged and
    /// fall back to [`Sessions::ephemeral`] (sessions then end with a restart).
    pub(crate) fn open(state: &Path) -> Sessions {
        match Self::try_open(state) {
            Ok(s) => s,
            Err(e) => {
                log::warn!("dashboard sessions will not survive a restart: {e}");
                Sessions::ephemeral()
            }
        }
    }

    fn try_open(state: &Path) -> Result<Sessions, SessionsError> {
        let key_path = state.join(KEY_FILE);
        let key = match std::fs::read_to_string(&key_path) {
            Ok(text) => match crate::tls::parse_pin(&text) {
                Some(key) => key,
                None => return Err(SessionsError::BadKey { path: key_path }),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; 32] = rand::random();
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&key_path)
                    .map_err(|source| SessionsError::Create {
                        path: key_path.clone(),
                        source,
                    })?;
                f.write_all(crate::tls::hex(&key).as_bytes())
                    .map_err(|source| SessionsError::Write {
                        path: key_path.clone(),
                        source,
                    })?;
                key
            }
            Err(source) => {
                return Err(SessionsError::Read {
                    path: key_path,
                    source,
                });
            }
        };
        let revoked_path = state.join(REVOKED_FILE);
        let now = unix_now();
        let mut revoked = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(&revoked_path) {
            for line in text.lines().take(MAX_REVOKED) {
                if let Some((id, exp)) = line.split_once(' ')
                    && let Ok(exp) = exp.parse::<u64>()
                    && exp > now
                {
                    revoked.insert(id.to_string(), exp);
                }
            }
        }
        // Rewritten without the expired ones, so the file stays small.
        let text: String = revoked
            .iter()
            .map(|(id, exp)| format!("{id} {exp}\n"))
            .collect();
        if let Err(source) = std::fs::write(&revoked_path, text) {
            return Err(SessionsError::Write {
                path: revoked_path,
                source,
            });
        }
        Ok(Sessions {
            key,
            revoked,
            revoked_file: Some(revoked_path),
        })
    }

    fn mac(&self, body: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(body.as_bytes());
        crate::tls::hex(&mac.finalize().into_bytes())
    }

    /// A new session for `name`; returns the cookie value.
    pub(crate) fn create(&self, name: &str) -> String {
        let id: [u8; 16] = rand::random();
        let body = format!(
            "v1:{}:{}:{name}",
            unix_now() + SESSION_TTL.as_secs(),
            crate::tls::hex(&id)
        );
        let mac = self.mac(&body);
        format!("{body}:{mac}")
    }

    /// Whether a cookie value was signed by us (perhaps expired or revoked since): one
    /// that was not is a guess and counts against the address.
    pub(crate) fn is_signed(&self, value: &str) -> bool {
        let Some((body, mac)) = value.rsplit_once(':') else {
            return false;
        };
        let expected = self.mac(body);
        expected.len() == mac.len()
            && expected
                .bytes()
                .zip(mac.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// The session a cookie value holds, if signed by us, not expired, not revoked.
    pub(crate) fn find(&self, value: &str) -> Option<Session> {
        if !self.is_signed(value) {
            return None;
        }
        let (body, _) = value.rsplit_once(':')?;
        let mut parts = body.splitn(4, ':');
        let (Some("v1"), Some(exp), Some(id), Some(name)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let expires: u64 = exp.parse().ok()?;
        if expires <= unix_now() || self.revoked.contains_key(id) {
            return None;
        }
        Some(Session {
            name: name.to_string(),
            id: id.to_string(),
            expires,
        })
    }

    /// Logout: the session stops working, across restarts too.
    pub(crate) fn revoke(&mut self, value: &str) -> bool {
        let Some(session) = self.find(value) else {
            return false;
        };
        let now = unix_now();
        if self.revoked.len() >= MAX_REVOKED {
            self.revoked.retain(|_, exp| *exp > now);
        }
        if self.revoked.len() >= MAX_REVOKED {
            log::warn!("{MAX_REVOKED} sessions revoked and unexpired: logout refused");
            return false;
        }
        if let Some(path) = &self.revoked_file {
            let line = format!("{} {}\n", session.id, session.expires);
            let written = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
            if let Err(e) = written {
                log::warn!("could not record a logout in {}: {e}", path.display());
            }
        }
        self.revoked.insert(session.id, session.expires);
        true
    }
}

/// Failed credentials per client address: the login form, a Bearer token, a session
/// cookie not signed by us, a `/ws` handshake's credentials. One counter for all of them,
/// so a guesser cannot pick the door that is not counted. It holds back wrong
/// credentials only: the caller accepts a right one without asking it.
#[derive(Default)]
pub(crate) struct Throttle {
    failures: HashMap<IpAddr, (Instant, u32)>,
}

impl Throttle {
    /// Whether a wrong credential from `ip` is still answered as such (401) and counted,
    /// rather than 429.
    pub(crate) fn allows(&self, ip: IpAddr, now: Instant) -> bool {
        match self.failures.get(&key(ip)) {
            Some((since, n)) => now.duration_since(*since) >= WINDOW || *n < MAX_FAILURES,
            None => true,
        }
    }

    pub(crate) fn failed(&mut self, ip: IpAddr, now: Instant) {
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
    fn sessions_are_random_signed_and_revocable_across_restarts() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = Sessions::open(tmp.path());
        let a = s.create("alice");
        let b = s.create("alice");
        assert_ne!(a, b, "random per login");
        assert_eq!(s.find(&a).map(|x| x.name), Some("alice".into()));
        let forged = a.replace("alice", "admin");
        assert!(s.find(&forged).is_none(), "the name is signed");
        assert!(s.find("v1:1:2:x:00").is_none());
        assert!(Sessions::ephemeral().find(&a).is_none(), "another key");
        assert!(s.revoke(&a));
        assert!(s.find(&a).is_none(), "revoked");
        let again = Sessions::open(tmp.path());
        assert!(again.find(&a).is_none(), "still revoked after a restart");
        assert!(again.find(&b).is_some(), "the other survives a restart");
        let key = tmp.path().join(KEY_FILE);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
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
