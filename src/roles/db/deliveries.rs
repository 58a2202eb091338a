//! The notification outbox: messages queued at a run's end, leased to main when due,
//! and their attempts (`deliveries` table, schema version 4).
//!
//! Outline:
//! 1. `queue_deliveries`: insert, ignoring a key already queued (de-duplication: a run's
//!    end seen twice, after a restart for example, queues nothing new).
//! 2. `take_due_deliveries`: the pending messages whose `next_attempt` has come, leased
//!    to main (`leased = 1`, `next_attempt` pushed by the lease) so a second take does not
//!    hand them out again while they are being sent.
//! 3. `record_delivery_attempt`: delivered, or failed with its cause and the next try, or
//!    given up (`failed`).
//! 4. `release_delivery_leases` at main's start: what was in flight when the daemon
//!    stopped is due again at once (at-least-once delivery).

use super::errors::{Op, StoreError, from_db, parse_name, to_db};
use super::sql::{Db, Select, params};
use crate::wire::db::Retention;
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DeliveryState, DueDeliveries, DueDelivery,
    NewDelivery, Outgoing,
};
use crate::wire::records::Millis;

const COLUMNS: &str = "id, key, job, run_id, event, channel, destination, state, attempts, \
                       created, next_attempt, last_error, delivered";

/// Queue messages; a key already queued is left alone. Returns how many were new.
pub(crate) fn queue_deliveries<D: Db>(db: &mut D, new: &[NewDelivery]) -> Result<u64, StoreError> {
    let op = Op::QueueDelivery;
    let mut rows = Vec::with_capacity(new.len());
    for d in new {
        let run = d.run.map(|r| to_db(op, "run id", r)).transpose()?;
        let payload = serde_json::to_string(&d.message).map_err(|e| StoreError::Invalid {
            op,
            reason: format!("cannot encode the message: {e}"),
        })?;
        rows.push((d, run, payload));
    }
    db.atomic(op, |db| {
        let mut added = 0;
        for (d, run, payload) in &rows {
            added += db.exec(
                op,
                "INSERT INTO deliveries
                 (key, job, run_id, event, channel, destination, payload, state,
                  attempts, created, next_attempt, leased)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?8, 0)
                 ON CONFLICT (key) DO NOTHING",
                params![
                    &d.key,
                    &d.job,
                    *run,
                    &d.event,
                    d.message.channel(),
                    d.message.destination(),
                    payload,
                    d.now
                ],
            )?;
        }
        Ok(added)
    })
}

/// Up to `limit` due messages, leased for `lease_ms`; and when the next other one is due.
/// With several daemons only the leader pumps the outbox; on PostgreSQL the rows taken
/// are locked (`Dialect::lock_taken`), so two takers never hand one message out twice.
pub(crate) fn take_due_deliveries<D: Db>(
    db: &mut D,
    now: Millis,
    limit: usize,
    lease_ms: i64,
) -> Result<DueDeliveries, StoreError> {
    let op = Op::ReadDeliveries;
    let limit = to_db(op, "limit", limit as u64)?;
    let take = format!(
        "SELECT id, attempts, job, run_id, event, payload FROM deliveries
         WHERE state = 'pending' AND next_attempt <= ?1
         ORDER BY next_attempt, id LIMIT ?2{}",
        db.dialect().lock_taken()
    );
    db.atomic(op, |db| {
        let rows = db.rows(op, &take, params![now, limit])?;
        let mut due = Vec::new();
        for row in &rows {
            let id: i64 = row.get(op, 0)?;
            let attempts: i64 = row.get(op, 1)?;
            let run: Option<i64> = row.get(op, 3)?;
            let payload: String = row.get(op, 5)?;
            db.exec(
                op,
                "UPDATE deliveries SET leased = 1, next_attempt = ?2 WHERE id = ?1",
                params![id, now.saturating_add(lease_ms)],
            )?;
            let message: Outgoing = match serde_json::from_str(&payload) {
                Ok(m) => m,
                Err(e) => {
                    // A row this build cannot read is given up, not retried forever.
                    db.exec(
                        op,
                        "UPDATE deliveries SET state = 'failed', leased = 0, last_error = ?2
                         WHERE id = ?1",
                        params![id, format!("unreadable message: {e}")],
                    )?;
                    continue;
                }
            };
            due.push(DueDelivery {
                id: from_db(op, "deliveries.id", id)?,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                job: row.get(op, 2)?,
                run: run
                    .map(|r| from_db(op, "deliveries.run_id", r))
                    .transpose()?,
                event: row.get(op, 4)?,
                message,
            });
        }
        let (next_due, pending, oldest_pending): (Option<Millis>, i64, Option<Millis>) = match db
            .row(
                op,
                "SELECT min(next_attempt), count(*), min(created) FROM deliveries
                 WHERE state = 'pending'",
                &[],
            )? {
            Some(row) => (row.get(op, 0)?, row.get(op, 1)?, row.get(op, 2)?),
            None => (None, 0, None),
        };
        Ok(DueDeliveries {
            due,
            next_due,
            pending: u64::try_from(pending).unwrap_or(0),
            oldest_pending,
        })
    })
}

/// Record one attempt's result.
pub(crate) fn record_delivery_attempt<D: Db>(
    db: &mut D,
    a: &DeliveryAttempt,
) -> Result<(), StoreError> {
    let op = Op::RecordDelivery;
    let id = to_db(op, "delivery id", a.id)?;
    db.atomic(op, |db| {
        let changed = match (&a.result, a.retry_at) {
            (Ok(_), _) => db.exec(
                op,
                "UPDATE deliveries SET state = 'delivered', attempts = attempts + 1,
                 leased = 0, delivered = ?2, last_error = NULL WHERE id = ?1",
                params![id, a.now],
            )?,
            (Err(why), Some(at)) => db.exec(
                op,
                "UPDATE deliveries SET attempts = attempts + 1, leased = 0,
                 next_attempt = ?2, last_error = ?3 WHERE id = ?1",
                params![id, at, why],
            )?,
            (Err(why), None) => db.exec(
                op,
                "UPDATE deliveries SET state = 'failed', attempts = attempts + 1,
                 leased = 0, last_error = ?2 WHERE id = ?1",
                params![id, why],
            )?,
        };
        if changed == 0 {
            return Err(StoreError::NotFound {
                op,
                what: format!("delivery {}", a.id),
            });
        }
        Ok(())
    })
}

/// Retention of a job's outbox, with its runs: settled messages (delivered or given up)
/// of runs that are gone, older than the history kept, or beyond the newest 1000 go.
/// Pending ones always stay.
pub(crate) fn prune_deliveries<D: Db>(
    db: &mut D,
    job: &str,
    retention: &Retention,
) -> Result<u64, StoreError> {
    let op = Op::Prune;
    let older_than = retention.older_than.unwrap_or(i64::MIN);
    db.atomic(op, |db| {
        db.exec(
            op,
            "DELETE FROM deliveries WHERE job = ?1 AND state != 'pending' AND (
                 (run_id IS NOT NULL AND run_id NOT IN (SELECT id FROM runs))
                 OR created < ?2
                 OR id NOT IN (SELECT id FROM deliveries WHERE job = ?1
                               AND state != 'pending' ORDER BY id DESC LIMIT 1000))",
            params![job, older_than],
        )
    })
}

/// What was leased when the daemon stopped is due again now; returns how many.
pub(crate) fn release_delivery_leases<D: Db>(db: &mut D, now: Millis) -> Result<u64, StoreError> {
    let op = Op::RecordDelivery;
    let release = format!(
        "UPDATE deliveries SET leased = 0, next_attempt = {}(next_attempt, ?1)
         WHERE state = 'pending' AND leased = 1",
        db.dialect().least()
    );
    db.atomic(op, |db| db.exec(op, &release, params![now]))
}

/// Deliveries matching `filter`, newest first.
pub(crate) fn list_deliveries<D: Db>(
    db: &mut D,
    filter: &DeliveryFilter,
) -> Result<Vec<DeliveryRecord>, StoreError> {
    let op = Op::ReadDeliveries;
    let mut q = Select::new(format!("SELECT {COLUMNS} FROM deliveries"));
    if let Some(job) = &filter.job {
        q.and("job =", job.clone());
    }
    if let Some(run) = filter.run {
        q.and("run_id =", to_db(op, "run id", run)?);
    }
    if let Some(state) = filter.state {
        q.and("state =", state.as_str().to_string());
    }
    q.sql.push_str(" ORDER BY id DESC");
    let limit = filter.limit.unwrap_or(100).min(10_000);
    q.sql.push_str(&format!(" LIMIT {limit}"));
    let rows = db.read(op, |db| db.rows_built(op, &q.sql, &q.args))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let state: String = row.get(op, 7)?;
        let state = parse_name(op, "deliveries.state", &state, DeliveryState::parse)?;
        let run: Option<i64> = row.get(op, 3)?;
        let attempts: i64 = row.get(op, 8)?;
        let next: i64 = row.get(op, 10)?;
        out.push(DeliveryRecord {
            id: from_db(op, "deliveries.id", row.get(op, 0)?)?,
            key: row.get(op, 1)?,
            job: row.get(op, 2)?,
            run: run
                .map(|r| from_db(op, "deliveries.run_id", r))
                .transpose()?,
            event: row.get(op, 4)?,
            channel: row.get(op, 5)?,
            destination: row.get(op, 6)?,
            state,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            created: row.get(op, 9)?,
            next_attempt: (state == DeliveryState::Pending).then_some(next),
            last_error: row.get(op, 11)?,
            delivered: row.get(op, 12)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::db::store::tests::{Operations, temp_store};

    fn new(key: &str, now: Millis) -> NewDelivery {
        NewDelivery {
            key: key.into(),
            job: Some("j".into()),
            run: Some(1),
            event: "failure".into(),
            message: Outgoing::Email {
                to: vec!["a@b.example".into()],
                subject: "s".into(),
                body: "b".into(),
            },
            now,
        }
    }

    #[test]
    fn queued_once_leased_once_and_released_after_a_restart() {
        let (_dir, mut store) = temp_store();
        assert_eq!(
            store
                .queue_deliveries(&[new("k1", 10), new("k1", 11)])
                .unwrap(),
            1
        );
        assert_eq!(store.queue_deliveries(&[new("k1", 12)]).unwrap(), 0);
        let due = store.take_due_deliveries(10, 4, 1000).unwrap();
        assert_eq!(due.due.len(), 1);
        assert_eq!(due.next_due, Some(1010));
        // Leased: not handed out twice.
        assert!(
            store
                .take_due_deliveries(20, 4, 1000)
                .unwrap()
                .due
                .is_empty()
        );
        // A restart releases the lease.
        assert_eq!(store.release_delivery_leases(30).unwrap(), 1);
        let again = store.take_due_deliveries(30, 4, 1000).unwrap();
        assert_eq!(again.due.len(), 1);
        let id = again.due[0].id;
        store
            .record_delivery_attempt(&DeliveryAttempt {
                id,
                now: 40,
                result: Err("refused".into()),
                retry_at: Some(5000),
            })
            .unwrap();
        assert!(
            store
                .take_due_deliveries(4999, 4, 1000)
                .unwrap()
                .due
                .is_empty()
        );
        let later = store.take_due_deliveries(5000, 4, 1000).unwrap();
        assert_eq!(later.due[0].attempts, 1);
        store
            .record_delivery_attempt(&DeliveryAttempt {
                id,
                now: 5001,
                result: Ok("HTTP 200".into()),
                retry_at: None,
            })
            .unwrap();
        let list = store.list_deliveries(&DeliveryFilter::default()).unwrap();
        assert_eq!(list[0].state, DeliveryState::Delivered);
        assert_eq!(list[0].attempts, 2);
        assert_eq!(list[0].delivered, Some(5001));
        assert_eq!(list[0].destination, "a@b.example");
        assert_eq!(
            store.take_due_deliveries(9999, 4, 1000).unwrap().next_due,
            None
        );
    }
}

#[cfg(test)]
mod prune_tests {
    use super::*;
    use crate::roles::db::store::tests::{Operations, temp_store};
    use crate::wire::db::Retention;

    #[test]
    fn settled_messages_of_pruned_runs_go_pending_ones_stay() {
        let (_dir, mut store) = temp_store();
        let mail = Outgoing::Email {
            to: vec!["a@b.example".into()],
            subject: "s".into(),
            body: "b".into(),
        };
        let new = |key: &str| NewDelivery {
            key: key.into(),
            job: Some("j".into()),
            run: Some(99),
            event: "failure".into(),
            message: mail.clone(),
            now: 0,
        };
        store
            .queue_deliveries(&[new("done"), new("waiting")])
            .unwrap();
        let due = store.take_due_deliveries(0, 1, 10).unwrap();
        store
            .record_delivery_attempt(&DeliveryAttempt {
                id: due.due[0].id,
                now: 1,
                result: Ok("250".into()),
                retry_at: None,
            })
            .unwrap();
        // Run 99 does not exist (pruned): its delivered message goes, the pending one stays.
        assert_eq!(
            store.prune_deliveries("j", &Retention::default()).unwrap(),
            1
        );
        let left = store.list_deliveries(&DeliveryFilter::default()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].state, DeliveryState::Pending);
    }
}
