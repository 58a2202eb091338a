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

use super::Db;
use super::storage::Storage;
use super::store::StoreError;
use crate::evloop::Ctx;
use crate::ipc::rpc::Packet;
use crate::roles::common::RoleError;
use crate::wire::db::{DbNotice, LeaseReport, SharedSecret};

/// How often the lease is kept or tried: a dead leader's lease is taken over within
/// about this much after PostgreSQL ended its session.
pub const POLL: Duration = Duration::from_secs(1);

/// A report unchanged is sent again after this long (main's view stays fresh).
const RESEND: Duration = Duration::from_secs(5);

/// Meta keys of the shared state.
pub const LEADER_KEY: &str = "leader";
pub const SECRET_KEY: &str = "server_secret";

pub struct LeaseWatch {
    server: String,
    secret: Option<SharedSecret>,
    last: Option<LeaseReport>,
    sent_at: Option<Instant>,
    /// This server's salt master (salt executor only).
    master: Option<super::master_probe::MasterProbe>,
}

/// The host name, the default server name.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "saltpeter".to_string())
}

impl LeaseWatch {
    /// Reads (or, first of all servers, writes) the shared secret.
    pub fn new(
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

/// One turn: keep or try the lease, and tell main.
pub fn poll(db: &mut Db, _ctx: &mut Ctx<Db>) {
    let Some(watch) = db.lease.as_mut() else {
        return;
    };
    let was_leader = watch.last.as_ref().is_some_and(|r| r.leader);
    let master_down = watch
        .master
        .as_mut()
        .is_some_and(|m| m.down(Instant::now()));
    if master_down {
        if was_leader {
            log::warn!(
                "the salt master of {} is down: giving up the leader lease to a server whose \
                 master is up",
                watch.server
            );
        }
        // Releasing what is not held is a no-op; a lease never taken stays untried.
        db.store.release_lease();
    }
    let held = if master_down {
        Ok(false)
    } else {
        db.store.hold_lease()
    };
    let report = match held {
        Ok(true) => {
            if !was_leader {
                log::info!("{} holds the leader lease", watch.server);
                if let Err(e) = db.store.set_meta(LEADER_KEY, &watch.server) {
                    log::warn!("could not record {} as the leader: {e}", watch.server);
                }
            }
            LeaseReport {
                leader: true,
                reachable: true,
                holder: Some(watch.server.clone()),
                shared_secret: None,
            }
        }
        Ok(false) => LeaseReport {
            leader: false,
            reachable: true,
            holder: db.store.get_meta(LEADER_KEY).ok().flatten(),
            shared_secret: None,
        },
        Err(e) => {
            if watch.last.as_ref().is_none_or(|r| r.reachable) {
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
        log::warn!("{} no longer holds the leader lease", watch.server);
    }
    let changed = watch.last.as_ref() != Some(&report);
    let stale = watch.sent_at.is_none_or(|at| at.elapsed() >= RESEND);
    if !(changed || stale) {
        return;
    }
    let mut notice = report.clone();
    notice.shared_secret = watch.secret.take();
    match db.main.post(&Packet::Cast(DbNotice::Lease(notice.clone()))) {
        Ok(()) => {
            watch.last = Some(report);
            watch.sent_at = Some(Instant::now());
        }
        Err(e) => {
            // Not sent: the secret goes with the next try.
            watch.secret = notice.shared_secret;
            log::debug!("could not report the lease: {e}");
        }
    }
}
