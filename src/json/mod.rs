//! The JSON shapes Saltpeter shows, in one role-free place: `saltpeterctl --json`, the
//! HTTP API and `/ws` all render from here, so a run looks the same everywhere and no
//! daemon role depends on the command-line tool.
//!
//! - this module: instants, runs, targets, jobs, the status (`saltpeterctl --json` and
//!   `/api/v1/...` share them);
//! - `ui`: the original Saltpeter UI protocol of `/ws`, rendered from the typed views
//!   main sends the hub (`crate::wire::ui`).

pub(crate) mod ui;

use serde_json::{Value, json};

use crate::wire::admin::{JobInfo, StatusInfo};
use crate::wire::records::{Millis, RunRecord, TargetRecord, rfc3339};

/// The line shown where the output limit left bytes out.
pub(crate) fn elision_marker(omitted: u64) -> String {
    format!("\n[saltpeter: {omitted} bytes of output left out here (output_limit)]\n")
}

/// An instant in Saltpeter's one JSON time format (`crate::wire::records::rfc3339`), or
/// null.
pub(crate) fn time(ms: Option<Millis>) -> Value {
    match ms.and_then(rfc3339) {
        Some(t) => Value::String(t),
        None => Value::Null,
    }
}

pub(crate) fn target_json(t: &TargetRecord) -> Value {
    json!({
        "machine": t.machine,
        "state": t.state.as_str(),
        "reason": t.reason.map(|r| r.as_str()),
        "exit_code": t.exit_code,
        "started": time(t.started),
        "ended": time(t.ended),
        "suspended": t.suspended,
        "waiting": t.waiting,
        "limits": t.limits,
        "server": t.server,
    })
}

pub(crate) fn run_json(r: &RunRecord) -> Value {
    json!({
        "id": r.id,
        "job": r.job,
        "slot": time(r.slot),
        "trigger": r.trigger.as_str(),
        "state": r.state.as_str(),
        "reason": r.reason,
        "started": time(r.started),
        "ended": time(r.ended),
        "targets": r.targets.iter().map(|t| {
            let mut v = target_json(t);
            let attempts: Vec<Value> = r
                .attempts
                .iter()
                .filter(|a| a.machine == t.machine)
                .map(attempt_json)
                .collect();
            if !attempts.is_empty() {
                v["attempts"] = Value::Array(attempts);
            }
            v
        }).collect::<Vec<_>>(),
    })
}

/// One attempt of a target that was tried more than once (in its target's `attempts`).
pub(crate) fn attempt_json(a: &crate::wire::db::AttemptRecord) -> Value {
    json!({
        "attempt": a.attempt,
        "reason": a.reason.map(|r| r.as_str()),
        "exit_code": a.exit_code,
        "started": time(a.started),
        "ended": time(a.ended),
    })
}

pub(crate) fn job_json(j: &JobInfo) -> Value {
    json!({
        "name": j.name,
        "group": j.group,
        "next_run": time(j.next_run),
        "last_run": time(j.last_run),
        "last_result": j.last_result.map(|s| s.as_str()),
        "enabled": j.enabled,
        "error": j.error,
        "paused": j.paused,
        "inactive": j.inactive,
    })
}

pub(crate) fn status_json(s: &StatusInfo) -> Value {
    json!({
        "version": s.version,
        "started_at": time(Some(s.started_at)),
        "uptime_s": s.uptime_s,
        "processes": s.processes.iter().map(|p| json!({"role": p.role, "pid": p.pid})).collect::<Vec<_>>(),
        "jobs": s.jobs,
        "running_runs": s.running_runs,
        "config_errors": s.config_errors,
        "wrapper_port": s.wrapper_port,
        "db_error": s.db_error,
        "api_port": s.api_port,
        "ha": s.ha.as_ref().map(|h| json!({
            "server": h.server,
            "role": h.role,
            "leader": h.leader,
        })),
    })
}
