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

use rusqlite::params;

use super::store::{Op, Select, Store, StoreError, from_db, parse_name, sql_error, to_db};
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DeliveryState, DueDeliveries, DueDelivery,
    NewDelivery, Outgoing,
};
use crate::wire::records::{Millis, RunId};

const COLUMNS: &str = "id, key, job, run_id, event, channel, destination, state, attempts, \
                       created, next_attempt, last_error, delivered";

impl Store {
    /// Queue messages; a key already queued is left alone. Returns how many were new.
    pub fn queue_deliveries(&mut self, new: &[NewDelivery]) -> Result<u64, StoreError> {
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
        self.atomic(op, |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO deliveries
                     (key, job, run_id, event, channel, destination, payload, state,
                      attempts, created, next_attempt, leased)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?8, 0)",
                )
                .map_err(sql_error(op))?;
            let mut added = 0;
            for (d, run, payload) in &rows {
                added += stmt
                    .execute(params![
                        d.key,
                        d.job,
                        run,
                        d.event,
                        d.message.channel(),
                        d.message.destination(),
                        payload,
                        d.now,
                    ])
                    .map_err(sql_error(op))? as u64;
            }
            Ok(added)
        })
    }

    /// Up to `limit` due messages, leased for `lease_ms`; and when the next other one is due.
    pub fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError> {
        let op = Op::ReadDeliveries;
        let limit = to_db(op, "limit", limit as u64)?;
        self.atomic(op, |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT id, attempts, job, run_id, event, payload FROM deliveries
                     WHERE state = 'pending' AND next_attempt <= ?1
                     ORDER BY next_attempt, id LIMIT ?2",
                )
                .map_err(sql_error(op))?;
            let rows = stmt
                .query_map(params![now, limit], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, Option<String>>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                        row.get::<_, String>(4)?,
                        row.get::<_, String>(5)?,
                    ))
                })
                .map_err(sql_error(op))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_error(op))?;
            let mut due = Vec::new();
            let mut lease = conn
                .prepare_cached("UPDATE deliveries SET leased = 1, next_attempt = ?2 WHERE id = ?1")
                .map_err(sql_error(op))?;
            for (id, attempts, job, run, event, payload) in rows {
                lease
                    .execute(params![id, now.saturating_add(lease_ms)])
                    .map_err(sql_error(op))?;
                let message: Outgoing = match serde_json::from_str(&payload) {
                    Ok(m) => m,
                    Err(e) => {
                        // A row this build cannot read is given up, not retried forever.
                        conn.execute(
                            "UPDATE deliveries SET state = 'failed', leased = 0, last_error = ?2
                             WHERE id = ?1",
                            params![id, format!("unreadable message: {e}")],
                        )
                        .map_err(sql_error(op))?;
                        continue;
                    }
                };
                due.push(DueDelivery {
                    id: from_db(op, "deliveries.id", id)?,
                    attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                    job,
                    run: run
                        .map(|r| from_db(op, "deliveries.run_id", r))
                        .transpose()?,
                    event,
                    message,
                });
            }
            let (next_due, pending, oldest_pending): (Option<Millis>, i64, Option<Millis>) = conn
                .query_row(
                    "SELECT min(next_attempt), count(*), min(created) FROM deliveries
                     WHERE state = 'pending'",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .map_err(sql_error(op))?;
            Ok(DueDeliveries {
                due,
                next_due,
                pending: u64::try_from(pending).unwrap_or(0),
                oldest_pending,
            })
        })
    }

    /// Record one attempt's result.
    pub fn record_delivery_attempt(&mut self, a: &DeliveryAttempt) -> Result<(), StoreError> {
        let op = Op::RecordDelivery;
        let id = to_db(op, "delivery id", a.id)?;
        self.atomic(op, |conn| {
            let changed = match (&a.result, a.retry_at) {
                (Ok(_), _) => conn.execute(
                    "UPDATE deliveries SET state = 'delivered', attempts = attempts + 1,
                     leased = 0, delivered = ?2, last_error = NULL WHERE id = ?1",
                    params![id, a.now],
                ),
                (Err(why), Some(at)) => conn.execute(
                    "UPDATE deliveries SET attempts = attempts + 1, leased = 0,
                     next_attempt = ?2, last_error = ?3 WHERE id = ?1",
                    params![id, at, why],
                ),
                (Err(why), None) => conn.execute(
                    "UPDATE deliveries SET state = 'failed', attempts = attempts + 1,
                     leased = 0, last_error = ?2 WHERE id = ?1",
                    params![id, why],
                ),
            }
            .map_err(sql_error(op))?;
            if changed == 0 {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("delivery {}", a.id),
                });
            }
            Ok(())
        })
    }

    /// Retention of a job's outbox, with its runs: settled messages (delivered or given
    /// up) of runs that are gone, older than the history kept, or beyond the newest 1000
    /// go. Pending ones always stay.
    pub fn prune_deliveries(
        &mut self,
        job: &str,
        retention: &crate::wire::db::Retention,
    ) -> Result<u64, StoreError> {
        let op = Op::Prune;
        let older_than = retention.older_than.unwrap_or(i64::MIN);
        self.atomic(op, |conn| {
            conn.execute(
                "DELETE FROM deliveries WHERE job = ?1 AND state != 'pending' AND (
                     (run_id IS NOT NULL AND run_id NOT IN (SELECT id FROM runs))
                     OR created < ?2
                     OR id NOT IN (SELECT id FROM deliveries WHERE job = ?1
                                   AND state != 'pending' ORDER BY id DESC LIMIT 1000))",
                params![job, older_than],
            )
            .map(|n| n as u64)
            .map_err(sql_error(op))
        })
    }

    /// What was leased when the daemon stopped is due again now; returns how many.
    pub fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> {
        let op = Op::RecordDelivery;
        self.atomic(op, |conn| {
            conn.execute(
                "UPDATE deliveries SET leased = 0, next_attempt = min(next_attempt, ?1)
                 WHERE state = 'pending' AND leased = 1",
                [now],
            )
            .map(|n| n as u64)
            .map_err(sql_error(op))
        })
    }

    /// The last `bytes` of each target's output (lossy UTF-8), for a notification.
    pub fn output_tails(
        &self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let op = Op::ReadOutput;
        let machines: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare_cached("SELECT machine FROM targets WHERE run_id = ?1 ORDER BY machine")
                .map_err(sql_error(op))?;
            stmt.query_map([to_db(op, "run id", run)?], |row| row.get(0))
                .map_err(sql_error(op))?
                .collect::<Result<_, _>>()
                .map_err(sql_error(op))?
        };
        let query = crate::wire::db::OutputQuery {
            tail: Some(bytes),
            ..Default::default()
        };
        let mut tails = Vec::new();
        for machine in machines.into_iter().take(max_targets) {
            let out = self.read_output(run, &machine, &query)?;
            tails.push((machine, String::from_utf8_lossy(&out.data).into_owned()));
        }
        Ok(tails)
    }

    /// Deliveries matching `filter`, newest first.
    pub fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let op = Op::ReadDeliveries;
        let mut q = Select::new(format!("SELECT {COLUMNS} FROM deliveries"));
        if let Some(job) = &filter.job {
            q.and("job =", job.clone().into());
        }
        if let Some(run) = filter.run {
            q.and("run_id =", to_db(op, "run id", run)?.into());
        }
        if let Some(state) = filter.state {
            q.and("state =", state.as_str().to_string().into());
        }
        q.sql.push_str(" ORDER BY id DESC");
        let limit = filter.limit.unwrap_or(100).min(10_000);
        q.sql.push_str(&format!(" LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&q.sql).map_err(sql_error(op))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(q.args), |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                    row.get::<_, String>(4)?,
                    row.get::<_, String>(5)?,
                    row.get::<_, String>(6)?,
                    row.get::<_, String>(7)?,
                    row.get::<_, i64>(8)?,
                    row.get::<_, i64>(9)?,
                    row.get::<_, i64>(10)?,
                    row.get::<_, Option<String>>(11)?,
                    row.get::<_, Option<i64>>(12)?,
                ))
            })
            .map_err(sql_error(op))?;
        let mut out = Vec::new();
        for row in rows {
            let (
                id,
                key,
                job,
                run,
                event,
                channel,
                destination,
                state,
                attempts,
                created,
                next,
                err,
                delivered,
            ) = row.map_err(sql_error(op))?;
            let state = parse_name(op, "deliveries.state", &state, DeliveryState::parse)?;
            out.push(DeliveryRecord {
                id: from_db(op, "deliveries.id", id)?,
                key,
                job,
                run: run
                    .map(|r| from_db(op, "deliveries.run_id", r))
                    .transpose()?,
                event,
                channel,
                destination,
                state,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                created,
                next_attempt: (state == DeliveryState::Pending).then_some(next),
                last_error: err,
                delivered,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::db::store::tests::temp_store;

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
    use crate::roles::db::store::tests::temp_store;
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
