//! The leader lease as the db loop keeps it, on a database several daemons share
//! (PostgreSQL; docs/ha.md): every [`POLL`] db keeps or tries the lease
//! (`Storage::hold_lease`), records itself as the leader when it takes it (meta
//! `leader`), reads who leads when it does not, and tells main ([`LeaseReport`]) when
//! anything changed and every few seconds besides.
//!
//! A server whose salt master is down (`master_probe.rs`) neither keeps nor tries the
//! lease: it releases it if it held it, so a server whose master is up takes over
//! (main then stops this one, which restarts as a standby), and takes it again only
//! once its master answers.
//!
//! The first report also carries the secret the servers share (meta `server_secret`,
//! written by the first server that ever connected): tokens and resume keys made by one
//! server are then valid on every other.

use std::time::{Duration, Instant};

use super::storage::Storage;
use super::store::StoreError;
use crate::roles::common::RoleError;
use crate::wire::db::{LeaseReport, SharedSecret};

/// How often the lease is kept or tried: a dead leader's lease is taken over within
/// about this much after PostgreSQL ended its session.
pub(super) const POLL: Duration = Duration::from_secs(1);

/// A report unchanged is sent again after this long (main's view stays fresh).
const RESEND: Duration = Duration::from_secs(5);

/// Meta keys of the shared state.
pub(super) const LEADER_KEY: &str = "leader";
pub(super) const SECRET_KEY: &str = "server_secret";

pub(super) struct LeaseWatch {
    server: String,
    secret: Option<SharedSecret>,
    last: Option<LeaseReport>,
    sent_at: Option<Instant>,
    /// This server's name is recorded as the leader's since it took the lease (recording
    /// it can fail right after the database came back: it is tried again each turn, or
    /// the others would go on reading the old leader's name).
    name_recorded: bool,
    /// This server's salt master (salt executor only).
    master: Option<super::master_probe::MasterProbe>,
}

/// The host name, the default server name.
pub(super) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "saltpeter".to_string())
}

impl LeaseWatch {
    /// Reads (or, first of all servers, writes) the shared secret.
    pub(super) fn new(
        store: &mut dyn Storage,
        server: String,
        master: Option<super::master_probe::MasterProbe>,
    ) -> Result<LeaseWatch, RoleError> {
        let secret = shared_secret(store)
            .map_err(|e| RoleError::Start(format!("could not read the shared secret: {e}")))?;
        Ok(LeaseWatch {
            server,
            secret: Some(SharedSecret(secret)),
            last: None,
            sent_at: None,
            name_recorded: false,
            master,
        })
    }
}

/// The secret in meta, created (random, 32 bytes as hex) when no server made one yet.
fn shared_secret(store: &mut dyn Storage) -> Result<String, StoreError> {
    if let Some(secret) = store.get_meta(SECRET_KEY)? {
        return Ok(secret);
    }
    let bytes: [u8; 32] = rand::random();
    let mine: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // Two servers starting together: the first insert wins, both read it back.
    store.insert_meta_if_absent(SECRET_KEY, &mine)?;
    Ok(store.get_meta(SECRET_KEY)?.unwrap_or(mine))
}

impl LeaseWatch {
    /// One turn: keep or try the lease. Returns the report for main when it changed or
    /// is due again (with the shared secret until main has had it); the caller posts it
    /// and says whether it went out ([`LeaseWatch::posted`]).
    pub(super) fn poll(&mut self, store: &mut dyn Storage) -> Option<LeaseReport> {
        let was_leader = self.last.as_ref().is_some_and(|r| r.leader);
        let master_down = self.master.as_mut().is_some_and(|m| m.down(Instant::now()));
        if master_down {
            if was_leader {
                log::warn!(
                    "the salt master of {} is down: giving up the leader lease to a server \
                     whose master is up",
                    self.server
                );
            }
            // Releasing what is not held is a no-op; a lease never taken stays untried.
            store.release_lease();
        }
        let held = if master_down {
            Ok(false)
        } else {
            store.hold_lease()
        };
        let report = match held {
            Ok(true) => {
                if !was_leader {
                    log::info!("{} holds the leader lease", self.server);
                    self.name_recorded = false;
                }
                if !self.name_recorded {
                    match store.set_meta(LEADER_KEY, &self.server) {
                        Ok(()) => self.name_recorded = true,
                        Err(e) => log::warn!(
                            "could not record {} as the leader (tried again in a second): {e}",
                            self.server
                        ),
                    }
                }
                LeaseReport {
                    leader: true,
                    reachable: true,
                    holder: Some(self.server.clone()),
                    shared_secret: None,
                }
            }
            Ok(false) => LeaseReport {
                leader: false,
                reachable: true,
                holder: store.get_meta(LEADER_KEY).ok().flatten(),
                shared_secret: None,
            },
            Err(e) => {
                if self.last.as_ref().is_none_or(|r| r.reachable) {
                    log::error!("the leader lease cannot be confirmed: {e}");
                }
                LeaseReport {
                    leader: false,
                    reachable: false,
                    holder: None,
                    shared_secret: None,
                }
            }
        };
        if was_leader && !report.leader {
            log::warn!("{} no longer holds the leader lease", self.server);
        }
        let changed = self.last.as_ref() != Some(&report);
        let stale = self.sent_at.is_none_or(|at| at.elapsed() >= RESEND);
        if !(changed || stale) {
            return None;
        }
        let mut notice = report;
        notice.shared_secret = self.secret.take();
        Some(notice)
    }

    /// The database answers and another server leads, as main was last told: this
    /// server listens for the leader's changes (`live.rs`).
    pub(super) fn standby(&self) -> bool {
        self.last.as_ref().is_some_and(|r| r.reachable && !r.leader)
    }

    /// `notice` (from [`LeaseWatch::poll`]) reached main, or did not: then its secret
    /// goes with the next try.
    pub(super) fn posted(&mut self, mut notice: LeaseReport, sent: bool) {
        let secret = notice.shared_secret.take();
        if sent {
            self.last = Some(notice);
            self.sent_at = Some(Instant::now());
        } else {
            self.secret = secret;
        }
    }
}
