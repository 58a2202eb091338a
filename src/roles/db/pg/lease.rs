//! The leader lease of the daemons sharing one PostgreSQL database: a session advisory
//! lock ([`LEADER_LOCK`]) held by a connection of its own. PostgreSQL ends the lock with
//! the session, so a leader that dies (or loses the database) loses the lease as soon as
//! its connection is gone, and another daemon's next try takes it.
//!
//! The db loop asks [`Lease::hold`] every second; a holder checks that its connection
//! still answers, the others try the lock (`pg_try_advisory_lock`, which never waits).

use postgres::Client;

use super::tls::PgTls;

use super::super::store::{Op, StoreError};

/// Session settings of the lease connection (see `Lease::hold`).
const SERVER_SIDE_TIMEOUTS: &str = "SET tcp_keepalives_idle = 5; \
     SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3; \
     SET tcp_user_timeout = 10000";

/// Key of the leader lock ("SPLD").
pub(crate) const LEADER_LOCK: i64 = 0x5350_4c44;

pub(super) struct Lease {
    config: postgres::Config,
    tls: PgTls,
    conn: Option<Client>,
    held: bool,
}

impl Lease {
    pub(super) fn new(config: postgres::Config, tls: PgTls) -> Lease {
        Lease {
            config,
            tls,
            conn: None,
            held: false,
        }
    }

    /// Keeps or takes the lease; true while this daemon holds it. An unreachable
    /// database is an error (and the lease is not held).
    pub(super) fn hold(&mut self) -> Result<bool, StoreError> {
        let op = Op::Lease;
        if self.conn.as_ref().is_none_or(Client::is_closed) {
            self.held = false;
            self.conn = None;
            let mut client = self
                .config
                .connect(self.tls.clone())
                .map_err(|source| StoreError::Postgres { op, source })?;
            // The server must notice a leader whose host died (no FIN ever comes): with
            // these, it ends the session, and so the lease, within about 15 s instead
            // of the system's two hours of TCP keepalive. Ignored over a Unix socket.
            client
                .batch_execute(SERVER_SIDE_TIMEOUTS)
                .map_err(|source| StoreError::Postgres { op, source })?;
            self.conn = Some(client);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(false);
        };
        let answer = if self.held {
            conn.simple_query("SELECT 1").map(|_| true)
        } else {
            conn.query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
                .and_then(|row| row.try_get::<_, bool>(0))
        };
        match answer {
            Ok(held) => {
                self.held = held;
                Ok(held)
            }
            Err(source) => {
                // The session is gone or broken: so is any lock it held.
                self.held = false;
                self.conn = None;
                Err(StoreError::Postgres { op, source })
            }
        }
    }

    /// Gives the lease up at once (an ordered stop), so another daemon takes over
    /// without waiting for the connection to time out.
    pub(super) fn release(&mut self) {
        if let Some(conn) = self.conn.as_mut()
            && self.held
        {
            let _ = conn.query_one("SELECT pg_advisory_unlock($1)", &[&LEADER_LOCK]);
        }
        self.held = false;
        self.conn = None;
    }
}
