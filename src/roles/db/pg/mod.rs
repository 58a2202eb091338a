//! The PostgreSQL backend of the `db` role (`database_url: postgres://…`): the same
//! operations, schema versions and semantics as the SQLite [`super::store::Store`], for
//! several daemons sharing one database (docs/ha.md).
//!
//! Outline:
//! 1. [`PgStore::connect`] connects with the `postgres` crate's blocking client (only the
//!    `db` process may block) and migrates (`schema`), under an advisory lock so two
//!    daemons starting together migrate once.
//! 2. Batches are one transaction (`BEGIN` … `COMMIT`); each operation runs in a
//!    savepoint, so one failing half-way leaves no trace and the batch stays usable, as
//!    on SQLite. A connection lost during a batch is [`StoreError::BatchLost`]: the loop
//!    rolls back and applies the batch again, and `begin_batch` connects anew first.
//! 3. The operations are the shared ones (`storage::Operations`, over `sql::Db`), with
//!    `?N` placeholders written `$N` and values bound by the type PostgreSQL infers
//!    (`db`).
//! 4. The leader lease (`lease`) is a session advisory lock on a connection of its own:
//!    a daemon that dies, or loses the database, loses its connection and so its lease.
//!
//! 5. TLS (`tls`): `sslmode` and the CA (`database_ca_file`, `sslrootcert`) as
//!    `config::database` resolves them, through rustls; every connection, the lease's
//!    too, goes through the same connector.
//!
//! The URL may carry a password: it is only ever shown through [`redact`].

mod db;
mod lease;
mod listener;
mod live;
mod reach;
pub(crate) mod schema;
pub(crate) mod tls;

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use super::sql::numbered_dollars;
use super::storage::{Heard, Storage};
use super::store::{Op, StoreError};

/// How long a connection attempt may take before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Over TCP: how long sent data may stay unacknowledged before the connection fails.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);
/// Over TCP: idle time before keepalive probes start.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// A parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Key-value form: hide a `password=` value.
        return url
            .split_whitespace()
            .map(|kv| match kv.split_once('=') {
                Some((key, _)) if key.ends_with("password") => format!("{key}=***"),
                _ => kv.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ");
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    // `password`, and libpq's `sslpassword` (the client key's).
                    Some((key, _)) if key.ends_with("password") => format!("{key}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
/// Whether `url` names a PostgreSQL database (rather than nothing, i.e. SQLite).
pub(crate) fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Maps a PostgreSQL error of `op`, keeping disk-full apart.
pub(crate) fn pg_error(op: Op) -> impl Fn(postgres::Error) -> StoreError {
    move |source| {
        if source.code() == Some(&SqlState::DISK_FULL) {
            StoreError::DiskFull { op }
        } else {
            StoreError::Postgres { op, source }
        }
    }
}

/// Statements of one operation: a connection and its prepared-statement cache.
pub(crate) struct Sql<'a> {
    client: &'a mut Client,
    cache: &'a mut HashMap<String, Statement>,
}

impl Sql<'_> {
    fn statement(&mut self, op: Op, sql: &str) -> Result<Statement, StoreError> {
        if let Some(stmt) = self.cache.get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = self
            .client
            .prepare(&numbered_dollars(sql))
            .map_err(pg_error(op))?;
        self.cache.insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    /// Runs a statement; returns the rows it changed.
    pub(crate) fn exec(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, StoreError> {
        let stmt = self.statement(op, sql)?;
        self.client.execute(&stmt, params).map_err(pg_error(op))
    }

    pub(crate) fn rows(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = self.statement(op, sql)?;
        self.client.query(&stmt, params).map_err(pg_error(op))
    }

    /// A statement built at run time (a filtered listing): not cached.
    pub(crate) fn rows_uncached(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        self.client.query(sql, params).map_err(pg_error(op))
    }

    pub(crate) fn simple(&mut self, op: Op, sql: &str) -> Result<(), StoreError> {
        self.client.batch_execute(sql).map_err(pg_error(op))
    }
}

/// The PostgreSQL database of the `db` role.
pub(crate) struct PgStore {
    config: postgres::Config,
    tls: tls::PgTls,
    /// The URL without its password.
    shown: String,
    /// `None` while the database is unreachable (connected again at the next batch).
    client: Option<Client>,
    cache: HashMap<String, Statement>,
    /// True between `begin_batch` and `commit_batch`/`rollback_batch`.
    batch: bool,
    /// True inside an operation (`Db::atomic`): a connection lost there is not opened
    /// anew, so the operation fails whole.
    in_op: bool,
    /// Output chunks are written compressed when that pays (`output_compression`).
    pub(crate) compress_output: bool,
    lease: lease::Lease,
    /// A standby's connection listening for the leader's announcements (`live`).
    listener: listener::Listener,
}

impl PgStore {
    #[cfg(test)]
    /// Connects to `url` and brings the schema to the version of this build.
    pub(crate) fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_as(url, None, None)
    }

    /// As [`PgStore::connect`], with the CA of `database_ca_file`, the connections named
    /// after `server` in `pg_stat_activity` (`saltpeter-db SERVER`).
    pub(crate) fn connect_as(
        url: &str,
        ca_file: Option<&Path>,
        server: Option<&str>,
    ) -> Result<PgStore, StoreError> {
        let shown = redact(url);
        let unusable = |e: String| StoreError::Unusable(format!("database_url {shown}: {e}"));
        let settings = crate::config::database::resolve(url, ca_file).map_err(unusable)?;
        let tls = tls::PgTls::new(&settings).map_err(|e| unusable(e.to_string()))?;
        let mut config = postgres::Config::from_str(&settings.driver_url).map_err(|e| {
            StoreError::Unusable(format!(
                "database_url {shown} is not a valid URL: {}",
                crate::config::database::with_causes(&e)
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let name = match server {
            Some(server) => format!("saltpeter-db {server}"),
            None => "saltpeter-db".to_string(),
        };
        config.application_name(&name);
        // Over TCP, a server that vanished without closing (a dead host, a partition)
        // must fail the statement rather than hang db: unacknowledged data goes out
        // within the timeout, and keepalives notice an idle connection gone.
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
        config.keepalives(true);
        config.keepalives_idle(KEEPALIVE_IDLE);
        let mut store = PgStore {
            lease: lease::Lease::new(config.clone(), tls.clone()),
            listener: listener::Listener::new(config.clone(), tls.clone()),
            config,
            tls,
            shown,
            client: None,
            cache: HashMap::new(),
            batch: false,
            in_op: false,
            compress_output: true,
        };
        let mut client = store.open()?;
        schema::prepare(&mut client, &store.shown)?;
        store.client = Some(client);
        Ok(store)
    }

    /// The URL without its password.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    fn open(&self) -> Result<Client, StoreError> {
        self.config.connect(self.tls.clone()).map_err(|e| {
            reach::failure(
                format!(
                    "could not connect to the database {}: {}",
                    self.shown,
                    crate::config::database::with_causes(&e)
                ),
                &e,
            )
        })
    }

    /// The connection, opened anew when it was lost (never inside a batch).
    pub(crate) fn sql(&mut self, op: Op) -> Result<Sql<'_>, StoreError> {
        let lost = self.client.as_ref().is_none_or(Client::is_closed);
        if lost && !self.in_op {
            if self.batch {
                return Err(StoreError::BatchLost { op });
            }
            self.cache.clear();
            self.client = None;
            let client = self.open()?;
            log::info!("connected to the database {}", self.shown);
            self.client = Some(client);
        }
        match self.client.as_mut() {
            Some(client) => Ok(Sql {
                client,
                cache: &mut self.cache,
            }),
            None => Err(StoreError::BatchLost { op }),
        }
    }

    pub(crate) fn connection_lost(&self) -> bool {
        self.client.as_ref().is_none_or(Client::is_closed)
    }
}

impl Storage for PgStore {
    fn engine(&self) -> &'static str {
        "postgresql"
    }
    fn begin_batch(&mut self) -> Result<(), StoreError> {
        if self.batch {
            return Err(StoreError::Invalid {
                op: Op::BeginBatch,
                reason: "a batch is already open".into(),
            });
        }
        self.sql(Op::BeginBatch)?.simple(Op::BeginBatch, "BEGIN")?;
        self.batch = true;
        Ok(())
    }

    fn commit_batch(&mut self) -> Result<(), StoreError> {
        if !self.batch {
            return Err(StoreError::Invalid {
                op: Op::CommitBatch,
                reason: "no batch is open".into(),
            });
        }
        self.batch = false;
        if self.connection_lost() {
            return Err(StoreError::BatchLost {
                op: Op::CommitBatch,
            });
        }
        let committed = self.sql(Op::CommitBatch)?.simple(Op::CommitBatch, "COMMIT");
        if committed.is_err() {
            let _ = self
                .sql(Op::RollbackBatch)
                .and_then(|mut sql| sql.simple(Op::RollbackBatch, "ROLLBACK"));
        }
        committed
    }

    fn rollback_batch(&mut self) -> Result<(), StoreError> {
        let was = self.batch;
        self.batch = false;
        if !was || self.connection_lost() {
            return Ok(());
        }
        self.sql(Op::RollbackBatch)?
            .simple(Op::RollbackBatch, "ROLLBACK")
    }
    fn reclaim_after_prune(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn hold_lease(&mut self) -> Result<bool, StoreError> {
        self.lease.hold()
    }
    fn release_lease(&mut self) {
        self.lease.release();
    }
    fn shared(&self) -> bool {
        true
    }
    fn announce_live(&mut self, payloads: &[String]) -> Result<(), StoreError> {
        PgStore::announce_live(self, payloads)
    }
    fn hear_live(&mut self, listen: bool, max: usize) -> Result<Option<Heard>, StoreError> {
        self.listener.hear(listen, max)
    }
}

#[cfg(test)]
mod tests;
