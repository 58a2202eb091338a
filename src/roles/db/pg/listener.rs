//! The PostgreSQL side of a standby's live views (`roles/db/live.rs`): the leader
//! `NOTIFY`s inside its batch transaction; a standby `LISTEN`s on a connection of its
//! own, polled without blocking (the client reads what the socket holds and returns).
//!
//! A connection of its own, not the batch connection (whose transactions would hold
//! notifications back until they end) nor the lease's (which a leader keeps, and whose
//! loss must mean only the lease's).

use std::time::{Duration, Instant};

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use super::super::live::CHANNEL;
use super::super::storage::Heard;
use super::super::store::{Op, StoreError};
use super::tls::PgTls;

/// How long a poll waits for a notification when none is there.
const HEAR_WAIT: Duration = Duration::ZERO;

/// A listening connection that could not be made is tried again after this long.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

pub(super) struct Listener {
    config: postgres::Config,
    tls: PgTls,
    conn: Option<Client>,
    /// No new connection before this (the database was unreachable).
    retry_at: Option<Instant>,
}

impl Listener {
    pub(super) fn new(config: postgres::Config, tls: PgTls) -> Listener {
        Listener {
            config,
            tls,
            conn: None,
            retry_at: None,
        }
    }

    /// See `Storage::hear_live`.
    pub(super) fn hear(&mut self, listen: bool, max: usize) -> Result<Option<Heard>, StoreError> {
        let op = Op::Listen;
        if !listen {
            // Closing the session ends its LISTEN.
            self.conn = None;
            return Ok(None);
        }
        let mut fresh = false;
        if self.conn.as_ref().is_none_or(Client::is_closed) {
            self.conn = None;
            let now = Instant::now();
            if self.retry_at.is_some_and(|at| now < at) {
                return Ok(None);
            }
            let listening = self
                .config
                .connect(self.tls.clone())
                .and_then(|mut client| {
                    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
                    Ok(client)
                });
            match listening {
                Ok(client) => self.conn = Some(client),
                Err(source) => {
                    self.retry_at = Some(now + RECONNECT_EVERY);
                    return Err(StoreError::Postgres { op, source });
                }
            }
            fresh = true;
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let mut payloads = Vec::new();
        let mut failed = None;
        {
            // Not `iter()`: its poll never lets the client's runtime read the socket, so
            // it only returns what an earlier call happened to read. A zero timeout
            // parks the runtime once, without waiting, and the socket is read.
            let mut notifications = conn.notifications();
            let mut heard = notifications.timeout_iter(HEAR_WAIT);
            while payloads.len() < max {
                match heard.next() {
                    Ok(Some(n)) => payloads.push(n.payload().to_string()),
                    Err(source) => {
                        failed = Some(source);
                        break;
                    }
                    Ok(None) => break,
                }
            }
        }
        if let Some(source) = failed {
            // What was heard before the failure is passed on; the next connection says
            // `fresh`, so main reads again what may have been missed.
            self.conn = None;
            if payloads.is_empty() && !fresh {
                return Err(StoreError::Postgres { op, source });
            }
            log::warn!("the listening connection failed: {source}");
        } else if conn.is_closed() {
            self.conn = None;
        }
        Ok((fresh || !payloads.is_empty()).then_some(Heard { fresh, payloads }))
    }
}
