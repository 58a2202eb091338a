//! Runs and their targets in the store: creation (at most once per job and scheduled
//! slot), updates, queries for the CLI/API and restart recovery, and retention.
//!
//! A scheduled slot is recorded at most once because `runs` has `UNIQUE (job, slot)`:
//! [`Store::create_run`] answers `None` for a slot already recorded, also across
//! restarts. Manual runs have no slot (NULLs never collide). Run ids come from
//! `AUTOINCREMENT`, so a pruned run's id is never handed out again (it is also the
//! `SP_RUN` of wrappers that may still be out there).

use std::collections::BTreeMap;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::store::{Op, Select, Store, StoreError, from_db, parse_name, sql_error, to_db};
use crate::wire::db::{
    NewRun, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail, TargetUpdate,
};
use crate::wire::records::{
    Millis, RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState, Trigger,
};

const RUN_COLUMNS: &str = "id, job, slot, trigger, state, reason, started, ended";

/// SQL list of the non-final run states; must match the partial index `runs_in_flight`.
pub(crate) const IN_FLIGHT_SQL: &str = "('queued', 'dispatching', 'running')";

/// A `runs` row as read, before its names are parsed.
struct RunRow {
    id: i64,
    job: String,
    slot: Option<Millis>,
    trigger: String,
    state: String,
    reason: Option<String>,
    started: Option<Millis>,
    ended: Option<Millis>,
}

fn read_run_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: row.get(0)?,
        job: row.get(1)?,
        slot: row.get(2)?,
        trigger: row.get(3)?,
        state: row.get(4)?,
        reason: row.get(5)?,
        started: row.get(6)?,
        ended: row.get(7)?,
    })
}

impl Store {
    /// Records a run and its targets; `None` when the job's slot is already recorded.
    pub fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> {
        let op = Op::CreateRun;
        self.atomic(op, |conn| {
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO runs (job, slot, trigger, state, reason, created)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (job, slot) DO NOTHING",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        run.job,
                        run.slot,
                        run.trigger.as_str(),
                        run.state.as_str(),
                        run.reason,
                        run.now
                    ])
                })
                .map_err(sql_error(op))?;
            if inserted == 0 {
                return Ok(None);
            }
            let id = conn.last_insert_rowid();
            insert_targets(conn, op, id, &run.targets)?;
            Ok(Some(from_db(op, "runs.id", id)?))
        })
    }

    /// Adds targets to an existing run; machines it already has are left as they are.
    /// Returns how many were added.
    pub fn add_targets(
        &mut self,
        run: RunId,
        targets: &[(String, TargetState)],
    ) -> Result<u64, StoreError> {
        let op = Op::AddTargets;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |conn| {
            if !run_exists(conn, op, id)? {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("run {run}"),
                });
            }
            insert_targets(conn, op, id, targets)
        })
    }

    /// Changes the given fields of a run.
    pub fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> {
        let op = Op::UpdateRun;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE runs SET state = coalesce(?2, state), reason = coalesce(?3, reason),
                     started = coalesce(?4, started), ended = coalesce(?5, ended)
                     WHERE id = ?1",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        id,
                        update.state.map(RunState::as_str),
                        update.reason,
                        update.started,
                        update.ended
                    ])
                })
                .map_err(sql_error(op))?;
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
    pub fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError> {
        let op = Op::UpdateTarget;
        let id = to_db(op, "run id", run)?;
        self.atomic(op, |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE targets SET state = coalesce(?3, state),
                     reason = coalesce(?4, reason), exit_code = coalesce(?5, exit_code),
                     started = coalesce(?6, started), ended = coalesce(?7, ended),
                     last_seen = coalesce(?8, last_seen),
                     wrapper_version = coalesce(?9, wrapper_version),
                     resume_key_sha256 = coalesce(?10, resume_key_sha256),
                     token_used = coalesce(?11, token_used),
                     suspended = coalesce(?12, suspended),
                     limits = coalesce(?13, limits)
                     WHERE run_id = ?1 AND machine = ?2",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        id,
                        machine,
                        update.state.map(TargetState::as_str),
                        update.reason.map(TargetReason::as_str),
                        update.exit_code,
                        update.started,
                        update.ended,
                        update.last_seen,
                        update.wrapper_version,
                        update.resume_key_sha256,
                        update.token_used,
                        update.suspended,
                        update.limits
                    ])
                })
                .map_err(sql_error(op))?;
            if changed == 0 {
                return Err(StoreError::NotFound {
                    op,
                    what: format!("target {machine} of run {run}"),
                });
            }
            Ok(())
        })
    }

    /// One run with its targets.
    pub fn get_run(&self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        let op = Op::ReadRuns;
        let id = to_db(op, "run id", run)?;
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
        let row = self
            .conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| stmt.query_row([id], read_run_row).optional())
            .map_err(sql_error(op))?;
        let Some(mut record) = row.map(|row| self.complete_run(row)).transpose()? else {
            return Ok(None);
        };
        record.attempts = self.target_attempts(run)?;
        Ok(Some(record))
    }

    /// One target of a run with its bookkeeping columns.
    pub fn get_target(
        &self,
        run: RunId,
        machine: &str,
    ) -> Result<Option<TargetDetail>, StoreError> {
        let op = Op::ReadRuns;
        let id = to_db(op, "run id", run)?;
        let row = self
            .conn
            .prepare_cached(
                "SELECT machine, state, reason, exit_code, started, ended, suspended, limits,
                 last_seen, wrapper_version, output_bytes, omitted_bytes, seq_contiguous,
                 resume_key_sha256, token_used, attempt
                 FROM targets WHERE run_id = ?1 AND machine = ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![id, machine], |row| {
                    Ok((
                        read_target_row(row)?,
                        row.get::<_, Option<Millis>>(8)?,
                        row.get::<_, Option<String>>(9)?,
                        row.get::<_, i64>(10)?,
                        row.get::<_, i64>(11)?,
                        row.get::<_, i64>(12)?,
                        row.get::<_, Option<String>>(13)?,
                        row.get::<_, bool>(14)?,
                        row.get::<_, i64>(15)?,
                    ))
                })
                .optional()
            })
            .map_err(sql_error(op))?;
        let Some((
            target,
            last_seen,
            wrapper_version,
            output,
            omitted,
            seq,
            key,
            token_used,
            attempt,
        )) = row
        else {
            return Ok(None);
        };
        Ok(Some(TargetDetail {
            record: target.parse(op)?,
            last_seen,
            wrapper_version,
            output_bytes: from_db(op, "targets.output_bytes", output)?,
            omitted_bytes: from_db(op, "targets.omitted_bytes", omitted)?,
            contiguous_seq: from_db(op, "targets.seq_contiguous", seq)?,
            resume_key_sha256: key,
            token_used,
            attempt: u32::try_from(from_db(op, "targets.attempt", attempt)?).unwrap_or(u32::MAX),
        }))
    }

    /// One run with the session details of its targets.
    pub fn run_details(
        &self,
        run: RunId,
    ) -> Result<Option<(RunRecord, Vec<TargetDetail>)>, StoreError> {
        let Some(record) = self.get_run(run)? else {
            return Ok(None);
        };
        let mut details = Vec::new();
        for t in &record.targets {
            if let Some(d) = self.get_target(run, &t.machine)? {
                details.push(d);
            }
        }
        Ok(Some((record, details)))
    }

    /// Runs in flight with the session details of their targets (restart recovery).
    pub fn in_flight_details(&self) -> Result<Vec<(RunRecord, Vec<TargetDetail>)>, StoreError> {
        let mut out = Vec::new();
        for run in self.in_flight_runs()? {
            let mut details = Vec::new();
            for t in &run.targets {
                if let Some(d) = self.get_target(run.id, &t.machine)? {
                    details.push(d);
                }
            }
            out.push((run, details));
        }
        Ok(out)
    }

    /// Runs matching `filter`, newest first, with their targets.
    pub fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let op = Op::ReadRuns;
        let mut q = Select::new(format!("SELECT {RUN_COLUMNS} FROM runs"));
        if let Some(job) = &filter.job {
            q.and("job =", job.clone().into());
        }
        if let Some(state) = filter.state {
            q.and("state =", state.as_str().to_string().into());
        }
        if let Some(since) = filter.since {
            q.and("created >=", since.into());
        }
        if let Some(until) = filter.until {
            q.and("created <=", until.into());
        }
        if let Some(before) = filter.before_id {
            q.and("id <", to_db(op, "run id", before)?.into());
        }
        q.sql.push_str(" ORDER BY id DESC");
        if let Some(limit) = filter.limit {
            q.sql
                .push_str(&format!(" LIMIT {}", to_db(op, "limit", limit as u64)?));
        }
        self.query_runs(&q.sql, q.args)
    }

    /// The newest run of every job that has one.
    pub fn last_run_per_job(&self) -> Result<BTreeMap<String, RunRecord>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT max(id) FROM runs GROUP BY job)"
        );
        let runs = self.query_runs(&sql, Vec::new())?;
        Ok(runs.into_iter().map(|run| (run.job.clone(), run)).collect())
    }

    /// The newest recorded slot of every job that has one (manual runs have none). Served
    /// by the `UNIQUE (job, slot)` index.
    pub fn last_slot_per_job(&self) -> Result<BTreeMap<String, Millis>, StoreError> {
        let op = Op::ReadRuns;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT job, max(slot) FROM runs WHERE slot IS NOT NULL GROUP BY job")
            .map_err(sql_error(op))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<BTreeMap<String, Millis>>>())
            .map_err(sql_error(op))?;
        Ok(rows)
    }

    /// Runs in a non-final state, oldest first: what `main` recovers after a restart.
    pub fn in_flight_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let sql =
            format!("SELECT {RUN_COLUMNS} FROM runs WHERE state IN {IN_FLIGHT_SQL} ORDER BY id");
        self.query_runs(&sql, Vec::new())
    }

    /// Whether a run of `job` for the scheduled `slot` is already recorded.
    pub fn slot_recorded(&self, job: &str, slot: Millis) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached("SELECT 1 FROM runs WHERE job = ?1 AND slot = ?2")
            .and_then(|mut stmt| stmt.exists(params![job, slot]))
            .map_err(sql_error(Op::ReadRuns))
    }

    /// Every job name that has runs (retention also covers jobs gone from the config).
    pub fn known_jobs(&self) -> Result<Vec<String>, StoreError> {
        let op = Op::ReadRuns;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT job FROM runs ORDER BY job")
            .map_err(sql_error(op))?;
        let jobs = stmt
            .query_map([], |row| row.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
            .map_err(sql_error(op))?;
        Ok(jobs)
    }

    /// Removes final runs of `job` (with their targets and output) as `retention` says.
    pub fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError> {
        let op = Op::Prune;
        self.atomic(op, |conn| {
            let sql = format!(
                "SELECT r.id, r.created,
                 (SELECT coalesce(sum(t.head_bytes + t.tail_bytes), 0)
                  FROM targets t WHERE t.run_id = r.id)
                 FROM runs r WHERE r.job = ?1 AND r.state NOT IN {IN_FLIGHT_SQL}
                 ORDER BY r.id DESC"
            );
            let runs = conn
                .prepare_cached(&sql)
                .and_then(|mut stmt| {
                    stmt.query_map([job], |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, Millis>(1)?,
                            row.get::<_, i64>(2)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(sql_error(op))?;
            let mut outcome = PruneOutcome::default();
            let mut kept_bytes: u64 = 0;
            let mut delete = conn
                .prepare_cached("DELETE FROM runs WHERE id = ?1")
                .map_err(sql_error(op))?;
            for (index, (id, created, bytes)) in runs.into_iter().enumerate() {
                let bytes = from_db(op, "targets.head_bytes", bytes)?;
                let over_count = retention.keep_runs.is_some_and(|keep| index >= keep);
                let too_old = retention.older_than.is_some_and(|limit| created < limit);
                let over_bytes = index > 0
                    && retention
                        .max_output_bytes
                        .is_some_and(|max| kept_bytes.saturating_add(bytes) > max);
                if over_count || too_old || over_bytes {
                    delete.execute([id]).map_err(sql_error(op))?;
                    outcome.runs += 1;
                    outcome.output_bytes += bytes;
                } else {
                    kept_bytes = kept_bytes.saturating_add(bytes);
                }
            }
            Ok(outcome)
        })
    }

    fn query_runs(&self, sql: &str, args: Vec<Value>) -> Result<Vec<RunRecord>, StoreError> {
        let op = Op::ReadRuns;
        let rows = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_map(params_from_iter(args), read_run_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(sql_error(op))?;
        rows.into_iter().map(|row| self.complete_run(row)).collect()
    }

    /// Parses a run row and loads its targets.
    fn complete_run(&self, row: RunRow) -> Result<RunRecord, StoreError> {
        let op = Op::ReadRuns;
        let targets = self
            .conn
            .prepare_cached(
                "SELECT machine, state, reason, exit_code, started, ended, suspended, limits
                 FROM targets WHERE run_id = ?1 ORDER BY machine",
            )
            .and_then(|mut stmt| {
                stmt.query_map([row.id], read_target_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(sql_error(op))?;
        Ok(RunRecord {
            id: from_db(op, "runs.id", row.id)?,
            job: row.job,
            slot: row.slot,
            trigger: parse_name(op, "runs.trigger", &row.trigger, Trigger::parse)?,
            state: parse_name(op, "runs.state", &row.state, RunState::parse)?,
            reason: row.reason,
            started: row.started,
            ended: row.ended,
            targets: targets
                .into_iter()
                .map(|target| target.parse(op))
                .collect::<Result<_, _>>()?,
            attempts: Vec::new(),
        })
    }
}

/// A `targets` row as read, before its names are parsed.
struct TargetRow {
    machine: String,
    state: String,
    reason: Option<String>,
    exit_code: Option<i32>,
    started: Option<Millis>,
    ended: Option<Millis>,
    suspended: bool,
    limits: Option<String>,
}

impl TargetRow {
    fn parse(self, op: Op) -> Result<TargetRecord, StoreError> {
        Ok(TargetRecord {
            machine: self.machine,
            state: parse_name(op, "targets.state", &self.state, TargetState::parse)?,
            reason: self
                .reason
                .map(|text| parse_name(op, "targets.reason", &text, TargetReason::parse))
                .transpose()?,
            exit_code: self.exit_code,
            started: self.started,
            ended: self.ended,
            suspended: self.suspended,
            waiting: None,
            limits: self.limits,
        })
    }
}

fn read_target_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TargetRow> {
    Ok(TargetRow {
        machine: row.get(0)?,
        state: row.get(1)?,
        reason: row.get(2)?,
        exit_code: row.get(3)?,
        started: row.get(4)?,
        ended: row.get(5)?,
        suspended: row.get(6)?,
        limits: row.get(7)?,
    })
}

fn run_exists(conn: &Connection, op: Op, id: i64) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM runs WHERE id = ?1")
        .and_then(|mut stmt| stmt.exists([id]))
        .map_err(sql_error(op))
}

fn insert_targets(
    conn: &Connection,
    op: Op,
    run: i64,
    targets: &[(String, TargetState)],
) -> Result<u64, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO targets (run_id, machine, state) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id, machine) DO NOTHING",
        )
        .map_err(sql_error(op))?;
    let mut added = 0;
    for (machine, state) in targets {
        added += stmt
            .execute(params![run, machine, state.as_str()])
            .map_err(sql_error(op))? as u64;
    }
    Ok(added)
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
