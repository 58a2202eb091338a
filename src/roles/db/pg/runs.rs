//! Runs, targets and their attempts on PostgreSQL: the twin of `db/runs.rs` and
//! `db/attempts.rs`. A scheduled slot is recorded at most once through `UNIQUE (job,
//! slot)`, which also holds between daemons sharing the database: an insert racing
//! another daemon's waits for its transaction and then does nothing.

use std::collections::BTreeMap;

use postgres::Row;

use super::super::store::{Op, StoreError, from_db, parse_name, to_db};
use super::{PgSelect, PgStore, Sql, col};
use crate::wire::db::{
    AttemptRecord, NewRun, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail,
    TargetUpdate,
};
use crate::wire::records::{
    Millis, RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState, Trigger,
};

const RUN_COLUMNS: &str = "id, job, slot, trigger, state, reason, started, ended";
const IN_FLIGHT_SQL: &str = "('queued', 'dispatching', 'running')";

/// A target row's first eight columns (machine, state, reason, exit_code, started, ended,
/// suspended, limits).
fn target_record(op: Op, row: &Row) -> Result<TargetRecord, StoreError> {
    let state: String = col(op, row, 1)?;
    let reason: Option<String> = col(op, row, 2)?;
    Ok(TargetRecord {
        machine: col(op, row, 0)?,
        state: parse_name(op, "targets.state", &state, TargetState::parse)?,
        reason: reason
            .map(|text| parse_name(op, "targets.reason", &text, TargetReason::parse))
            .transpose()?,
        exit_code: col(op, row, 3)?,
        started: col(op, row, 4)?,
        ended: col(op, row, 5)?,
        suspended: col(op, row, 6)?,
        waiting: None,
        limits: col(op, row, 7)?,
    })
}

/// A run row (`RUN_COLUMNS`) with its targets.
fn complete_run(sql: &mut Sql<'_>, row: &Row) -> Result<RunRecord, StoreError> {
    let op = Op::ReadRuns;
    let id: i64 = col(op, row, 0)?;
    let trigger: String = col(op, row, 3)?;
    let state: String = col(op, row, 4)?;
    let targets = sql
        .rows(
            op,
            "SELECT machine, state, reason, exit_code, started, ended, suspended, limits
             FROM targets WHERE run_id = $1 ORDER BY machine",
            &[&id],
        )?
        .iter()
        .map(|row| target_record(op, row))
        .collect::<Result<_, _>>()?;
    Ok(RunRecord {
        id: from_db(op, "runs.id", id)?,
        job: col(op, row, 1)?,
        slot: col(op, row, 2)?,
        trigger: parse_name(op, "runs.trigger", &trigger, Trigger::parse)?,
        state: parse_name(op, "runs.state", &state, RunState::parse)?,
        reason: col(op, row, 5)?,
        started: col(op, row, 6)?,
        ended: col(op, row, 7)?,
        targets,
        attempts: Vec::new(),
    })
}

fn get_run(sql: &mut Sql<'_>, id: i64) -> Result<Option<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let text = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1");
    match sql.opt(op, &text, &[&id])? {
        Some(row) => complete_run(sql, &row).map(Some),
        None => Ok(None),
    }
}

fn get_target(
    sql: &mut Sql<'_>,
    id: i64,
    machine: &str,
) -> Result<Option<TargetDetail>, StoreError> {
    let op = Op::ReadRuns;
    let Some(row) = sql.opt(
        op,
        "SELECT machine, state, reason, exit_code, started, ended, suspended, limits,
         last_seen, wrapper_version, output_bytes, omitted_bytes, seq_contiguous,
         resume_key_sha256, token_used, attempt
         FROM targets WHERE run_id = $1 AND machine = $2",
        &[&id, &machine],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(TargetDetail {
        record: target_record(op, &row)?,
        last_seen: col(op, &row, 8)?,
        wrapper_version: col(op, &row, 9)?,
        output_bytes: from_db(op, "targets.output_bytes", col(op, &row, 10)?)?,
        omitted_bytes: from_db(op, "targets.omitted_bytes", col(op, &row, 11)?)?,
        contiguous_seq: from_db(op, "targets.seq_contiguous", col(op, &row, 12)?)?,
        resume_key_sha256: col(op, &row, 13)?,
        token_used: col(op, &row, 14)?,
        attempt: u32::try_from(from_db(
            op,
            "targets.attempt",
            i64::from(col::<i32>(op, &row, 15)?),
        )?)
        .unwrap_or(u32::MAX),
    }))
}

fn with_details(
    sql: &mut Sql<'_>,
    run: RunRecord,
) -> Result<(RunRecord, Vec<TargetDetail>), StoreError> {
    let id = to_db(Op::ReadRuns, "run id", run.id)?;
    let mut details = Vec::with_capacity(run.targets.len());
    for t in &run.targets {
        if let Some(d) = get_target(sql, id, &t.machine)? {
            details.push(d);
        }
    }
    Ok((run, details))
}

fn query_runs(
    sql: &mut Sql<'_>,
    text: &str,
    q: Option<&PgSelect>,
) -> Result<Vec<RunRecord>, StoreError> {
    let op = Op::ReadRuns;
    let rows = match q {
        Some(q) => sql.rows_uncached(op, text, &q.params())?,
        None => sql.rows(op, text, &[])?,
    };
    rows.iter().map(|row| complete_run(sql, row)).collect()
}

impl PgStore {
    pub fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> {
        let op = Op::CreateRun;
        self.atomic(op, |sql| {
            let rows = sql.rows(
                op,
                "INSERT INTO runs (job, slot, trigger, state, reason, created)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job, slot) DO NOTHING
                 RETURNING id",
                &[
                    &run.job,
                    &run.slot,
                    &run.trigger.as_str(),
                    &run.state.as_str(),
                    &run.reason,
                    &run.now,
                ],
            )?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let id: i64 = col(op, row, 0)?;
            for (machine, state) in &run.targets {
                sql.exec(
                    op,
                    "INSERT INTO targets (run_id, machine, state) VALUES ($1, $2, $3)
                     ON CONFLICT (run_id, machine) DO NOTHING",
                    &[&id, machine, &state.as_str()],
                )?;
            }
            Ok(Some(from_db(op, "runs.id", id)?))
        })
    }

    pub fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> {
        let op = Op::UpdateRun;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |sql| {
            let changed = sql.exec(
                op,
                "UPDATE runs SET state = coalesce($2, state), reason = coalesce($3, reason),
                 started = coalesce($4, started), ended = coalesce($5, ended)
                 WHERE id = $1",
                &[
                    &id,
                    &update.state.map(RunState::as_str),
                    &update.reason,
                    &update.started,
                    &update.ended,
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

    pub fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError> {
        let op = Op::UpdateTarget;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |sql| {
            let changed = sql.exec(
                op,
                "UPDATE targets SET state = coalesce($3, state),
                 reason = coalesce($4, reason), exit_code = coalesce($5, exit_code),
                 started = coalesce($6, started), ended = coalesce($7, ended),
                 last_seen = coalesce($8, last_seen),
                 wrapper_version = coalesce($9, wrapper_version),
                 resume_key_sha256 = coalesce($10, resume_key_sha256),
                 token_used = coalesce($11, token_used),
                 suspended = coalesce($12, suspended),
                 limits = coalesce($13, limits)
                 WHERE run_id = $1 AND machine = $2",
                &[
                    &id,
                    &machine,
                    &update.state.map(TargetState::as_str),
                    &update.reason.map(TargetReason::as_str),
                    &update.exit_code,
                    &update.started,
                    &update.ended,
                    &update.last_seen,
                    &update.wrapper_version,
                    &update.resume_key_sha256,
                    &update.token_used,
                    &update.suspended,
                    &update.limits,
                ],
            )?;
            if changed == 0 {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("target {machine} of run {run}"),
                });
            }
            Ok(())
        })
    }

    pub fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        let op = Op::ReadRuns;
        let id = to_db(op, "run id", run)?;
        let record = self.atomic(op, |sql| get_run(sql, id))?;
        match record {
            // As SQLite's: a run shown alone lists its targets' earlier attempts.
            Some(mut record) => {
                record.attempts = self.target_attempts(run)?;
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    pub fn run_details(
        &mut self,
        run: RunId,
    ) -> Result<Option<(RunRecord, Vec<TargetDetail>)>, StoreError> {
        let op = Op::ReadRuns;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |sql| match get_run(sql, id)? {
            Some(record) => with_details(sql, record).map(Some),
            None => Ok(None),
        })
    }

    pub fn in_flight_details(&mut self) -> Result<Vec<(RunRecord, Vec<TargetDetail>)>, StoreError> {
        let op = Op::ReadRuns;
        let text =
            format!("SELECT {RUN_COLUMNS} FROM runs WHERE state IN {IN_FLIGHT_SQL} ORDER BY id");
        self.atomic(op, |sql| {
            query_runs(sql, &text, None)?
                .into_iter()
                .map(|run| with_details(sql, run))
                .collect()
        })
    }

    pub fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let op = Op::ReadRuns;
        let mut q = PgSelect::new(format!("SELECT {RUN_COLUMNS} FROM runs"));
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
        self.atomic(op, |sql| query_runs(sql, &q.sql, Some(&q)))
    }

    pub fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError> {
        let text = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT max(id) FROM runs GROUP BY job)"
        );
        let runs = self.atomic(Op::ReadRuns, |sql| query_runs(sql, &text, None))?;
        Ok(runs.into_iter().map(|run| (run.job.clone(), run)).collect())
    }

    pub fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError> {
        let op = Op::ReadRuns;
        self.atomic(op, |sql| {
            sql.rows(
                op,
                "SELECT job, max(slot) FROM runs WHERE slot IS NOT NULL GROUP BY job",
                &[],
            )?
            .iter()
            .map(|row| Ok((col(op, row, 0)?, col(op, row, 1)?)))
            .collect()
        })
    }

    pub fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError> {
        let op = Op::Prune;
        let text = format!(
            "SELECT r.id, r.created,
             (SELECT coalesce(sum(t.head_bytes + t.tail_bytes), 0)::BIGINT
              FROM targets t WHERE t.run_id = r.id)
             FROM runs r WHERE r.job = $1 AND r.state NOT IN {IN_FLIGHT_SQL}
             ORDER BY r.id DESC"
        );
        self.atomic(op, |sql| {
            let runs = sql.rows(op, &text, &[&job])?;
            let mut outcome = PruneOutcome::default();
            let mut kept_bytes: u64 = 0;
            for (index, row) in runs.iter().enumerate() {
                let id: i64 = col(op, row, 0)?;
                let created: Millis = col(op, row, 1)?;
                let bytes = from_db(op, "targets.head_bytes", col(op, row, 2)?)?;
                let over_count = retention.keep_runs.is_some_and(|keep| index >= keep);
                let too_old = retention.older_than.is_some_and(|limit| created < limit);
                let over_bytes = index > 0
                    && retention
                        .max_output_bytes
                        .is_some_and(|max| kept_bytes.saturating_add(bytes) > max);
                if over_count || too_old || over_bytes {
                    sql.exec(op, "DELETE FROM runs WHERE id = $1", &[&id])?;
                    outcome.runs += 1;
                    outcome.output_bytes += bytes;
                } else {
                    kept_bytes = kept_bytes.saturating_add(bytes);
                }
            }
            Ok(outcome)
        })
    }

    pub fn retry_target(
        &mut self,
        run: RunId,
        machine: &str,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let op = Op::UpdateTarget;
        let run_id = to_db(op, "run id", run)?;
        let attempt = i32::try_from(attempt).map_err(|_| StoreError::Invalid {
            op,
            reason: format!("attempt {attempt} is out of range"),
        })?;
        self.atomic(op, |sql| {
            let copied = sql.exec(
                op,
                "INSERT INTO target_attempts
                 (run_id, machine, attempt, reason, exit_code, started, ended)
                 SELECT run_id, machine, attempt, reason, exit_code, started, ended
                 FROM targets WHERE run_id = $1 AND machine = $2
                 ON CONFLICT (run_id, machine, attempt) DO UPDATE SET
                 reason = excluded.reason, exit_code = excluded.exit_code,
                 started = excluded.started, ended = excluded.ended",
                &[&run_id, &machine],
            )?;
            if copied == 0 {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("target {machine} of run {run}"),
                });
            }
            sql.exec(
                op,
                "UPDATE targets SET state = 'pending', reason = NULL, exit_code = NULL,
                 started = NULL, ended = NULL, token_used = FALSE, resume_key_sha256 = NULL,
                 suspended = FALSE, limits = NULL,
                 seq_contiguous = 0, seq_pending = 0, attempt = $3
                 WHERE run_id = $1 AND machine = $2",
                &[&run_id, &machine, &attempt],
            )?;
            sql.exec(
                op,
                "DELETE FROM output_seen WHERE run_id = $1 AND machine = $2",
                &[&run_id, &machine],
            )?;
            Ok(())
        })
    }

    pub fn target_attempts(&mut self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError> {
        let op = Op::ReadRuns;
        let run_id = to_db(op, "run id", run)?;
        self.atomic(op, |sql| {
            let rows = sql.rows(
                op,
                "SELECT machine, attempt, reason, exit_code, started, ended FROM target_attempts
                 WHERE run_id = $1
                 UNION ALL
                 SELECT machine, attempt, reason, exit_code, started, ended FROM targets
                 WHERE run_id = $1 AND attempt > 1
                 ORDER BY 1, 2",
                &[&run_id],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let attempt: i32 = col(op, row, 1)?;
                let reason: Option<String> = col(op, row, 2)?;
                out.push(AttemptRecord {
                    machine: col(op, row, 0)?,
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    reason: reason
                        .map(|r| parse_name(op, "reason", &r, TargetReason::parse))
                        .transpose()?,
                    exit_code: col(op, row, 3)?,
                    started: col(op, row, 4)?,
                    ended: col(op, row, 5)?,
                });
            }
            Ok(out)
        })
    }
}
