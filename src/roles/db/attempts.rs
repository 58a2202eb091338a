//! Attempts of a target (`retries`): a failed target started again keeps its earlier
//! outcomes in `target_attempts`, and its row in `targets` starts over as the new attempt
//! (schema version 5).
//!
//! The output of every attempt stays, one after the other: only the sequence bookkeeping
//! restarts (the new attempt's wrapper numbers its frames from 1 again), the byte
//! positions carry on.

use rusqlite::params;

use super::store::{Op, Store, StoreError, from_db, parse_name, sql_error, to_db};
use crate::wire::db::AttemptRecord;
use crate::wire::records::{RunId, TargetReason};

impl Store {
    /// Start attempt `attempt` of a target: its current outcome goes to the history, the
    /// row is pending again with a fresh session (token unused, no resume key, seqs anew).
    pub fn retry_target(
        &mut self,
        run: RunId,
        machine: &str,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let op = Op::UpdateTarget;
        let run_id = to_db(op, "run id", run)?;
        self.atomic(op, |conn| {
            let copied = conn
                .execute(
                    "INSERT OR REPLACE INTO target_attempts
                     (run_id, machine, attempt, reason, exit_code, started, ended)
                     SELECT run_id, machine, attempt, reason, exit_code, started, ended
                     FROM targets WHERE run_id = ?1 AND machine = ?2",
                    params![run_id, machine],
                )
                .map_err(sql_error(op))?;
            if copied == 0 {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("target {machine} of run {run}"),
                });
            }
            conn.execute(
                "UPDATE targets SET state = 'pending', reason = NULL, exit_code = NULL,
                 started = NULL, ended = NULL, token_used = 0, resume_key_sha256 = NULL,
                 suspended = 0, limits = NULL,
                 seq_contiguous = 0, seq_pending = 0, attempt = ?3
                 WHERE run_id = ?1 AND machine = ?2",
                params![run_id, machine, attempt],
            )
            .map_err(sql_error(op))?;
            conn.execute(
                "DELETE FROM output_seen WHERE run_id = ?1 AND machine = ?2",
                params![run_id, machine],
            )
            .map_err(sql_error(op))?;
            Ok(())
        })
    }

    /// Every attempt of a run's targets: the earlier ones from the history, the current
    /// one from `targets`, by machine and attempt.
    pub fn target_attempts(&self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError> {
        let op = Op::ReadRuns;
        let run_id = to_db(op, "run id", run)?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT machine, attempt, reason, exit_code, started, ended FROM target_attempts
                 WHERE run_id = ?1
                 UNION ALL
                 SELECT machine, attempt, reason, exit_code, started, ended FROM targets
                 WHERE run_id = ?1 AND attempt > 1
                 ORDER BY 1, 2",
            )
            .map_err(sql_error(op))?;
        let rows = stmt
            .query_map([run_id], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, Option<i32>>(3)?,
                    row.get::<_, Option<i64>>(4)?,
                    row.get::<_, Option<i64>>(5)?,
                ))
            })
            .map_err(sql_error(op))?;
        let mut out = Vec::new();
        for row in rows {
            let (machine, attempt, reason, exit_code, started, ended) =
                row.map_err(sql_error(op))?;
            out.push(AttemptRecord {
                machine,
                attempt: u32::try_from(from_db(op, "attempt", attempt)?).unwrap_or(u32::MAX),
                reason: reason
                    .map(|r| parse_name(op, "reason", &r, TargetReason::parse))
                    .transpose()?,
                exit_code,
                started,
                ended,
            });
        }
        Ok(out)
    }
}
