//! The audit trail and retention: what main records about runs besides their state.
//!
//! - Events (`Main::event`): who or what started, skipped, killed, lost and reconciled
//!   each run and target, in db's `events` table (`saltpeterctl events` reads them).
//! - Retention: each time a run of a job ends (and at start-up for every configured job
//!   with a recorded run) db prunes the job's final runs beyond
//!   `saltpeter_config.retention` (count, age, bytes) and then gives the freed pages back
//!   to the file system.

use chrono::Utc;

use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::Retention;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::records::now_ms;

/// How soon a run's retention is due (`apply_retention`).
const RETENTION_WITHIN_MS: i64 = 60_000;

/// Prune `job`'s history to the configured retention. Nothing waits for it: db may hold
/// it for [`RETENTION_WITHIN_MS`] and commit it with whatever comes next (after each run,
/// it was a commit of its own).
pub(crate) fn apply_retention(core: &mut Main, job: &str) {
    let r = &core.config.saltpeter.retention;
    let nonzero = |v: u64| (v > 0).then_some(v);
    let retention = Retention {
        keep_runs: nonzero(r.runs).map(|n| n as usize),
        older_than: nonzero(r.days)
            .map(|d| Utc::now().timestamp_millis() - (d as i64) * 86_400_000),
        max_output_bytes: nonzero(r.bytes),
    };
    core.db_call_due(
        DbRequest::Prune {
            job: job.to_string(),
            retention,
        },
        DbWait::with(job.to_string(), |core, job, result| {
            pruned(core, &job, result)
        }),
        Due::By(now_ms() + RETENTION_WITHIN_MS),
    );
}

/// Retention for every configured job (at start-up: history older than this run). Only
/// the jobs with a recorded run have anything to prune: db names them first, so a
/// configuration of 200,000 jobs (valid or not) that never ran does not queue 200,000
/// prunes in front of the first answer that reads the database.
pub(crate) fn apply_retention_to_all(core: &mut Main) {
    core.db_call(
        DbRequest::LastRuns,
        DbWait::then(|core, _, result| match calls::LastRuns::take(result) {
            Ok(last) => {
                let jobs: Vec<String> = last
                    .into_keys()
                    .filter(|job| core.config.jobs.contains_key(job))
                    .collect();
                for job in jobs {
                    apply_retention(core, &job);
                }
            }
            Err(e) => log::warn!("retention: could not list the jobs with runs: {e}"),
        }),
    );
}

/// db pruned a job: reclaim the space if anything went.
fn pruned(core: &mut Main, job: &str, result: Result<DbReply, CallError>) {
    match calls::Prune::take(result) {
        Ok(outcome) if outcome.runs > 0 => {
            log::info!(
                "retention: removed {} old run(s) of {job} ({} bytes of output)",
                outcome.runs,
                outcome.output_bytes
            );
            core.db_call(DbRequest::Reclaim, DbWait::write("reclaimed space"));
        }
        Ok(_) => {}
        Err(e) => log::warn!("retention of {job} failed: {e}"),
    }
}
