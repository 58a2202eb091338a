//! Attempts of a target (`retries`): a failed target started again keeps its earlier
//! outcomes in `target_attempts`, and its row in `targets` starts over as the new attempt
//! (schema version 5).
//!
//! The output of every attempt stays, one after the other: only the sequence bookkeeping
//! restarts (the new attempt's wrapper numbers its frames from 1 again), the byte
//! positions carry on.

use super::errors::{Op, StoreError, from_db, parse_name, to_db};
use super::sql::{Db, params};
use crate::wire::db::AttemptRecord;
use crate::wire::records::{RunId, TargetReason};

/// Start attempt `attempt` of a target: its current outcome goes to the history, the
/// row is pending again with a fresh session (token unused, no resume key, seqs anew).
pub(crate) fn retry_target<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
    attempt: u32,
) -> Result<(), StoreError> {
    let op = Op::UpdateTarget;
    let run_id = to_db(op, "run id", run)?;
    db.atomic(op, |db| {
        let copied = db.exec(
            op,
            "INSERT INTO target_attempts
             (run_id, machine, attempt, reason, exit_code, started, ended)
             SELECT run_id, machine, attempt, reason, exit_code, started, ended
             FROM targets WHERE run_id = ?1 AND machine = ?2
             ON CONFLICT (run_id, machine, attempt) DO UPDATE SET
             reason = excluded.reason, exit_code = excluded.exit_code,
             started = excluded.started, ended = excluded.ended",
            params![run_id, machine],
        )?;
        if copied == 0 {
            return Err(StoreError::NotFound {
                op,
                what: format!("target {machine} of run {run}"),
            });
        }
        db.exec(
            op,
            "UPDATE targets SET state = 'pending', reason = NULL, exit_code = NULL,
             started = NULL, ended = NULL, token_used = FALSE, resume_key_sha256 = NULL,
             suspended = FALSE, limits = NULL,
             seq_contiguous = 0, seq_pending = 0, attempt = ?3
             WHERE run_id = ?1 AND machine = ?2",
            params![run_id, machine, attempt],
        )?;
        db.exec(
            op,
            "DELETE FROM output_seen WHERE run_id = ?1 AND machine = ?2",
            params![run_id, machine],
        )?;
        Ok(())
    })
}

/// Every attempt of a run's targets: the earlier ones from the history, the current one
/// from `targets`, by machine and attempt.
pub(crate) fn target_attempts<D: Db>(
    db: &mut D,
    run: RunId,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let op = Op::ReadRuns;
    let run_id = to_db(op, "run id", run)?;
    db.read(op, |db| target_attempts_of(db, run_id))
}

/// [`target_attempts`] inside an operation.
pub(super) fn target_attempts_of<D: Db>(
    db: &mut D,
    run_id: i64,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let op = Op::ReadRuns;
    let rows = db.rows(
        op,
        "SELECT machine, attempt, reason, exit_code, started, ended FROM target_attempts
         WHERE run_id = ?1
         UNION ALL
         SELECT machine, attempt, reason, exit_code, started, ended FROM targets
         WHERE run_id = ?1 AND attempt > 1
         ORDER BY 1, 2",
        params![run_id],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let reason: Option<String> = row.get(op, 2)?;
        out.push(AttemptRecord {
            machine: row.get(op, 0)?,
            attempt: u32::try_from(from_db(op, "attempt", row.get(op, 1)?)?).unwrap_or(u32::MAX),
            reason: reason
                .map(|r| parse_name(op, "reason", &r, TargetReason::parse))
                .transpose()?,
            exit_code: row.get(op, 3)?,
            started: row.get(op, 4)?,
            ended: row.get(op, 5)?,
        });
    }
    Ok(out)
}
