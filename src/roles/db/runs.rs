//! Runs and their targets in the store: creation (at most once per job and scheduled
//! slot), updates, queries for the CLI/API and restart recovery, and retention.
//!
//! A scheduled slot is recorded at most once because `runs` has `UNIQUE (job, slot)`:
//! [`create_run`] answers `None` for a slot already recorded, also across
//! restarts. Manual runs have no slot (NULLs never collide). Run ids come from
//! `AUTOINCREMENT`, so a pruned run's id is never handed out again (it is also the
//! `SP_RUN` of wrappers that may still be out there).

use std::collections::BTreeMap;

use super::attempts::target_attempts_of;
use super::errors::{Op, StoreError, from_db, parse_name, to_db};
use super::sql::{Db, Row, Select, params};
use crate::wire::db::{
    KeptOutcome, NewRun, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail, TargetUpdate,
};
use crate::wire::records::{
    Millis, RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState, Trigger,
};

const RUN_COLUMNS: &str = "id, job, slot, trigger, state, reason, started, ended";

/// SQL list of the non-final run states; must match the partial index `runs_in_flight`.
pub(crate) const IN_FLIGHT_SQL: &str = "('queued', 'dispatching', 'running')";

/// Records a run and its targets; `None` when the job's slot is already recorded (also
/// by another daemon sharing the database: the insert waits for its transaction, then
/// does nothing).
pub(crate) fn create_run<D: Db>(db: &mut D, run: &NewRun) -> Result<Option<RunId>, StoreError> {
    let op = Op::CreateRun;
    db.atomic(op, |db| {
        let Some(row) = db.row(
            op,
            "INSERT INTO runs (job, slot, trigger, state, reason, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (job, slot) DO NOTHING
             RETURNING id",
            params![
                &run.job,
                run.slot,
                run.trigger.as_str(),
                run.state.as_str(),
                &run.reason,
                run.now
            ],
        )?
        else {
            return Ok(None);
        };
        let id: i64 = row.get(op, 0)?;
        insert_targets(db, op, id, &run.targets)?;
        Ok(Some(from_db(op, "runs.id", id)?))
    })
}

#[cfg(test)]
/// Adds targets to an existing run; machines it already has are left as they are.
/// Returns how many were added.
pub(crate) fn add_targets<D: Db>(
    db: &mut D,
    run: RunId,
    targets: &[(String, TargetState)],
) -> Result<u64, StoreError> {
    let op = Op::AddTargets;
    let id = to_db(op, "run id", run)?;
    db.atomic(op, |db| {
        if db
            .row(op, "SELECT 1 FROM runs WHERE id = ?1", params![id])?
            .is_none()
        {
            return Err(StoreError::NotFound {
                op,
                what: format!("run {run}"),
            });
        }
        insert_targets(db, op, id, targets)
    })
}

/// Changes the given fields of a run.
pub(crate) fn update_run<D: Db>(
    db: &mut D,
    run: RunId,
    update: &RunUpdate,
) -> Result<(), StoreError> {
    let op = Op::UpdateRun;
    let id = to_db(op, "run id", run)?;
    db.atomic(op, |db| {
        let changed = db.exec(
            op,
            "UPDATE runs SET state = coalesce(?2, state), reason = coalesce(?3, reason),
             started = coalesce(?4, started), ended = coalesce(?5, ended)
             WHERE id = ?1",
            params![
                id,
                update.state.map(RunState::as_str),
                &update.reason,
                update.started,
                update.ended
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                op,
                what: format!("run {run}"),
            });
        }
        Ok(())
    })
}

/// Changes the given fields of one target of a run.
pub(crate) fn update_target<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
    update: &TargetUpdate,
) -> Result<Option<KeptOutcome>, StoreError> {
    let op = Op::UpdateTarget;
    let id = to_db(op, "run id", run)?;
    db.atomic(op, |db| {
        if update.state == Some(TargetState::Finished)
            && let Some(kept) = final_outcome(db, op, id, machine)?
        {
            // Another server recorded it first (a takeover): a fact stays.
            return Ok(Some(kept));
        }
        let changed = db.exec(
            op,
            "UPDATE targets SET state = coalesce(?3, state),
             reason = coalesce(?4, reason), exit_code = coalesce(?5, exit_code),
             started = coalesce(?6, started), ended = coalesce(?7, ended),
             last_seen = coalesce(?8, last_seen),
             wrapper_version = coalesce(?9, wrapper_version),
             resume_key_sha256 = coalesce(?10, resume_key_sha256),
             token_used = coalesce(?11, token_used),
             suspended = coalesce(?12, suspended),
             limits = coalesce(?13, limits),
             server = coalesce(?14, server)
             WHERE run_id = ?1 AND machine = ?2",
            params![
                id,
                machine,
                update.state.map(TargetState::as_str),
                update.reason.map(TargetReason::as_str),
                update.exit_code,
                update.started,
                update.ended,
                update.last_seen,
                &update.wrapper_version,
                &update.resume_key_sha256,
                update.token_used,
                update.suspended,
                &update.limits,
                &update.server
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                op,
                what: format!("target {machine} of run {run}"),
            });
        }
        Ok(None)
    })
}

/// The outcome stored for a target that finished for a reason other than `lost`: an
/// outcome a wrapper reported, a kill, a cancel. Such an outcome is final: a second
/// server that took the run over and judged the same target (its wrapper, told `done` by
/// the first, never came back) does not overwrite it. A `lost` verdict may still be
/// replaced by the outcome of a wrapper that comes back.
fn final_outcome<D: Db>(
    db: &mut D,
    op: Op,
    id: i64,
    machine: &str,
) -> Result<Option<KeptOutcome>, StoreError> {
    let Some(row) = db.row(
        op,
        "SELECT reason, exit_code, ended FROM targets
         WHERE run_id = ?1 AND machine = ?2 AND state = 'finished'
         AND reason IS NOT NULL AND reason <> 'lost'",
        params![id, machine],
    )?
    else {
        return Ok(None);
    };
    let reason: String = row.get(op, 0)?;
    Ok(Some(KeptOutcome {
        reason: parse_name(op, "targets.reason", &reason, TargetReason::parse)?,
        exit_code: row.get(op, 1)?,
        ended: row.get(op, 2)?,
    }))
}

/// One run with its targets, and its targets' earlier attempts.
pub(crate) fn get_run<D: Db>(db: &mut D, run: RunId) -> Result<Option<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let id = to_db(op, "run id", run)?;
    db.read(op, |db| run_with_attempts(db, id))
}

#[cfg(test)]
/// One target of a run with its bookkeeping columns.
pub(crate) fn get_target<D: Db>(
    db: &mut D,
    run: RunId,
    machine: &str,
) -> Result<Option<TargetDetail>, StoreError> {
    let op = Op::ReadRuns;
    let id = to_db(op, "run id", run)?;
    db.read(op, |db| target_detail(db, id, machine))
}

/// One run with the session details of its targets.
pub(crate) fn run_details<D: Db>(
    db: &mut D,
    run: RunId,
) -> Result<Option<(RunRecord, Vec<TargetDetail>)>, StoreError> {
    let op = Op::ReadRuns;
    let id = to_db(op, "run id", run)?;
    db.read(op, |db| match run_with_attempts(db, id)? {
        Some(record) => with_details(db, record).map(Some),
        None => Ok(None),
    })
}

/// Runs in flight with the session details of their targets (restart recovery).
pub(crate) fn in_flight_details<D: Db>(
    db: &mut D,
) -> Result<Vec<(RunRecord, Vec<TargetDetail>)>, StoreError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE state IN {IN_FLIGHT_SQL} ORDER BY id");
    db.read(Op::ReadRuns, |db| {
        query_runs(db, &sql, &[], false)?
            .into_iter()
            .map(|run| with_details(db, run))
            .collect()
    })
}

#[cfg(test)]
/// Runs in a non-final state, oldest first: what `main` recovers after a restart.
pub(crate) fn in_flight_runs<D: Db>(db: &mut D) -> Result<Vec<RunRecord>, StoreError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE state IN {IN_FLIGHT_SQL} ORDER BY id");
    db.read(Op::ReadRuns, |db| query_runs(db, &sql, &[], false))
}

/// Runs matching `filter`, newest first, with their targets.
pub(crate) fn list_runs<D: Db>(
    db: &mut D,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let mut q = Select::new(format!("SELECT {RUN_COLUMNS} FROM runs"));
    if let Some(job) = &filter.job {
        q.and("job =", job.clone());
    }
    if let Some(state) = filter.state {
        q.and("state =", state.as_str().to_string());
    }
    if let Some(since) = filter.since {
        q.and("created >=", since);
    }
    if let Some(until) = filter.until {
        q.and("created <=", until);
    }
    if let Some(before) = filter.before_id {
        q.and("id <", to_db(op, "run id", before)?);
    }
    q.sql.push_str(" ORDER BY id DESC");
    if let Some(limit) = filter.limit {
        q.sql
            .push_str(&format!(" LIMIT {}", to_db(op, "limit", limit as u64)?));
    }
    db.read(op, |db| query_runs(db, &q.sql, &q.args, true))
}

/// The newest run of every job that has one.
pub(crate) fn last_run_per_job<D: Db>(
    db: &mut D,
) -> Result<BTreeMap<String, RunRecord>, StoreError> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT max(id) FROM runs GROUP BY job)"
    );
    let runs = db.read(Op::ReadRuns, |db| query_runs(db, &sql, &[], false))?;
    Ok(runs.into_iter().map(|run| (run.job.clone(), run)).collect())
}

/// The newest recorded slot of every job that has one (manual runs have none). Served
/// by the `UNIQUE (job, slot)` index.
pub(crate) fn last_slot_per_job<D: Db>(db: &mut D) -> Result<BTreeMap<String, Millis>, StoreError> {
    let op = Op::ReadRuns;
    db.read(op, |db| {
        db.rows(
            op,
            "SELECT job, max(slot) FROM runs WHERE slot IS NOT NULL GROUP BY job",
            &[],
        )?
        .iter()
        .map(|row| Ok((row.get(op, 0)?, row.get(op, 1)?)))
        .collect()
    })
}

#[cfg(test)]
/// Whether a run of `job` for the scheduled `slot` is already recorded.
pub(crate) fn slot_recorded<D: Db>(
    db: &mut D,
    job: &str,
    slot: Millis,
) -> Result<bool, StoreError> {
    let op = Op::ReadRuns;
    db.read(op, |db| {
        db.row(
            op,
            "SELECT 1 FROM runs WHERE job = ?1 AND slot = ?2",
            params![job, slot],
        )
        .map(|row| row.is_some())
    })
}

#[cfg(test)]
/// Every job name that has runs (retention also covers jobs gone from the config).
pub(crate) fn known_jobs<D: Db>(db: &mut D) -> Result<Vec<String>, StoreError> {
    let op = Op::ReadRuns;
    db.read(op, |db| {
        db.rows(op, "SELECT DISTINCT job FROM runs ORDER BY job", &[])?
            .iter()
            .map(|row| row.get(op, 0))
            .collect()
    })
}

/// Removes final runs of `job` (with their targets and output) as `retention` says.
pub(crate) fn prune<D: Db>(
    db: &mut D,
    job: &str,
    retention: &Retention,
) -> Result<PruneOutcome, StoreError> {
    let op = Op::Prune;
    let sql = format!(
        "SELECT r.id, r.created,
         (SELECT CAST(coalesce(sum(t.head_bytes + t.tail_bytes), 0) AS BIGINT)
          FROM targets t WHERE t.run_id = r.id)
         FROM runs r WHERE r.job = ?1 AND r.state NOT IN {IN_FLIGHT_SQL}
         ORDER BY r.id DESC"
    );
    db.atomic(op, |db| {
        let runs = db.rows(op, &sql, params![job])?;
        let mut outcome = PruneOutcome::default();
        let mut kept_bytes: u64 = 0;
        for (index, row) in runs.iter().enumerate() {
            let id: i64 = row.get(op, 0)?;
            let created: Millis = row.get(op, 1)?;
            let bytes = from_db(op, "targets.head_bytes", row.get(op, 2)?)?;
            let over_count = retention.keep_runs.is_some_and(|keep| index >= keep);
            let too_old = retention.older_than.is_some_and(|limit| created < limit);
            let over_bytes = index > 0
                && retention
                    .max_output_bytes
                    .is_some_and(|max| kept_bytes.saturating_add(bytes) > max);
            if over_count || too_old || over_bytes {
                db.exec(op, "DELETE FROM runs WHERE id = ?1", params![id])?;
                outcome.runs += 1;
                outcome.output_bytes += bytes;
            } else {
                kept_bytes = kept_bytes.saturating_add(bytes);
            }
        }
        Ok(outcome)
    })
}

/// A target row's first nine columns (machine, state, reason, exit_code, started, ended,
/// suspended, limits, server).
fn target_record(op: Op, row: &Row) -> Result<TargetRecord, StoreError> {
    let state: String = row.get(op, 1)?;
    let reason: Option<String> = row.get(op, 2)?;
    Ok(TargetRecord {
        machine: row.get(op, 0)?,
        state: parse_name(op, "targets.state", &state, TargetState::parse)?,
        reason: reason
            .map(|text| parse_name(op, "targets.reason", &text, TargetReason::parse))
            .transpose()?,
        exit_code: row.get(op, 3)?,
        started: row.get(op, 4)?,
        ended: row.get(op, 5)?,
        suspended: row.get(op, 6)?,
        waiting: None,
        limits: row.get(op, 7)?,
        server: row.get(op, 8)?,
    })
}

/// A run row (`RUN_COLUMNS`) with its targets.
fn complete_run<D: Db>(db: &mut D, row: &Row) -> Result<RunRecord, StoreError> {
    let op = Op::ReadRuns;
    let id: i64 = row.get(op, 0)?;
    let trigger: String = row.get(op, 3)?;
    let state: String = row.get(op, 4)?;
    let targets = db
        .rows(
            op,
            "SELECT machine, state, reason, exit_code, started, ended, suspended, limits,
             server FROM targets WHERE run_id = ?1 ORDER BY machine",
            params![id],
        )?
        .iter()
        .map(|row| target_record(op, row))
        .collect::<Result<_, _>>()?;
    Ok(RunRecord {
        id: from_db(op, "runs.id", id)?,
        job: row.get(op, 1)?,
        slot: row.get(op, 2)?,
        trigger: parse_name(op, "runs.trigger", &trigger, Trigger::parse)?,
        state: parse_name(op, "runs.state", &state, RunState::parse)?,
        reason: row.get(op, 5)?,
        started: row.get(op, 6)?,
        ended: row.get(op, 7)?,
        targets,
        attempts: Vec::new(),
    })
}

/// A run shown alone: with its targets' earlier attempts.
fn run_with_attempts<D: Db>(db: &mut D, id: i64) -> Result<Option<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
    let Some(row) = db.row(op, &sql, params![id])? else {
        return Ok(None);
    };
    let mut record = complete_run(db, &row)?;
    record.attempts = target_attempts_of(db, id)?;
    Ok(Some(record))
}

fn target_detail<D: Db>(
    db: &mut D,
    id: i64,
    machine: &str,
) -> Result<Option<TargetDetail>, StoreError> {
    let op = Op::ReadRuns;
    let Some(row) = db.row(
        op,
        "SELECT machine, state, reason, exit_code, started, ended, suspended, limits,
         server, last_seen, wrapper_version, output_bytes, omitted_bytes, seq_contiguous,
         resume_key_sha256, token_used, attempt
         FROM targets WHERE run_id = ?1 AND machine = ?2",
        params![id, machine],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(TargetDetail {
        record: target_record(op, &row)?,
        last_seen: row.get(op, 9)?,
        wrapper_version: row.get(op, 10)?,
        output_bytes: from_db(op, "targets.output_bytes", row.get(op, 11)?)?,
        omitted_bytes: from_db(op, "targets.omitted_bytes", row.get(op, 12)?)?,
        contiguous_seq: from_db(op, "targets.seq_contiguous", row.get(op, 13)?)?,
        resume_key_sha256: row.get(op, 14)?,
        token_used: row.get(op, 15)?,
        attempt: u32::try_from(from_db(op, "targets.attempt", row.get(op, 16)?)?)
            .unwrap_or(u32::MAX),
    }))
}

fn with_details<D: Db>(
    db: &mut D,
    run: RunRecord,
) -> Result<(RunRecord, Vec<TargetDetail>), StoreError> {
    let id = to_db(Op::ReadRuns, "run id", run.id)?;
    let mut details = Vec::with_capacity(run.targets.len());
    for t in &run.targets {
        if let Some(d) = target_detail(db, id, &t.machine)? {
            details.push(d);
        }
    }
    Ok((run, details))
}

/// The runs of a query of `RUN_COLUMNS`, with their targets; `built` for a statement
/// made at run time (a filtered listing).
fn query_runs<D: Db>(
    db: &mut D,
    sql: &str,
    args: &[super::sql::Value<'_>],
    built: bool,
) -> Result<Vec<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let rows = if built {
        db.rows_built(op, sql, args)?
    } else {
        db.rows(op, sql, args)?
    };
    rows.iter().map(|row| complete_run(db, row)).collect()
}

fn insert_targets<D: Db>(
    db: &mut D,
    op: Op,
    run: i64,
    targets: &[(String, TargetState)],
) -> Result<u64, StoreError> {
    let mut added = 0;
    for (machine, state) in targets {
        added += db.exec(
            op,
            "INSERT INTO targets (run_id, machine, state) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id, machine) DO NOTHING",
            params![run, machine, state.as_str()],
        )?;
    }
    Ok(added)
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
