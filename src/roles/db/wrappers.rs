//! Fleet state: which `saltpeter-wrapper` build (path and SHA-256) each minion has, in
//! `minion_wrappers` (schema version 6). It outlives restarts and, on PostgreSQL, is
//! shared by every server of the database, so a build deployed or seen by one server is
//! known to the others.
//!
//! The rules, the same on both backends (one SQL for both, `sql.rs`):
//! 1. A row over [`MAX_MINION_BYTES`], [`MAX_PATH_BYTES`] or [`MAX_SHA256_BYTES`] fails
//!    its whole request (`Invalid`, nothing written): main bounds these already, so one
//!    over them is a bug to see, never a value to clip.
//! 2. Rows are upserted by (minion, path); a stored row seen later than the incoming one
//!    stays, so a report that arrives late (another server's, a slow batch) never undoes
//!    a newer one. Equal instants: the incoming row wins.
//! 3. A minion keeps its [`MAX_PATHS_PER_MINION`] most recently seen paths; older ones
//!    go (and are logged), so paths a configuration no longer uses cannot pile up.
//! 4. Listing is by minion then path, byte-wise on both (PostgreSQL's columns are
//!    `COLLATE "C"`, as SQLite compares text).

use std::collections::BTreeSet;

use super::errors::{Op, StoreError};
use super::sql::{Db, params};
use crate::wire::db::WrapperSeen;

/// Longest minion id stored (bytes); main's own bounds are well below.
pub(super) const MAX_MINION_BYTES: usize = 1024;
/// Longest wrapper path stored (bytes): Linux's `PATH_MAX`.
pub(super) const MAX_PATH_BYTES: usize = 4096;
/// Longest digest stored (bytes): a SHA-256 is 64 hex digits; room for a prefix.
pub(super) const MAX_SHA256_BYTES: usize = 128;
/// Paths remembered per minion, the most recently seen first.
pub(super) const MAX_PATHS_PER_MINION: usize = 16;

/// Rule 1: every row within the bounds, or the request fails naming the first one over.
pub(super) fn check_bounds(op: Op, rows: &[WrapperSeen]) -> Result<(), StoreError> {
    for row in rows {
        let over = [
            ("minion", row.minion.len(), MAX_MINION_BYTES),
            ("path", row.path.len(), MAX_PATH_BYTES),
            ("sha256", row.sha256.len(), MAX_SHA256_BYTES),
        ]
        .into_iter()
        .find(|(_, len, max)| len > max);
        if let Some((field, len, max)) = over {
            return Err(StoreError::Invalid {
                op,
                reason: format!(
                    "the wrapper {field} of minion {:?} is {len} bytes, over the {max} stored",
                    clipped_for_message(&row.minion)
                ),
            });
        }
    }
    Ok(())
}

/// A minion id short enough for an error message (the message only; nothing is stored).
fn clipped_for_message(minion: &str) -> &str {
    let mut end = minion.len().min(64);
    while !minion.is_char_boundary(end) {
        end -= 1;
    }
    &minion[..end]
}

/// The minions a request touches, once each (rule 3 is applied per minion).
pub(super) fn minions_of(rows: &[WrapperSeen]) -> BTreeSet<&str> {
    rows.iter().map(|row| row.minion.as_str()).collect()
}

/// Rule 3 said so: tell the operator which paths went.
pub(super) fn log_forgotten(minion: &str, forgotten: u64) {
    if forgotten > 0 {
        log::info!(
            "minion {minion}: forgot {forgotten} wrapper path(s) seen least recently \
             (at most {MAX_PATHS_PER_MINION} are kept per minion)"
        );
    }
}

/// [`MAX_PATHS_PER_MINION`] as a bound parameter.
pub(super) const KEEP_PATHS: i64 = MAX_PATHS_PER_MINION as i64;

/// Upserts each row by (minion, path), newer `seen` winning (rules 1–3). Two servers
/// recording the same (minion, path) at once serialise on the row (PostgreSQL): the
/// second upsert waits for the first's transaction, then compares `seen`.
pub(super) fn record_wrappers<D: Db>(db: &mut D, rows: &[WrapperSeen]) -> Result<(), StoreError> {
    let op = Op::WriteWrappers;
    check_bounds(op, rows)?;
    let forgotten = db.atomic(op, |db| {
        for row in rows {
            db.exec(
                op,
                "INSERT INTO minion_wrappers (minion, path, sha256, seen)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (minion, path) DO UPDATE
                 SET sha256 = excluded.sha256, seen = excluded.seen
                 WHERE excluded.seen >= minion_wrappers.seen",
                params![&row.minion, &row.path, &row.sha256, row.seen],
            )?;
        }
        let mut forgotten = Vec::new();
        for minion in minions_of(rows) {
            let n = db.exec(
                op,
                "DELETE FROM minion_wrappers WHERE minion = ?1 AND path NOT IN (
                     SELECT path FROM minion_wrappers WHERE minion = ?1
                     ORDER BY seen DESC, path LIMIT ?2)",
                params![minion, KEEP_PATHS],
            )?;
            forgotten.push((minion, n));
        }
        Ok(forgotten)
    })?;
    for (minion, n) in forgotten {
        log_forgotten(minion, n);
    }
    Ok(())
}

/// Deletes the row of (minion, path); whether there was one.
pub(super) fn forget_wrapper<D: Db>(
    db: &mut D,
    minion: &str,
    path: &str,
) -> Result<bool, StoreError> {
    let op = Op::WriteWrappers;
    db.atomic(op, |db| {
        db.exec(
            op,
            "DELETE FROM minion_wrappers WHERE minion = ?1 AND path = ?2",
            params![minion, path],
        )
        .map(|n| n > 0)
    })
}

/// Every row, by minion then path.
pub(super) fn wrappers<D: Db>(db: &mut D) -> Result<Vec<WrapperSeen>, StoreError> {
    let op = Op::ReadWrappers;
    db.read(op, |db| {
        db.rows(
            op,
            "SELECT minion, path, sha256, seen FROM minion_wrappers ORDER BY minion, path",
            &[],
        )?
        .iter()
        .map(|row| {
            Ok(WrapperSeen {
                minion: row.get(op, 0)?,
                path: row.get(op, 1)?,
                sha256: row.get(op, 2)?,
                seen: row.get(op, 3)?,
            })
        })
        .collect()
    })
}
