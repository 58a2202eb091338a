//! The storage layer of the `db` role: one SQLite connection, owned by the single thread
//! of the `db` process, and the operations the `db` loop applies to it.
//!
//! Outline:
//! 1. [`Store::open`] creates or migrates the file (see `schema`); [`Store::check`] is the
//!    read-only check for `saltpeter-cleanup`.
//! 2. The loop groups requests in a batch: [`Store::begin_batch`], any number of
//!    operations, [`Store::commit_batch`]; only after the commit does it acknowledge
//!    output to wrappers. Every operation also works outside a batch (it then commits on
//!    its own).
//! 3. Each write operation runs inside a savepoint, so one that fails half-way leaves no
//!    trace while the rest of the batch stays intact.
//!
//! Operations live next to their data: runs and targets in `runs`, output in `output`,
//! events and meta here. Instants are `i64` unix milliseconds; states are stored as their
//! text names from `wire::records`.
//!
//! Errors: [`StoreError::DiskFull`] is distinct so the loop can report it and keep its
//! queued requests. SQLite may roll a whole transaction back on such an error; the store
//! then refuses further operations in that batch with [`StoreError::BatchLost`] until the
//! loop calls [`Store::rollback_batch`] and applies the batch's requests again.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

pub use super::errors::{Op, StoreError};
pub(crate) use super::errors::{from_db, parse_name, sql_error, to_db};
use super::schema;

/// A SELECT whose WHERE clause grows with the filter's set fields, each value bound as a
/// parameter (never spliced into the text).
pub(super) struct Select {
    pub sql: String,
    pub args: Vec<rusqlite::types::Value>,
}

impl Select {
    /// `head` is the statement up to its WHERE clause.
    pub fn new(head: String) -> Select {
        Select {
            sql: format!("{head} WHERE 1 = 1"),
            args: Vec::new(),
        }
    }

    /// `AND clause ?N`, with `value` as parameter N.
    pub fn and(&mut self, clause: &str, value: rusqlite::types::Value) {
        self.args.push(value);
        self.sql
            .push_str(&format!(" AND {clause} ?{}", self.args.len()));
    }
}
use crate::wire::db::{EventFilter, EventRecord, NewEvent};
use crate::wire::records::Millis;

/// Prepared statements kept; above the number of distinct statements the store runs
/// (filters of `list_runs`/`list_events` build a few variants each).
const STATEMENT_CACHE: usize = 128;

/// The SQLite database of the `db` role.
/// Create the database file 0600 (or take group and world access away from an existing
/// one) before sqlite opens it: it holds job output, and sqlite gives its `-wal` and
/// `-shm` files the same permissions as the database.
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = path.to_string_lossy();
    if name == ":memory:" || name.starts_with("file:") || name.is_empty() {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

pub struct Store {
    pub(crate) conn: Connection,
    path: PathBuf,
    /// True between `begin_batch` and `commit_batch`/`rollback_batch`.
    batch: bool,
    /// Output chunks are written compressed when that pays (`output_compression`).
    pub(crate) compress_output: bool,
}

impl Store {
    /// Opens (creating if missing) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        private_file(path).map_err(|source| StoreError::Private {
            path: path.to_path_buf(),
            source,
        })?;
        let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        schema::prepare(&mut conn, path)?;
        // Every statement of the store stays prepared (the default cache holds 16).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            batch: false,
            compress_output: true,
        })
    }

    /// Read-only integrity and version check (for `saltpeter-cleanup`); never writes.
    pub fn check(path: &Path) -> Result<schema::CheckReport, StoreError> {
        schema::check(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True while a batch is open and still intact.
    pub fn in_batch(&self) -> bool {
        self.batch && !self.conn.is_autocommit()
    }

    /// Opens a batch: the following operations become durable together at
    /// [`Store::commit_batch`]. Takes the write lock at once (`BEGIN IMMEDIATE`).
    pub fn begin_batch(&mut self) -> Result<(), StoreError> {
        if self.batch {
            return Err(StoreError::Invalid {
                op: Op::BeginBatch,
                reason: "a batch is already open".into(),
            });
        }
        self.exec(Op::BeginBatch, "BEGIN IMMEDIATE")?;
        self.batch = true;
        Ok(())
    }

    /// Commits the open batch. On any error nothing of the batch is durable and the
    /// batch is closed; the caller keeps its requests and applies them again later.
    pub fn commit_batch(&mut self) -> Result<(), StoreError> {
        if !self.batch {
            return Err(StoreError::Invalid {
                op: Op::CommitBatch,
                reason: "no batch is open".into(),
            });
        }
        self.batch = false;
        if self.conn.is_autocommit() {
            return Err(StoreError::BatchLost {
                op: Op::CommitBatch,
            });
        }
        let committed = self.exec(Op::CommitBatch, "COMMIT");
        if committed.is_err() && !self.conn.is_autocommit() {
            // A failed COMMIT (disk full, busy) leaves the transaction open: end it so
            // the next batch starts clean.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        committed
    }

    /// Discards the open batch (also after [`StoreError::BatchLost`]); a no-op when none
    /// is open.
    pub fn rollback_batch(&mut self) -> Result<(), StoreError> {
        self.batch = false;
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.exec(Op::RollbackBatch, "ROLLBACK")
    }

    fn exec(&self, op: Op, sql: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| ())
            .map_err(sql_error(op))
    }

    /// Runs `apply` inside a savepoint: all of its writes or none of them.
    pub(crate) fn atomic<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.batch && self.conn.is_autocommit() {
            return Err(StoreError::BatchLost { op });
        }
        self.exec(op, "SAVEPOINT store_op")?;
        let result = apply(&self.conn).and_then(|value| {
            self.exec(op, "RELEASE store_op")?;
            Ok(value)
        });
        if result.is_err() {
            // Undo this operation only; if SQLite already rolled the whole transaction
            // back these fail, and `atomic`/`commit_batch` report the lost batch.
            let _ = self.exec(op, "ROLLBACK TO store_op");
            let _ = self.exec(op, "RELEASE store_op");
            if !self.batch && !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
        }
        result
    }

    /// Reads a persisted setting (e.g. maintenance state).
    pub fn get_meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")
            .map_err(sql_error(Op::ReadMeta))?;
        stmt.query_row([key], |row| row.get(0))
            .optional()
            .map_err(sql_error(Op::ReadMeta))
    }

    /// Persists a setting, replacing any previous value.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.atomic(Op::WriteMeta, |conn| {
            conn.prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .and_then(|mut stmt| stmt.execute([key, value]))
            .map_err(sql_error(Op::WriteMeta))?;
            Ok(())
        })
    }

    /// Removes a setting; returns whether it existed.
    pub fn delete_meta(&mut self, key: &str) -> Result<bool, StoreError> {
        self.atomic(Op::WriteMeta, |conn| {
            conn.prepare_cached("DELETE FROM meta WHERE key = ?1")
                .and_then(|mut stmt| stmt.execute([key]))
                .map(|n| n > 0)
                .map_err(sql_error(Op::WriteMeta))
        })
    }

    /// Appends an audit event; returns its id.
    pub fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> {
        let run = event
            .run
            .map(|run| to_db(Op::RecordEvent, "run id", run))
            .transpose()?;
        self.atomic(Op::RecordEvent, |conn| {
            conn.prepare_cached(
                "INSERT INTO events (at, kind, job, run_id, machine, message, uid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    event.at,
                    event.kind,
                    event.job,
                    run,
                    event.machine,
                    event.message,
                    event.uid
                ])
            })
            .map_err(sql_error(Op::RecordEvent))?;
            from_db(Op::RecordEvent, "events.id", conn.last_insert_rowid())
        })
    }

    /// Events matching `filter`, newest first.
    pub fn list_events(&self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        let op = Op::ReadEvents;
        let mut q = Select::new(
            "SELECT id, at, kind, job, run_id, machine, message, uid FROM events".to_string(),
        );
        if let Some(job) = &filter.job {
            q.and("job =", job.clone().into());
        }
        if let Some(run) = filter.run {
            q.and("run_id =", to_db(op, "run id", run)?.into());
        }
        if let Some(kind) = &filter.kind {
            q.and("kind =", kind.clone().into());
        }
        if let Some(since) = filter.since {
            q.and("at >=", since.into());
        }
        if let Some(before) = filter.before_id {
            q.and("id <", to_db(op, "event id", before)?.into());
        }
        q.sql.push_str(" ORDER BY id DESC");
        if let Some(limit) = filter.limit {
            q.sql
                .push_str(&format!(" LIMIT {}", to_db(op, "limit", limit as u64)?));
        }
        let mut stmt = self.conn.prepare_cached(&q.sql).map_err(sql_error(op))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(q.args), |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Option<i64>>(4)?,
                    NewEvent {
                        at: row.get(1)?,
                        kind: row.get(2)?,
                        job: row.get(3)?,
                        run: None,
                        machine: row.get(5)?,
                        message: row.get(6)?,
                        uid: row.get(7)?,
                    },
                ))
            })
            .map_err(sql_error(op))?;
        let mut events = Vec::new();
        for row in rows {
            let (id, run, mut event) = row.map_err(sql_error(op))?;
            event.run = run
                .map(|run| from_db(op, "events.run_id", run))
                .transpose()?;
            events.push(EventRecord {
                id: from_db(op, "events.id", id)?,
                event,
            });
        }
        Ok(events)
    }

    /// Deletes events recorded before `older_than`; returns how many.
    pub fn prune_events(&mut self, older_than: Millis) -> Result<u64, StoreError> {
        self.atomic(Op::PruneEvents, |conn| {
            conn.prepare_cached("DELETE FROM events WHERE at < ?1")
                .and_then(|mut stmt| stmt.execute([older_than]))
                .map(|n| n as u64)
                .map_err(sql_error(Op::PruneEvents))
        })
    }

    /// Returns up to `max_pages` free pages to the file system (after a prune).
    pub fn reclaim_space(&mut self, max_pages: u32) -> Result<(), StoreError> {
        self.atomic(Op::ReclaimSpace, |conn| {
            // incremental_vacuum returns no rows, but must be stepped to do its work.
            let mut stmt = conn
                .prepare(&format!("PRAGMA incremental_vacuum({max_pages})"))
                .map_err(sql_error(Op::ReclaimSpace))?;
            let mut rows = stmt.query([]).map_err(sql_error(Op::ReclaimSpace))?;
            while rows.next().map_err(sql_error(Op::ReclaimSpace))?.is_some() {}
            Ok(())
        })
    }
}

impl Store {
    /// Cap the database file at about `bytes` (0: no cap). Writes beyond it fail with
    /// `DiskFull`, exactly as on a full file system.
    pub fn set_max_size(&mut self, bytes: u64) -> Result<(), StoreError> {
        let page: i64 = self
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(sql_error(Op::Check))?;
        let pages = if bytes == 0 {
            i64::from(u32::MAX) * 4 // SQLite's own ceiling
        } else {
            (bytes as i64 / page.max(512)).max(1)
        };
        self.conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(sql_error(Op::Check))
    }

    /// Fold the write-ahead log into the database file and truncate it, so pages freed by
    /// pruning and `reclaim_space` leave the disk. Only outside a batch.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(sql_error(Op::ReclaimSpace))
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
pub(crate) mod tests;
