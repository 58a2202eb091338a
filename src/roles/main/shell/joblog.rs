//! Job logs: what main tells db to write to `{logdir}/{job}.log` and to export to
//! Elasticsearch/OpenSearch (`roles/db/joblog.rs` writes and queues; the outbox of
//! `notify/` sends). Nothing is sent when neither `logdir` nor an export is set.
//!
//! Events: `start` when a run is recorded, `machine_result` per target and `end` when it
//! ends, `overlap` and `maintenance` for slots not run for those reasons.

use crate::config::Job;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::DbRequest;
use crate::wire::notify::{ExportDest, JobLog, JobLogEntry};
use crate::wire::records::now_ms;
use crate::wire::records::{Millis, RunId, TargetState};

fn send(core: &mut Main, job: &Job, run: Option<RunId>, entries: Vec<JobLogEntry>) {
    let logs = &core.config.saltpeter.logs;
    let exports: Vec<ExportDest> = logs
        .exports()
        .into_iter()
        .map(|e| ExportDest {
            name: e.name.to_string(),
            url: e.url,
            index: e.index,
        })
        .collect();
    if logs.logdir.is_none() && exports.is_empty() {
        return;
    }
    let instance = match run {
        Some(run) => format!("{}_{run}", job.name),
        None => job.name.clone(),
    };
    let log = JobLog {
        job: job.name.clone(),
        group: job.group.to_string(),
        instance,
        run,
        entries,
        logdir: logs.logdir.clone(),
        max_bytes: logs.log_max_bytes,
        keep: logs.log_keep,
        exports,
    };
    core.db_call(DbRequest::JobLog(log), DbWait::write("a job log"));
}

fn entry(msg_type: &str, machine: Option<&str>, code: Option<i32>, at: Millis) -> JobLogEntry {
    JobLogEntry {
        msg_type: msg_type.to_string(),
        machine: machine.map(str::to_string),
        return_code: code,
        at,
        output_of_run: None,
    }
}

/// A run was recorded.
pub(crate) fn run_started(core: &mut Main, job: &Job, run: RunId) {
    send(
        core,
        job,
        Some(run),
        vec![entry("start", None, None, now_ms())],
    );
}

/// A run ended: each target's result, then `end`.
pub(crate) fn run_ended(core: &mut Main, active: &ActiveRun) {
    let now = now_ms();
    let mut entries: Vec<JobLogEntry> = active
        .targets()
        .iter()
        .filter(|(_, t)| t.state() != TargetState::SkippedMaintenance)
        .map(|(m, t)| {
            let r = t.record(m);
            JobLogEntry {
                output_of_run: Some(active.id()),
                ..entry(
                    "machine_result",
                    Some(m),
                    r.exit_code,
                    r.ended.unwrap_or(now),
                )
            }
        })
        .collect();
    entries.push(entry("end", None, None, now));
    send(core, &active.job().clone(), Some(active.id()), entries);
}

/// A slot was not run: logged for overlap and maintenance, as the original did.
pub(crate) fn slot_skipped(core: &mut Main, job: &Job, reason: &str) {
    let msg_type = if reason.starts_with("overlap") {
        "overlap"
    } else if reason.starts_with("maintenance") {
        "maintenance"
    } else {
        return;
    };
    send(core, job, None, vec![entry(msg_type, None, None, now_ms())]);
}
