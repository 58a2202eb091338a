//! Opening the database at start: the SQLite file of the state directory, or the
//! PostgreSQL database of `database_url`.
//!
//! A PostgreSQL server that cannot be reached yet (it is starting, restarting, or on the
//! other side of a network that is not up) is waited for: db tries again with a backoff
//! (0.5 s doubling to 5 s) and says so once at WARN and every 30 s after. It is not
//! ready meanwhile, so a stop ends it with SIGTERM at once (`supervisor::stop_level`);
//! the supervisor's start timeout (60 s) bounds the wait, and systemd's restart takes
//! over after it. A database that answers and refuses us (a wrong password, a foreign or
//! newer schema, a bad URL) is a start-up error the operator must fix: exit 2.

use std::time::{Duration, Instant};

use super::lease;
use super::pg;
use super::storage::Storage;
use super::store::{Store, StoreError};
use crate::roles::common::{RoleArgs, RoleError};

const FIRST_WAIT: Duration = Duration::from_millis(500);
const LONGEST_WAIT: Duration = Duration::from_secs(5);
const REMIND_EVERY: Duration = Duration::from_secs(30);

/// The storage, and with PostgreSQL this server's name for the leader lease.
pub(super) type Opened = (Box<dyn Storage>, Option<String>);

/// The database the configuration names: PostgreSQL for `database_url`, else the SQLite
/// file in the state directory.
pub(super) fn open_storage(args: &RoleArgs) -> Result<Opened, RoleError> {
    // Start-only settings; main owns the rest of the configuration (and reports it when
    // it does not load).
    // Only the files with `saltpeter_config` are read: the jobs would cost db memory it
    // never uses.
    let config = crate::config::load_settings(&args.dirs.config).ok();
    let url = config.as_ref().and_then(|c| c.database_url.as_ref());
    if let Some(url) = url {
        let name = config
            .as_ref()
            .and_then(|c| c.server_name.clone())
            .unwrap_or_else(lease::host_name);
        let ca_file = config.as_ref().and_then(|c| c.database_ca_file.as_deref());
        let connect = || pg::PgStore::connect_as(url.expose(), ca_file, Some(&name));
        let mut store = waiting(connect)?;
        store.compress_output = config.as_ref().is_none_or(|c| c.output_compression);
        log::info!("database {}", store.shown_url());
        return Ok((Box::new(store), Some(name)));
    }
    let mut store =
        Store::open(&args.dirs.database()).map_err(|e| RoleError::Start(e.to_string()))?;
    if let Some(config) = &config {
        store
            .set_max_size(config.database_max_size)
            .map_err(|e| RoleError::Start(e.to_string()))?;
        store.compress_output = config.output_compression;
    }
    Ok((Box::new(store), None))
}

/// `connect` until it succeeds or fails for good.
fn waiting<T>(mut connect: impl FnMut() -> Result<T, StoreError>) -> Result<T, RoleError> {
    let started = Instant::now();
    let mut wait = FIRST_WAIT;
    let mut reminded: Option<Instant> = None;
    loop {
        let reason = match connect() {
            Ok(store) => {
                if reminded.is_some() {
                    log::info!(
                        "the database answers after {:.1}s of waiting",
                        started.elapsed().as_secs_f64()
                    );
                }
                return Ok(store);
            }
            Err(StoreError::Unreachable(reason)) => reason,
            Err(e) => return Err(RoleError::BadStart(format!("database_url: {e}"))),
        };
        if reminded.is_none_or(|at| at.elapsed() >= REMIND_EVERY) {
            log::warn!(
                "database_url: {reason}; waiting for it (tried for {:.0}s, next in {:.1}s)",
                started.elapsed().as_secs_f64(),
                wait.as_secs_f64()
            );
            reminded = Some(Instant::now());
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(LONGEST_WAIT);
    }
}
