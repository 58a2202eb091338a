//! The notification outbox on PostgreSQL: the twin of `db/deliveries.rs` (queued once by
//! key, leased when due, attempts recorded, leases released at start).
//!
//! With several daemons only the leader pumps the outbox; a lease taken with `FOR UPDATE
//! SKIP LOCKED` still keeps two takers from handing out one message twice.

use super::super::store::{Op, StoreError, from_db, parse_name, to_db};
use super::{PgSelect, PgStore, col};
use crate::wire::db::Retention;
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DeliveryState, DueDeliveries, DueDelivery,
    NewDelivery, Outgoing,
};
use crate::wire::records::Millis;

const COLUMNS: &str = "id, key, job, run_id, event, channel, destination, state, attempts, \
                       created, next_attempt, last_error, delivered";

impl PgStore {
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
        self.atomic(op, |sql| {
            let mut added = 0;
            for (d, run, payload) in &rows {
                added += sql.exec(
                    op,
                    "INSERT INTO deliveries
                     (key, job, run_id, event, channel, destination, payload, state,
                      attempts, created, next_attempt, leased)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 0, $8, $8, 0)
                     ON CONFLICT (key) DO NOTHING",
                    &[
                        &d.key,
                        &d.job,
                        run,
                        &d.event,
                        &d.message.channel(),
                        &d.message.destination(),
                        payload,
                        &d.now,
                    ],
                )?;
            }
            Ok(added)
        })
    }

    pub fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError> {
        let op = Op::ReadDeliveries;
        let limit = to_db(op, "limit", limit as u64)?;
        self.atomic(op, |sql| {
            let rows = sql.rows(
                op,
                "SELECT id, attempts, job, run_id, event, payload FROM deliveries
                 WHERE state = 'pending' AND next_attempt <= $1
                 ORDER BY next_attempt, id LIMIT $2 FOR UPDATE SKIP LOCKED",
                &[&now, &limit],
            )?;
            let mut due = Vec::new();
            for row in &rows {
                let id: i64 = col(op, row, 0)?;
                let attempts: i32 = col(op, row, 1)?;
                let run: Option<i64> = col(op, row, 3)?;
                let payload: String = col(op, row, 5)?;
                sql.exec(
                    op,
                    "UPDATE deliveries SET leased = 1, next_attempt = $2 WHERE id = $1",
                    &[&id, &now.saturating_add(lease_ms)],
                )?;
                let message: Outgoing = match serde_json::from_str(&payload) {
                    Ok(m) => m,
                    Err(e) => {
                        // A row this build cannot read is given up, not retried forever.
                        sql.exec(
                            op,
                            "UPDATE deliveries SET state = 'failed', leased = 0, last_error = $2
                             WHERE id = $1",
                            &[&id, &format!("unreadable message: {e}")],
                        )?;
                        continue;
                    }
                };
                due.push(DueDelivery {
                    id: from_db(op, "deliveries.id", id)?,
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    job: col(op, row, 2)?,
                    run: run
                        .map(|r| from_db(op, "deliveries.run_id", r))
                        .transpose()?,
                    event: col(op, row, 4)?,
                    message,
                });
            }
            let (next_due, pending, oldest_pending): (Option<Millis>, i64, Option<Millis>) =
                match sql.opt(
                    op,
                    "SELECT min(next_attempt), count(*), min(created) FROM deliveries
                     WHERE state = 'pending'",
                    &[],
                )? {
                    Some(row) => (col(op, &row, 0)?, col(op, &row, 1)?, col(op, &row, 2)?),
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

    pub fn record_delivery_attempt(&mut self, a: &DeliveryAttempt) -> Result<(), StoreError> {
        let op = Op::RecordDelivery;
        let id = to_db(op, "delivery id", a.id)?;
        self.atomic(op, |sql| {
            let changed = match (&a.result, a.retry_at) {
                (Ok(_), _) => sql.exec(
                    op,
                    "UPDATE deliveries SET state = 'delivered', attempts = attempts + 1,
                     leased = 0, delivered = $2, last_error = NULL WHERE id = $1",
                    &[&id, &a.now],
                )?,
                (Err(why), Some(at)) => sql.exec(
                    op,
                    "UPDATE deliveries SET attempts = attempts + 1, leased = 0,
                     next_attempt = $2, last_error = $3 WHERE id = $1",
                    &[&id, &at, why],
                )?,
                (Err(why), None) => sql.exec(
                    op,
                    "UPDATE deliveries SET state = 'failed', attempts = attempts + 1,
                     leased = 0, last_error = $2 WHERE id = $1",
                    &[&id, why],
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

    pub fn prune_deliveries(
        &mut self,
        job: &str,
        retention: &Retention,
    ) -> Result<u64, StoreError> {
        let op = Op::Prune;
        let older_than = retention.older_than.unwrap_or(i64::MIN);
        self.atomic(op, |sql| {
            sql.exec(
                op,
                "DELETE FROM deliveries WHERE job = $1 AND state != 'pending' AND (
                     (run_id IS NOT NULL AND run_id NOT IN (SELECT id FROM runs))
                     OR created < $2
                     OR id NOT IN (SELECT id FROM deliveries WHERE job = $1
                                   AND state != 'pending' ORDER BY id DESC LIMIT 1000))",
                &[&job, &older_than],
            )
        })
    }

    pub fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> {
        let op = Op::RecordDelivery;
        self.atomic(op, |sql| {
            sql.exec(
                op,
                "UPDATE deliveries SET leased = 0, next_attempt = LEAST(next_attempt, $1)
                 WHERE state = 'pending' AND leased = 1",
                &[&now],
            )
        })
    }

    pub fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let op = Op::ReadDeliveries;
        let mut q = PgSelect::new(format!("SELECT {COLUMNS} FROM deliveries"));
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
        self.atomic(op, |sql| {
            let rows = sql.rows_uncached(op, &q.sql, &q.params())?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let state: String = col(op, row, 7)?;
                let state = parse_name(op, "deliveries.state", &state, DeliveryState::parse)?;
                let run: Option<i64> = col(op, row, 3)?;
                let attempts: i32 = col(op, row, 8)?;
                let next: i64 = col(op, row, 10)?;
                out.push(DeliveryRecord {
                    id: from_db(op, "deliveries.id", col(op, row, 0)?)?,
                    key: col(op, row, 1)?,
                    job: col(op, row, 2)?,
                    run: run
                        .map(|r| from_db(op, "deliveries.run_id", r))
                        .transpose()?,
                    event: col(op, row, 4)?,
                    channel: col(op, row, 5)?,
                    destination: col(op, row, 6)?,
                    state,
                    attempts: u32::try_from(attempts).unwrap_or(0),
                    created: col(op, row, 9)?,
                    next_attempt: (state == DeliveryState::Pending).then_some(next),
                    last_error: col(op, row, 11)?,
                    delivered: col(op, row, 12)?,
                });
            }
            Ok(out)
        })
    }
}
