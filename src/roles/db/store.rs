//! The SQLite backend of the `db` role: one connection, owned by the single thread of
//! the `db` process, with its batches and its side of the shared SQL (`sql::Db`).
//!
//! Outline:
//! 1. [`Store::open`] creates or migrates the file (see `schema`); [`Store::check`] is the
//!    read-only check for `saltpeter-cleanup`.
//! 2. The loop groups requests in a batch: [`Storage::begin_batch`], any number of
//!    operations, [`Storage::commit_batch`]; only after the commit does it acknowledge
//!    output to wrappers. Every operation also works outside a batch (it then commits on
//!    its own).
//! 3. Each write operation runs inside a savepoint, so one that fails half-way leaves no
//!    trace while the rest of the batch stays intact.
//!
//! The operations are the shared ones (`storage::Operations`): runs and targets in
//! `runs`, output in `output`, events and meta in `events`, ... Instants are `i64` unix milliseconds; states are stored as their
//! text names from `wire::records`.
//!
//! Errors: [`StoreError::DiskFull`] is distinct so the loop can report it and keep its
//! queued requests. SQLite may roll a whole transaction back on such an error; the store
//! then refuses further operations in that batch with [`StoreError::BatchLost`] until the
//! loop calls [`Storage::rollback_batch`] and applies the batch's requests again.

use std::path::Path;

use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};

pub(crate) use super::errors::sql_error;
pub(crate) use super::errors::{Op, StoreError};
use super::schema;
use super::sql::{Db, Dialect, Row, Value};
use super::storage::Storage;

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

pub(crate) struct Store {
    pub(crate) conn: Connection,
    /// True between `begin_batch` and `commit_batch`/`rollback_batch`.
    batch: bool,
    /// Output chunks are written compressed when that pays (`output_compression`).
    pub(crate) compress_output: bool,
}

impl Store {
    /// Opens (creating if missing) and migrates the database at `path`.
    pub(crate) fn open(path: &Path) -> Result<Store, StoreError> {
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
            batch: false,
            compress_output: true,
        })
    }

    /// Read-only integrity and version check (for `saltpeter-cleanup`); never writes.
    pub(crate) fn check(path: &Path) -> Result<schema::CheckReport, StoreError> {
        schema::check(path)
    }

    #[cfg(test)]
    /// True while a batch is open and still intact.
    pub(crate) fn in_batch(&self) -> bool {
        self.batch && !self.conn.is_autocommit()
    }

    fn simple(&self, op: Op, sql: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| ())
            .map_err(sql_error(op))
    }

    /// Returns up to `max_pages` free pages to the file system (after a prune).
    pub(crate) fn reclaim_space(&mut self, max_pages: u32) -> Result<(), StoreError> {
        self.atomic(Op::ReclaimSpace, |store| {
            // incremental_vacuum returns no rows, but must be stepped to do its work.
            let mut stmt = store
                .conn
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
    pub(crate) fn set_max_size(&mut self, bytes: u64) -> Result<(), StoreError> {
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
    pub(crate) fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(sql_error(Op::ReclaimSpace))
    }
}

impl Storage for Store {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    /// Opens a batch: the following operations become durable together at
    /// [`Storage::commit_batch`]. Takes the write lock at once (`BEGIN IMMEDIATE`).
    fn begin_batch(&mut self) -> Result<(), StoreError> {
        if self.batch {
            return Err(StoreError::Invalid {
                op: Op::BeginBatch,
                reason: "a batch is already open".into(),
            });
        }
        self.simple(Op::BeginBatch, "BEGIN IMMEDIATE")?;
        self.batch = true;
        Ok(())
    }

    /// Commits the open batch. On any error nothing of the batch is durable and the
    /// batch is closed; the caller keeps its requests and applies them again later.
    fn commit_batch(&mut self) -> Result<(), StoreError> {
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
        let committed = self.simple(Op::CommitBatch, "COMMIT");
        if committed.is_err() && !self.conn.is_autocommit() {
            // A failed COMMIT (disk full, busy) leaves the transaction open: end it so
            // the next batch starts clean.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        committed
    }

    /// Discards the open batch (also after [`StoreError::BatchLost`]); a no-op when none
    /// is open.
    fn rollback_batch(&mut self) -> Result<(), StoreError> {
        self.batch = false;
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.simple(Op::RollbackBatch, "ROLLBACK")
    }

    fn reclaim_after_prune(&mut self) -> Result<(), StoreError> {
        // Outside any transaction: give freed pages back, then shrink the log.
        self.reclaim_space(10_000).and_then(|()| self.checkpoint())
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Integer(*v),
            // A flag is stored as 0/1, as rusqlite stores a `bool`.
            Value::Bool(v) => ValueRef::Integer(i64::from(*v)),
            Value::Text(v) => ValueRef::Text(v.as_bytes()),
            Value::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

/// The `n` columns of a SQLite row, owned.
fn owned_row(row: &rusqlite::Row<'_>, n: usize) -> rusqlite::Result<Row> {
    let mut values = Vec::with_capacity(n);
    for idx in 0..n {
        values.push(match row.get_ref(idx)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(v) => Value::Int(v),
            ValueRef::Text(_) => Value::Text(row.get::<_, String>(idx)?.into()),
            ValueRef::Blob(v) => Value::Blob(v.to_vec().into()),
            ValueRef::Real(_) => {
                return Err(rusqlite::Error::InvalidColumnType(
                    idx,
                    String::new(),
                    rusqlite::types::Type::Real,
                ));
            }
        });
    }
    Ok(Row(values))
}

impl Db for Store {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn compress_output(&self) -> bool {
        self.compress_output
    }

    fn exec(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<u64, StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(params)))
            .map(|n| n as u64)
            .map_err(sql_error(op))
    }

    fn rows(&mut self, op: Op, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(sql_error(op))?;
        let n = stmt.column_count();
        stmt.query_map(rusqlite::params_from_iter(params), |row| owned_row(row, n))
            .and_then(|rows| rows.collect())
            .map_err(sql_error(op))
    }

    /// A savepoint: the rest of an open batch stays intact when `apply` fails. SQLite
    /// may roll a whole transaction back on some errors (disk full): the batch is then
    /// lost, and `atomic`/`commit_batch` say so.
    fn atomic<T>(
        &mut self,
        op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.batch && self.conn.is_autocommit() {
            return Err(StoreError::BatchLost { op });
        }
        self.simple(op, "SAVEPOINT store_op")?;
        let result = apply(self).and_then(|value| {
            self.simple(op, "RELEASE store_op")?;
            Ok(value)
        });
        if result.is_err() {
            // Undo this operation only; if SQLite already rolled the whole transaction
            // back these fail, and `atomic`/`commit_batch` report the lost batch.
            let _ = self.simple(op, "ROLLBACK TO store_op");
            let _ = self.simple(op, "RELEASE store_op");
            if !self.batch && !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
        }
        result
    }

    fn read<T>(
        &mut self,
        _op: Op,
        apply: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        apply(self)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
pub(crate) mod tests;
