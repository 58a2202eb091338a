//! The database file of the `db` role: connection settings, versioned schema migrations
//! and the read-only check run by `saltpeter-cleanup`.
//!
//! Outline of [`prepare`] (called by `Store::open`):
//! 1. connection settings: busy timeout, incremental auto-vacuum (only takes effect on a
//!    new, empty file), WAL journal, `synchronous=NORMAL` (a crash may lose the last
//!    commits but never corrupts; the `db` loop acknowledges output only after commit),
//!    foreign keys;
//! 2. refuse a file that is not ours (foreign `application_id`) or that was written by a
//!    newer build (`user_version` above [`SCHEMA_VERSION`]);
//! 3. apply the missing entries of [`MIGRATIONS`] in one transaction and set
//!    `user_version`.
//!
//! Migrations are append-only: a released entry is never edited, a change is a new entry.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::errors::{Op, StoreError, sql_error};

/// `PRAGMA application_id` of a Saltpeter database ("SPDB").
pub(crate) const APPLICATION_ID: i32 = 0x5350_4442;

/// How long a statement waits for a lock held by another connection (e.g. a `sqlite3`
/// shell or `saltpeter-cleanup`) before failing with "database is locked".
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Version 9: how the job's resource limits were applied on a target, as its wrapper
/// said (`targets.limits`; NULL for a job without limits).
const MIGRATION_9: &str = "
ALTER TABLE targets ADD COLUMN limits TEXT;
";

/// Ordered schema migrations; entry `i` takes the database from version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    MIGRATION_1,
    MIGRATION_2,
    MIGRATION_3,
    MIGRATION_4,
    MIGRATION_5,
    MIGRATION_6,
    MIGRATION_7,
    MIGRATION_8,
    MIGRATION_9,
    MIGRATION_10,
];

/// Version 10: several masters on one database (docs/ha.md, "Several masters, one
/// database"): the server whose master launched each target (`targets.server`, NULL for
/// a lone server), Salt calls one server asks another to make (`salt_calls`), the
/// servers that drive a master (`salt_servers`) and the minion keys each one's master
/// accepted (`minion_keys`). Only PostgreSQL fills the last three; SQLite has them so
/// both schemas stay the same.
const MIGRATION_10: &str = "
ALTER TABLE targets ADD COLUMN server TEXT;
CREATE TABLE salt_calls (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    from_server TEXT NOT NULL,
    to_server   TEXT NOT NULL,
    request     BLOB NOT NULL,
    reply       BLOB,
    state       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX salt_calls_to ON salt_calls (to_server, state);
CREATE INDEX salt_calls_from ON salt_calls (from_server, state);
CREATE TABLE salt_servers (
    name    TEXT PRIMARY KEY,
    seen_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE minion_keys (
    server  TEXT NOT NULL,
    minion  TEXT NOT NULL,
    key     TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (server, minion)
) WITHOUT ROWID;
";

/// Schema version written by this build.
pub(crate) const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Version 7: a target suspended by an operator (its command stopped until resumed);
/// kept across restarts so a suspended run stays suspended.
const MIGRATION_7: &str = "
ALTER TABLE targets ADD COLUMN suspended INTEGER NOT NULL DEFAULT 0;
";

/// Version 8: output chunks may be stored compressed (`wire::compress`): `encoding` 0
/// plain (every older row), 1 zstd; `raw_len` the uncompressed length (NULL when plain).
const MIGRATION_8: &str = "
ALTER TABLE output_chunks ADD COLUMN encoding INTEGER NOT NULL DEFAULT 0;
ALTER TABLE output_chunks ADD COLUMN raw_len INTEGER;
";

/// Version 6: fleet state, which wrapper build each minion has at each path
/// (`wrappers.rs`); `seen` is when it was last seen or deployed (unix ms).
const MIGRATION_6: &str = "
CREATE TABLE minion_wrappers (
    minion TEXT NOT NULL,
    path   TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    seen   INTEGER NOT NULL,
    PRIMARY KEY (minion, path)
) WITHOUT ROWID;
";

/// Version 5: attempts of a target (`retries`): the attempt in effect, and the outcomes
/// of the earlier ones (`attempts.rs`).
const MIGRATION_5: &str = "
ALTER TABLE targets ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
CREATE TABLE target_attempts (
    run_id    INTEGER NOT NULL,
    machine   TEXT NOT NULL,
    attempt   INTEGER NOT NULL,
    reason    TEXT,
    exit_code INTEGER,
    started   INTEGER,
    ended     INTEGER,
    PRIMARY KEY (run_id, machine, attempt),
    FOREIGN KEY (run_id, machine) REFERENCES targets (run_id, machine) ON DELETE CASCADE
) WITHOUT ROWID;
";

/// Version 4: the notification outbox (`deliveries.rs`). `key` de-duplicates; `payload`
/// is the message as JSON, complete when queued (signed body, written mail), so no secret
/// is stored; `leased` marks a message handed to main and not yet answered.
const MIGRATION_4: &str = "
CREATE TABLE deliveries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    key          TEXT NOT NULL UNIQUE,
    job          TEXT,
    run_id       INTEGER,
    event        TEXT NOT NULL,
    channel      TEXT NOT NULL,
    destination  TEXT NOT NULL,
    payload      TEXT NOT NULL,
    state        TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created      INTEGER NOT NULL,
    next_attempt INTEGER NOT NULL,
    leased       INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    delivered    INTEGER
);
CREATE INDEX deliveries_due ON deliveries (next_attempt) WHERE state = 'pending';
CREATE INDEX deliveries_job ON deliveries (job, id);
";

/// Version 3: the uid of the operator behind an audit event (admin socket peer);
/// NULL for what the daemon did on its own.
const MIGRATION_3: &str = "
ALTER TABLE events ADD COLUMN uid INTEGER;
";

/// Version 2: what restart recovery needs of a wrapper session — the SHA-256 of its
/// resume key (never the key itself) and whether its single-use launch token was spent.
const MIGRATION_2: &str = "
ALTER TABLE targets ADD COLUMN resume_key_sha256 TEXT;
ALTER TABLE targets ADD COLUMN token_used INTEGER NOT NULL DEFAULT 0;
";

/// Version 1: runs, targets, output, events, meta.
///
/// Output bookkeeping per target lives in `targets` (`output_bytes` received in total,
/// `omitted_bytes` dropped by the output limit, `head_bytes`/`tail_bytes` kept,
/// `seq_contiguous` = every seq up to it was seen, `seq_pending` = rows in
/// `output_seen`, the seqs seen above `seq_contiguous`). `output_chunks.pos` is the
/// absolute byte offset of a chunk in the target's output (arrival order), so the head
/// occupies `[0, head_bytes)` and the tail ends at `output_bytes`.
const MIGRATION_1: &str = "
CREATE TABLE runs (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job      TEXT NOT NULL,
    slot     INTEGER,
    trigger  TEXT NOT NULL,
    state    TEXT NOT NULL,
    reason   TEXT,
    created  INTEGER NOT NULL,
    started  INTEGER,
    ended    INTEGER,
    UNIQUE (job, slot)
);
CREATE INDEX runs_job ON runs (job, id);
CREATE INDEX runs_created ON runs (created);
CREATE INDEX runs_in_flight ON runs (state) WHERE state IN ('queued', 'dispatching', 'running');

CREATE TABLE targets (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    machine         TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    exit_code       INTEGER,
    started         INTEGER,
    ended           INTEGER,
    last_seen       INTEGER,
    wrapper_version TEXT,
    output_bytes    INTEGER NOT NULL DEFAULT 0,
    omitted_bytes   INTEGER NOT NULL DEFAULT 0,
    head_bytes      INTEGER NOT NULL DEFAULT 0,
    tail_bytes      INTEGER NOT NULL DEFAULT 0,
    seq_contiguous  INTEGER NOT NULL DEFAULT 0,
    seq_pending     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, machine)
) WITHOUT ROWID;

CREATE TABLE output_chunks (
    run_id  INTEGER NOT NULL,
    machine TEXT NOT NULL,
    pos     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    stream  INTEGER NOT NULL,
    data    BLOB NOT NULL,
    PRIMARY KEY (run_id, machine, pos),
    FOREIGN KEY (run_id, machine) REFERENCES targets (run_id, machine) ON DELETE CASCADE
);

CREATE TABLE output_seen (
    run_id  INTEGER NOT NULL,
    machine TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (run_id, machine, seq),
    FOREIGN KEY (run_id, machine) REFERENCES targets (run_id, machine) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    job     TEXT,
    run_id  INTEGER,
    machine TEXT,
    message TEXT NOT NULL
);
CREATE INDEX events_job ON events (job, id);
CREATE INDEX events_run ON events (run_id, id);
CREATE INDEX events_at ON events (at);

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
";

/// Applies the connection settings and brings the schema to [`SCHEMA_VERSION`].
pub(super) fn prepare(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let settings = |source| StoreError::Settings {
        path: path.to_path_buf(),
        source,
    };
    conn.busy_timeout(BUSY_TIMEOUT).map_err(settings)?;
    // Only honoured before the first table exists; harmless afterwards.
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
        .map_err(settings)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(settings)?;
    if !mode.eq_ignore_ascii_case("wal") {
        log::warn!(
            "database {} stays in journal mode {mode}: WAL is not available here",
            path.display()
        );
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(settings)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(settings)?;
    // Output floods write and, through the tail window, soon delete 64 KiB chunks (16
    // overflow pages each): a 16 MiB page cache (2 MiB by default) still holds a chunk
    // when it is deleted, and checkpointing every 16 MiB of WAL (4 MiB by default) copies
    // a page rewritten meanwhile once. Measured on 100 wrappers x 4 MiB: db CPU -15 %.
    conn.pragma_update(None, "cache_size", -16384)
        .map_err(settings)?;
    conn.pragma_update(None, "wal_autocheckpoint", 4096)
        .map_err(settings)?;

    let found = identify(conn, path)?;
    if found.version < SCHEMA_VERSION {
        migrate(conn, path, found.version)?;
    }
    Ok(())
}

/// What a database file says about itself.
struct Identity {
    version: u32,
}

/// Reads `user_version` and `application_id`; refuses foreign and too-new files.
fn identify(conn: &Connection, path: &Path) -> Result<Identity, StoreError> {
    let read = |source| StoreError::Settings {
        path: path.to_path_buf(),
        source,
    };
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(read)?;
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(read)?;
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |row| row.get(0),
        )
        .map_err(read)?;
    let foreign = if app_id == 0 {
        // A file with tables but no Saltpeter version was made by something else.
        version == 0 && tables > 0
    } else {
        app_id != APPLICATION_ID
    };
    if foreign {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            application_id: app_id,
        });
    }
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Identity { version })
}

/// Applies migrations `from..SCHEMA_VERSION` in one transaction.
fn migrate(conn: &mut Connection, path: &Path, from: u32) -> Result<(), StoreError> {
    let failed = |version: u32| {
        let path = path.to_path_buf();
        move |source| StoreError::Migrate {
            path,
            version,
            source,
        }
    };
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(failed(from + 1))?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let version = index as u32 + 1;
        tx.execute_batch(sql).map_err(failed(version))?;
        tx.pragma_update(None, "user_version", version)
            .map_err(failed(version))?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(failed(SCHEMA_VERSION))?;
    tx.commit().map_err(failed(SCHEMA_VERSION))?;
    log::info!(
        "database {} migrated from schema version {from} to {SCHEMA_VERSION}",
        path.display()
    );
    Ok(())
}

/// Result of [`check`]: what `saltpeter-cleanup` reports before the daemon starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckReport {
    /// False when there is no database file yet (a first start); the rest is then empty.
    pub exists: bool,
    /// `user_version` of the file (0 for a file the daemon never migrated).
    pub schema_version: u32,
    /// True when the daemon will migrate the file at its next start.
    pub needs_migration: bool,
    /// Problems found by `PRAGMA quick_check` (empty when the file is sound).
    pub problems: Vec<String>,
    /// Runs in a non-final state: the daemon stopped while they were going, and `main`
    /// recovers them at start-up.
    pub runs_in_flight: u64,
}

impl CheckReport {
    pub(crate) fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Most problems `quick_check` lists before it stops.
const MAX_CHECK_PROBLEMS: u32 = 20;

/// Read-only check of a database file: version, integrity, runs left in flight.
///
/// Opens the file with `SQLITE_OPEN_READ_ONLY`, never migrates and never writes, so it
/// is safe to run from `saltpeter-cleanup` even next to a running daemon.
pub(crate) fn check(path: &Path) -> Result<CheckReport, StoreError> {
    if !path.exists() {
        return Ok(CheckReport {
            exists: false,
            schema_version: 0,
            needs_migration: false,
            problems: Vec::new(),
            runs_in_flight: 0,
        });
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql_error(Op::Check))?;
    let identity = identify(&conn, path)?;

    let mut problems = Vec::new();
    let mut stmt = conn
        .prepare(&format!("PRAGMA quick_check({MAX_CHECK_PROBLEMS})"))
        .map_err(sql_error(Op::Check))?;
    let mut rows = stmt.query([]).map_err(sql_error(Op::Check))?;
    while let Some(row) = rows.next().map_err(sql_error(Op::Check))? {
        let line: String = row.get(0).map_err(sql_error(Op::Check))?;
        if line != "ok" {
            problems.push(line);
        }
    }

    let runs_in_flight = if identity.version >= 1 {
        let count: i64 = conn
            .query_row(
                "SELECT count(*) FROM runs WHERE state IN ('queued', 'dispatching', 'running')",
                [],
                |row| row.get(0),
            )
            .map_err(sql_error(Op::Check))?;
        count.max(0) as u64
    } else {
        0
    };
    Ok(CheckReport {
        exists: true,
        schema_version: identity.version,
        needs_migration: identity.version < SCHEMA_VERSION,
        problems,
        runs_in_flight,
    })
}
