//! The audit trail and retention: what main records about runs besides their state.
//!
//! - Events: who or what started, skipped, killed, lost and reconciled each run and
//!   target, in db's `events` table (`saltpeterctl events` reads them).
//! - Retention: each time a run of a job ends (and for every job at start-up) db prunes
//!   the job's final runs beyond `saltpeter_config.retention` (count, age, bytes) and then
//!   gives the freed pages back to the file system.

use chrono::Utc;

use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::ipc::rpc::Due;
use crate::logsafe::cut;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::NewEvent;
use crate::wire::db::Retention;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::records::{RunId, now_ms};

/// How many characters of a job name or machine id an event row holds.
pub(crate) const EVENT_NAME_MAX: usize = crate::logsafe::NAME_MAX;
/// How many characters of a message an event row holds.
pub(crate) const EVENT_MESSAGE_MAX: usize = 4096;
/// How soon a run's retention is due (`apply_retention`).
const RETENTION_WITHIN_MS: i64 = 60_000;

impl Main {
    /// Record an event in the audit trail. Its strings are bounded ([`EVENT_NAME_MAX`],
    /// [`EVENT_MESSAGE_MAX`]): a machine id or message can come from a peer, and a row
    /// stays until it ages out.
    pub(crate) fn event(
        &mut self,
        kind: &str,
        job: Option<&str>,
        run: Option<RunId>,
        machine: Option<&str>,
        message: String,
    ) {
        self.db_call(
            DbRequest::RecordEvent(NewEvent {
                at: Utc::now().timestamp_millis(),
                kind: kind.to_string(),
                job: job.map(|j| cut(j, EVENT_NAME_MAX)),
                run,
                machine: machine.map(|m| cut(m, EVENT_NAME_MAX)),
                message: cut(
                    &match self.actor.name() {
                        Some(who) => format!("{message} (by {who})"),
                        None => message,
                    },
                    EVENT_MESSAGE_MAX,
                ),
                uid: self.actor.uid(),
            }),
            DbWait::write("an event"),
        );
    }

    /// Prune `job`'s history to the configured retention. Nothing waits for it: db may
    /// hold it for [`RETENTION_WITHIN_MS`] and commit it with whatever comes next (after
    /// each run, it was a commit of its own).
    pub(crate) fn apply_retention(&mut self, job: &str) {
        let r = &self.config.saltpeter.retention;
        let nonzero = |v: u64| (v > 0).then_some(v);
        let retention = Retention {
            keep_runs: nonzero(r.runs).map(|n| n as usize),
            older_than: nonzero(r.days)
                .map(|d| Utc::now().timestamp_millis() - (d as i64) * 86_400_000),
            max_output_bytes: nonzero(r.bytes),
        };
        self.db_call_due(
            DbRequest::Prune {
                job: job.to_string(),
                retention,
            },
            DbWait::with(job.to_string(), |core, job, result| {
                core.pruned(&job, result)
            }),
            Due::By(now_ms() + RETENTION_WITHIN_MS),
        );
    }

    /// Retention for every configured job (at start-up: history older than this run).
    pub(crate) fn apply_retention_to_all(&mut self) {
        let jobs: Vec<String> = self.config.jobs.keys().cloned().collect();
        for job in jobs {
            self.apply_retention(&job);
        }
    }

    /// db pruned a job: reclaim the space if anything went.
    pub(crate) fn pruned(&mut self, job: &str, result: Result<DbReply, CallError>) {
        match calls::Prune::take(result) {
            Ok(outcome) if outcome.runs > 0 => {
                log::info!(
                    "retention: removed {} old run(s) of {job} ({} bytes of output)",
                    outcome.runs,
                    outcome.output_bytes
                );
                self.db_call(DbRequest::Reclaim, DbWait::write("reclaimed space"));
            }
            Ok(_) => {}
            Err(e) => log::warn!("retention of {job} failed: {e}"),
        }
    }
}
