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
//! 3. Operations live beside their data as on SQLite: `runs`, `output`, `deliveries`,
//!    `wrappers`.
//! 4. The leader lease (`lease`) is a session advisory lock on a connection of its own:
//!    a daemon that dies, or loses the database, loses its connection and so its lease.
//!
//! 5. TLS (`tls`): `sslmode` and the CA (`database_ca_file`, `sslrootcert`) as
//!    `config::database` resolves them, through rustls; every connection, the lease's
//!    too, goes through the same connector.
//!
//! The URL may carry a password: it is only ever shown through [`redact`].

mod deliveries;
mod dispatch;
mod lease;
mod listener;
mod live;
mod output;
mod runs;
pub mod schema;
pub mod tls;
mod wrappers;

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::{FromSql, ToSql};
use postgres::{Client, Row, Statement};

use super::store::{Op, StoreError};
use crate::wire::db::{EventFilter, EventRecord, NewEvent};
use crate::wire::records::Millis;

pub use lease::LEADER_LOCK;
pub use schema::SCHEMA_VERSION;

/// How long a connection attempt may take before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Over TCP: how long sent data may stay unacknowledged before the connection fails.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);
/// Over TCP: idle time before keepalive probes start.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// A parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
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

/// Whether `url` names a PostgreSQL database (rather than nothing, i.e. SQLite).
pub fn is_postgres_url(url: &str) -> bool {
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

/// Column `idx` of `row`, or an error naming the operation (never a panic on a type the
/// build does not expect).
pub(crate) fn col<'r, T: FromSql<'r>>(op: Op, row: &'r Row, idx: usize) -> Result<T, StoreError> {
    row.try_get(idx).map_err(pg_error(op))
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
        let stmt = self.client.prepare(sql).map_err(pg_error(op))?;
        self.cache.insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    /// Runs a statement; returns the rows it changed.
    pub fn exec(&mut self, op: Op, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let stmt = self.statement(op, sql)?;
        self.client.execute(&stmt, params).map_err(pg_error(op))
    }

    pub fn rows(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = self.statement(op, sql)?;
        self.client.query(&stmt, params).map_err(pg_error(op))
    }

    pub fn opt(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Option<Row>, StoreError> {
        let stmt = self.statement(op, sql)?;
        self.client.query_opt(&stmt, params).map_err(pg_error(op))
    }

    /// A statement built at run time (a filtered listing): not cached.
    pub fn rows_uncached(
        &mut self,
        op: Op,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, StoreError> {
        self.client.query(sql, params).map_err(pg_error(op))
    }

    fn simple(&mut self, op: Op, sql: &str) -> Result<(), StoreError> {
        self.client.batch_execute(sql).map_err(pg_error(op))
    }
}

/// A SELECT whose WHERE clause grows with the filter's set fields, each value bound as a
/// parameter (never spliced into the text); the PostgreSQL twin of `store::Select`.
pub(crate) struct PgSelect {
    pub sql: String,
    pub args: Vec<Box<dyn ToSql + Sync>>,
}

impl PgSelect {
    pub fn new(head: String) -> PgSelect {
        PgSelect {
            sql: format!("{head} WHERE 1 = 1"),
            args: Vec::new(),
        }
    }

    /// `AND clause $N`, with `value` as parameter N.
    pub fn and(&mut self, clause: &str, value: impl ToSql + Sync + 'static) {
        self.args.push(Box::new(value));
        self.sql
            .push_str(&format!(" AND {clause} ${}", self.args.len()));
    }

    pub fn params(&self) -> Vec<Param<'_>> {
        self.args.iter().map(|a| a.as_ref() as Param<'_>).collect()
    }
}

/// The PostgreSQL database of the `db` role.
pub struct PgStore {
    config: postgres::Config,
    tls: tls::PgTls,
    /// The URL without its password.
    shown: String,
    /// `None` while the database is unreachable (connected again at the next batch).
    client: Option<Client>,
    cache: HashMap<String, Statement>,
    /// True between `begin_batch` and `commit_batch`/`rollback_batch`.
    batch: bool,
    /// Output chunks are written compressed when that pays (`output_compression`).
    pub(crate) compress_output: bool,
    lease: lease::Lease,
    /// A standby's connection listening for the leader's announcements (`live`).
    listener: listener::Listener,
}

impl PgStore {
    /// Connects to `url` and brings the schema to the version of this build.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_as(url, None, None)
    }

    /// As [`PgStore::connect`], with the CA of `database_ca_file`, the connections named
    /// after `server` in `pg_stat_activity` (`saltpeter-db SERVER`).
    pub fn connect_as(
        url: &str,
        ca_file: Option<&Path>,
        server: Option<&str>,
    ) -> Result<PgStore, StoreError> {
        let shown = redact(url);
        let unusable = |e: String| StoreError::Unusable(format!("database_url {shown}: {e}"));
        let settings = crate::config::database::resolve(url, ca_file).map_err(unusable)?;
        let tls = tls::PgTls::new(&settings).map_err(unusable)?;
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
            compress_output: true,
        };
        let mut client = store.open()?;
        schema::prepare(&mut client, &store.shown)?;
        store.client = Some(client);
        Ok(store)
    }

    /// The URL without its password.
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    fn open(&self) -> Result<Client, StoreError> {
        self.config.connect(self.tls.clone()).map_err(|e| {
            StoreError::Unusable(format!(
                "could not connect to the database {}: {}",
                self.shown,
                crate::config::database::with_causes(&e)
            ))
        })
    }

    /// The connection, opened anew when it was lost (never inside a batch).
    fn sql(&mut self, op: Op) -> Result<Sql<'_>, StoreError> {
        let lost = self.client.as_ref().is_none_or(Client::is_closed);
        if lost {
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

    fn connection_lost(&self) -> bool {
        self.client.as_ref().is_none_or(Client::is_closed)
    }

    pub fn begin_batch(&mut self) -> Result<(), StoreError> {
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

    pub fn commit_batch(&mut self) -> Result<(), StoreError> {
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

    pub fn rollback_batch(&mut self) -> Result<(), StoreError> {
        let was = self.batch;
        self.batch = false;
        if !was || self.connection_lost() {
            return Ok(());
        }
        self.sql(Op::RollbackBatch)?
            .simple(Op::RollbackBatch, "ROLLBACK")
    }

    /// Runs `apply` inside a savepoint (in a batch) or a transaction of its own: all of
    /// its writes or none of them.
    pub(crate) fn atomic<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Sql<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let batch = self.batch;
        let mut sql = self.sql(op)?;
        sql.simple(op, if batch { "SAVEPOINT store_op" } else { "BEGIN" })?;
        let result = apply(&mut sql).and_then(|value| {
            sql.simple(op, if batch { "RELEASE store_op" } else { "COMMIT" })?;
            Ok(value)
        });
        if result.is_err() {
            let undo = if batch {
                "ROLLBACK TO store_op; RELEASE store_op"
            } else {
                "ROLLBACK"
            };
            let _ = sql.simple(op, undo);
        }
        match result {
            Err(_) if batch && self.connection_lost() => Err(StoreError::BatchLost { op }),
            other => other,
        }
    }

    pub fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        let op = Op::ReadMeta;
        self.atomic(op, |sql| {
            let row = sql.opt(op, "SELECT value FROM meta WHERE key = $1", &[&key])?;
            row.map(|row| col(op, &row, 0)).transpose()
        })
    }

    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        let op = Op::WriteMeta;
        self.atomic(op, |sql| {
            sql.exec(
                op,
                "INSERT INTO meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&key, &value],
            )
            .map(|_| ())
        })
    }

    pub fn insert_meta_if_absent(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        let op = Op::WriteMeta;
        self.atomic(op, |sql| {
            sql.exec(
                op,
                "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &value],
            )
            .map(|_| ())
        })
    }

    pub fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> {
        let op = Op::RecordEvent;
        let run = event
            .run
            .map(|run| super::store::to_db(op, "run id", run))
            .transpose()?;
        let uid = event.uid.map(i64::from);
        self.atomic(op, |sql| {
            let row = sql.rows(
                op,
                "INSERT INTO events (at, kind, job, run_id, machine, message, uid)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                &[
                    &event.at,
                    &event.kind,
                    &event.job,
                    &run,
                    &event.machine,
                    &event.message,
                    &uid,
                ],
            )?;
            let id: i64 = match row.first() {
                Some(row) => col(op, row, 0)?,
                None => 0,
            };
            super::store::from_db(op, "events.id", id)
        })
    }

    pub fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        use super::store::{from_db, to_db};
        let op = Op::ReadEvents;
        let mut q = PgSelect::new(
            "SELECT id, at, kind, job, run_id, machine, message, uid FROM events".to_string(),
        );
        if let Some(job) = &filter.job {
            q.and("job =", job.clone());
        }
        if let Some(run) = filter.run {
            q.and("run_id =", to_db(op, "run id", run)?);
        }
        if let Some(kind) = &filter.kind {
            q.and("kind =", kind.clone());
        }
        if let Some(since) = filter.since {
            q.and("at >=", since);
        }
        if let Some(before) = filter.before_id {
            q.and("id <", to_db(op, "event id", before)?);
        }
        q.sql.push_str(" ORDER BY id DESC");
        if let Some(limit) = filter.limit {
            q.sql
                .push_str(&format!(" LIMIT {}", to_db(op, "limit", limit as u64)?));
        }
        self.atomic(op, |sql| {
            let rows = sql.rows_uncached(op, &q.sql, &q.params())?;
            let mut events = Vec::with_capacity(rows.len());
            for row in &rows {
                let run: Option<i64> = col(op, row, 4)?;
                let uid: Option<i64> = col(op, row, 7)?;
                events.push(EventRecord {
                    id: from_db(op, "events.id", col(op, row, 0)?)?,
                    event: NewEvent {
                        at: col(op, row, 1)?,
                        kind: col(op, row, 2)?,
                        job: col(op, row, 3)?,
                        run: run
                            .map(|run| from_db(op, "events.run_id", run))
                            .transpose()?,
                        machine: col(op, row, 5)?,
                        message: col(op, row, 6)?,
                        uid: uid.and_then(|uid| u32::try_from(uid).ok()),
                    },
                });
            }
            Ok(events)
        })
    }

    /// Deletes events recorded before `older_than`; returns how many.
    pub fn prune_events(&mut self, older_than: Millis) -> Result<u64, StoreError> {
        let op = Op::PruneEvents;
        self.atomic(op, |sql| {
            sql.exec(op, "DELETE FROM events WHERE at < $1", &[&older_than])
        })
    }

    pub fn export_backlog(&mut self) -> Result<i64, StoreError> {
        let op = Op::ReadDeliveries;
        self.atomic(op, |sql| {
            let row = sql.opt(
                op,
                "SELECT count(*) FROM deliveries WHERE state = 'pending' AND channel = 'export'",
                &[],
            )?;
            row.map(|row| col(op, &row, 0))
                .transpose()
                .map(Option::unwrap_or_default)
        })
    }
}

#[cfg(test)]
mod tests;
