//! Several masters on one database (docs/ha.md, "Several masters, one database"): the
//! SQL of the three tables that let servers drive each other's salt-master (schema
//! version 10), the same on both backends (only PostgreSQL is ever shared, but SQLite
//! has the tables so one suite tests the rules on both).
//!
//! 1. `salt_calls`: a row per Salt call one server asks of another. The asking server
//!    writes it `pending` ([`send_salt_call`]); the serving server takes its pending rows
//!    (`serving`, [`take_salt_calls`]) and writes the reply (`answered`,
//!    [`answer_salt_call`]); the asking server takes its answered rows and deletes them
//!    ([`take_salt_replies`]). Rows nobody finishes (a server gone) are deleted after
//!    [`STALE_MS`] ([`expire_salt_calls`]).
//! 2. `salt_servers`: each server driving a master writes its name and clock every few
//!    seconds ([`salt_heartbeat`]); the others seen within [`ALIVE_MS`] are its peers.
//! 3. `minion_keys`: the accepted keys of each server's master, as PEM text
//!    ([`publish_minion_keys`] writes the changes of one scan; [`minion_keys_of_others`]
//!    reads the others'; [`minion_keys_stamp`] tells cheaply whether they changed).

use std::collections::BTreeMap;

use super::errors::{Op, StoreError};
use super::sql::{Db, params};

/// A server whose heartbeat is older than this is not alive.
pub(crate) const ALIVE_MS: i64 = 15_000;
/// A `salt_calls` row older than this is deleted, whatever its state.
pub(crate) const STALE_MS: i64 = 3_600_000;
/// Rows taken in one poll at most (the rest wait for the next one).
pub(crate) const TAKE_MAX: i64 = 64;
/// Largest request or reply stored (bytes); a launch of 100k minions stays well below.
pub(crate) const MAX_CALL_BYTES: usize = 16 << 20;

fn too_large(op: Op, what: &str, len: usize) -> StoreError {
    StoreError::Invalid {
        op,
        reason: format!("a salt call {what} of {len} bytes is over the {MAX_CALL_BYTES} stored"),
    }
}

/// Writes a pending call from `from` to `to`; its row id.
pub(super) fn send_salt_call<D: Db>(
    db: &mut D,
    from: &str,
    to: &str,
    request: &[u8],
    now: i64,
) -> Result<i64, StoreError> {
    let op = Op::SaltCalls;
    if request.len() > MAX_CALL_BYTES {
        return Err(too_large(op, "request", request.len()));
    }
    db.atomic(op, |db| {
        let row = db.row(
            op,
            "INSERT INTO salt_calls (from_server, to_server, request, state, created_at)
             VALUES (?1, ?2, ?3, 'pending', ?4) RETURNING id",
            params![from, to, request, now],
        )?;
        match row {
            Some(row) => row.get(op, 0),
            None => Err(StoreError::Invalid {
                op,
                reason: "the insert returned no id".to_string(),
            }),
        }
    })
}

/// Takes (marks `serving`) up to [`TAKE_MAX`] pending calls to `me`: (id, from, request).
pub(super) fn take_salt_calls<D: Db>(
    db: &mut D,
    me: &str,
) -> Result<Vec<(i64, String, Vec<u8>)>, StoreError> {
    let op = Op::SaltCalls;
    let lock = db.dialect().lock_taken();
    db.atomic(op, |db| {
        let rows = db.rows(
            op,
            &format!(
                "SELECT id, from_server, request FROM salt_calls
                 WHERE to_server = ?1 AND state = 'pending' ORDER BY id LIMIT ?2{lock}"
            ),
            params![me, TAKE_MAX],
        )?;
        let mut taken = Vec::with_capacity(rows.len());
        for mut row in rows {
            let id: i64 = row.get(op, 0)?;
            let from: String = row.get(op, 1)?;
            let request = row.take_blob(op, 2)?;
            db.exec(
                op,
                "UPDATE salt_calls SET state = 'serving' WHERE id = ?1",
                params![id],
            )?;
            taken.push((id, from, request));
        }
        Ok(taken)
    })
}

/// Writes the reply of call `id`; false when the row is gone (expired, or its asker
/// gave up and it was deleted).
pub(super) fn answer_salt_call<D: Db>(
    db: &mut D,
    id: i64,
    reply: &[u8],
) -> Result<bool, StoreError> {
    let op = Op::SaltCalls;
    if reply.len() > MAX_CALL_BYTES {
        return Err(too_large(op, "reply", reply.len()));
    }
    db.atomic(op, |db| {
        db.exec(
            op,
            "UPDATE salt_calls SET reply = ?2, state = 'answered' WHERE id = ?1",
            params![id, reply],
        )
        .map(|n| n > 0)
    })
}

/// Takes (deletes) up to [`TAKE_MAX`] answered calls `me` asked: (id, reply).
pub(super) fn take_salt_replies<D: Db>(
    db: &mut D,
    me: &str,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let op = Op::SaltCalls;
    let lock = db.dialect().lock_taken();
    db.atomic(op, |db| {
        let rows = db.rows(
            op,
            &format!(
                "SELECT id, reply FROM salt_calls
                 WHERE from_server = ?1 AND state = 'answered' ORDER BY id LIMIT ?2{lock}"
            ),
            params![me, TAKE_MAX],
        )?;
        let mut taken = Vec::with_capacity(rows.len());
        for mut row in rows {
            let id: i64 = row.get(op, 0)?;
            let reply = row.take_blob(op, 1)?;
            db.exec(op, "DELETE FROM salt_calls WHERE id = ?1", params![id])?;
            taken.push((id, reply));
        }
        Ok(taken)
    })
}

/// Deletes the rows older than [`STALE_MS`]; how many.
pub(super) fn expire_salt_calls<D: Db>(db: &mut D, now: i64) -> Result<u64, StoreError> {
    let op = Op::SaltCalls;
    db.atomic(op, |db| {
        db.exec(
            op,
            "DELETE FROM salt_calls WHERE created_at < ?1",
            params![now - STALE_MS],
        )
    })
}

/// Writes `me`'s heartbeat; the other servers alive at `now`, by name.
pub(super) fn salt_heartbeat<D: Db>(
    db: &mut D,
    me: &str,
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let op = Op::SaltServers;
    db.atomic(op, |db| {
        db.exec(
            op,
            "INSERT INTO salt_servers (name, seen_at) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at",
            params![me, now],
        )?;
        db.rows(
            op,
            "SELECT name FROM salt_servers WHERE name <> ?1 AND seen_at >= ?2 ORDER BY name",
            params![me, now - ALIVE_MS],
        )?
        .iter()
        .map(|row| row.get(op, 0))
        .collect()
    })
}

/// Brings `me`'s rows of `minion_keys` from `before` (what the last scan published;
/// `None`: nothing known, every row of `me` is replaced) to `now_keys` (minion -> PEM).
/// Returns how many rows were written and deleted.
pub(super) fn publish_minion_keys<D: Db>(
    db: &mut D,
    me: &str,
    before: Option<&BTreeMap<String, String>>,
    now_keys: &BTreeMap<String, String>,
    now: i64,
) -> Result<(usize, usize), StoreError> {
    let op = Op::MinionKeys;
    db.atomic(op, |db| {
        let mut deleted = 0;
        let empty = BTreeMap::new();
        let before = match before {
            Some(before) => before,
            None => {
                deleted +=
                    db.exec(op, "DELETE FROM minion_keys WHERE server = ?1", params![me])? as usize;
                &empty
            }
        };
        for minion in before.keys().filter(|m| !now_keys.contains_key(*m)) {
            deleted += db.exec(
                op,
                "DELETE FROM minion_keys WHERE server = ?1 AND minion = ?2",
                params![me, minion],
            )? as usize;
        }
        let mut written = 0;
        for (minion, key) in now_keys {
            if before.get(minion) == Some(key) {
                continue;
            }
            db.exec(
                op,
                "INSERT INTO minion_keys (server, minion, key, seen_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (server, minion) DO UPDATE
                 SET key = excluded.key, seen_at = excluded.seen_at",
                params![me, minion, key, now],
            )?;
            written += 1;
        }
        Ok((written, deleted))
    })
}

/// How many keys the other servers published and the latest write: a change of either
/// means [`minion_keys_of_others`] is worth reading again.
pub(super) fn minion_keys_stamp<D: Db>(db: &mut D, me: &str) -> Result<(i64, i64), StoreError> {
    let op = Op::MinionKeys;
    db.read(op, |db| {
        let row = db.row(
            op,
            "SELECT CAST(count(*) AS BIGINT), CAST(coalesce(max(seen_at), 0) AS BIGINT)
             FROM minion_keys WHERE server <> ?1",
            params![me],
        )?;
        match row {
            Some(row) => Ok((row.get(op, 0)?, row.get(op, 1)?)),
            None => Ok((0, 0)),
        }
    })
}

/// The keys of the other servers: (server, minion, PEM), by server then minion.
pub(super) fn minion_keys_of_others<D: Db>(
    db: &mut D,
    me: &str,
) -> Result<Vec<(String, String, String)>, StoreError> {
    let op = Op::MinionKeys;
    db.read(op, |db| {
        db.rows(
            op,
            "SELECT server, minion, key FROM minion_keys WHERE server <> ?1
             ORDER BY server, minion",
            params![me],
        )?
        .iter()
        .map(|row| Ok((row.get(op, 0)?, row.get(op, 1)?, row.get(op, 2)?)))
        .collect()
    })
}
