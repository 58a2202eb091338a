//! Settings (`meta`), the audit events and the outbox's export backlog: small operations
//! written once for both backends.

use super::errors::{Op, StoreError, from_db, to_db};
use super::sql::{Db, Select, params};
use crate::wire::db::{EventFilter, EventRecord, NewEvent};

/// Reads a persisted setting (e.g. maintenance state).
pub(crate) fn get_meta<D: Db>(db: &mut D, key: &str) -> Result<Option<String>, StoreError> {
    let op = Op::ReadMeta;
    db.read(op, |db| {
        let row = db.row(op, "SELECT value FROM meta WHERE key = ?1", params![key])?;
        row.map(|row| row.get(op, 0)).transpose()
    })
}

/// Persists a setting, replacing any previous value.
pub(crate) fn set_meta<D: Db>(db: &mut D, key: &str, value: &str) -> Result<(), StoreError> {
    let op = Op::WriteMeta;
    db.atomic(op, |db| {
        db.exec(
            op,
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )
        .map(|_| ())
    })
}

/// Writes a setting unless one is there already.
pub(crate) fn insert_meta_if_absent<D: Db>(
    db: &mut D,
    key: &str,
    value: &str,
) -> Result<(), StoreError> {
    let op = Op::WriteMeta;
    db.atomic(op, |db| {
        db.exec(
            op,
            "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
            params![key, value],
        )
        .map(|_| ())
    })
}

#[cfg(test)]
/// Removes a setting; returns whether it existed.
pub(crate) fn delete_meta<D: Db>(db: &mut D, key: &str) -> Result<bool, StoreError> {
    let op = Op::WriteMeta;
    db.atomic(op, |db| {
        db.exec(op, "DELETE FROM meta WHERE key = ?1", params![key])
            .map(|n| n > 0)
    })
}

/// Appends an audit event; returns its id.
pub(crate) fn record_event<D: Db>(db: &mut D, event: &NewEvent) -> Result<u64, StoreError> {
    let op = Op::RecordEvent;
    let run = event.run.map(|run| to_db(op, "run id", run)).transpose()?;
    db.atomic(op, |db| {
        let row = db.row(
            op,
            "INSERT INTO events (at, kind, job, run_id, machine, message, uid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
            params![
                event.at,
                &event.kind,
                &event.job,
                run,
                &event.machine,
                &event.message,
                event.uid
            ],
        )?;
        let id: i64 = match row {
            Some(row) => row.get(op, 0)?,
            None => 0,
        };
        from_db(op, "events.id", id)
    })
}

/// Events matching `filter`, newest first.
pub(crate) fn list_events<D: Db>(
    db: &mut D,
    filter: &EventFilter,
) -> Result<Vec<EventRecord>, StoreError> {
    let op = Op::ReadEvents;
    let mut q = Select::new(
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
    let rows = db.read(op, |db| db.rows_built(op, &q.sql, &q.args))?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let run: Option<i64> = row.get(op, 4)?;
        let uid: Option<i64> = row.get(op, 7)?;
        events.push(EventRecord {
            id: from_db(op, "events.id", row.get(op, 0)?)?,
            event: NewEvent {
                at: row.get(op, 1)?,
                kind: row.get(op, 2)?,
                job: row.get(op, 3)?,
                run: run
                    .map(|run| from_db(op, "events.run_id", run))
                    .transpose()?,
                machine: row.get(op, 5)?,
                message: row.get(op, 6)?,
                uid: uid.and_then(|uid| u32::try_from(uid).ok()),
            },
        });
    }
    Ok(events)
}

#[cfg(test)]
/// Deletes events recorded before `older_than`; returns how many.
pub(crate) fn prune_events<D: Db>(
    db: &mut D,
    older_than: crate::wire::records::Millis,
) -> Result<u64, StoreError> {
    let op = Op::PruneEvents;
    db.atomic(op, |db| {
        db.exec(op, "DELETE FROM events WHERE at < ?1", params![older_than])
    })
}

/// Pending export requests in the outbox.
pub(crate) fn export_backlog<D: Db>(db: &mut D) -> Result<i64, StoreError> {
    let op = Op::ReadDeliveries;
    db.read(op, |db| {
        let row = db.row(
            op,
            "SELECT count(*) FROM deliveries WHERE state = 'pending' AND channel = 'export'",
            &[],
        )?;
        row.map(|row| row.get(op, 0))
            .transpose()
            .map(Option::unwrap_or_default)
    })
}
