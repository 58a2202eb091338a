//! The messages of `/ws`, the original Saltpeter UI protocol (docs/api.md, `/ws`),
//! rendered from the typed views main sends the hub (`crate::wire::ui`).
//!
//! Keys without a value are left out, as the original left them out (`last_run` of a job
//! that never ran, `next_run` of a disabled job): the UI reads a `null` as 1970-01-01.
//! Positions and lengths count characters of the output decoded from UTF-8.

use serde_json::{Map, Value, json};

use crate::wire::records::{Millis, RunRecord};
use crate::wire::ui::{
    ConfigView, CronEntryView, CronView, DetailsView, StatusView, TargetView, instance,
};

const SP_VERSION: &str = env!("CARGO_PKG_VERSION");

/// An instant as the original UI reads it: RFC 3339 in UTC with a `Z`, a fraction only
/// when there is one, or null (left out). Deliberately not `crate::json::time`: the
/// original UI is a client Saltpeter does not change, so what `/ws` sends stays as it is
/// whatever Saltpeter's own JSON does.
fn time(ms: Option<Millis>) -> Value {
    match ms.and_then(chrono::DateTime::from_timestamp_millis) {
        Some(t) => Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        None => Value::Null,
    }
}

/// Remove every `null` member of objects, at any depth (arrays keep their items).
pub(crate) fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, item| !item.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// A job as a `config.crons` entry: its keys, the seven cron fields, `env` values `***`
/// (also the `config` of `/api/v1/jobs/NAME`).
pub(crate) fn cron_json(entry: &CronEntryView) -> Value {
    match entry {
        CronEntryView::Valid(c) => valid_cron_json(c),
        CronEntryView::Invalid {
            name,
            group,
            file,
            error,
        } => json!({
            "name": name,
            "group": group,
            "file": file,
            "enabled": false,
            "error": error,
        }),
    }
}

fn valid_cron_json(c: &CronView) -> Value {
    let env: Map<String, Value> = c
        .env_names
        .iter()
        .map(|k| (k.clone(), Value::from("***")))
        .collect();
    let mut v = json!({
        "name": c.name,
        "group": c.group,
        "file": c.file,
        "line": c.line,
        "schedule": c.schedule,
        "timezone": c.timezone,
        "command": c.command,
        "targets": c.targets,
        "target_expr": c.target_expr,
        "target_type": c.target_type,
        "executor": c.executor,
        "user": c.user,
        "cwd": c.cwd,
        "env": env,
        "timeout": c.timeout,
        "kill_grace": c.kill_grace,
        "number_of_targets": c.number_of_targets,
        "batch_size": c.batch_size,
        "overlap": c.overlap,
        "missed": c.missed,
        "missed_deadline": c.missed_deadline,
        "splay": c.splay,
        "enabled": c.enabled,
        "output_limit": {"head": c.output_limit_head, "tail": c.output_limit_tail},
        "wrapper_path": c.wrapper_path,
        "saltpeter_server_host": c.server_host,
    });
    let fields: Vec<&str> = c.schedule.split_whitespace().collect();
    if let (Value::Object(map), [sec, min, hour, dom, mon, dow, year]) = (&mut v, fields.as_slice())
    {
        for (key, value) in [
            ("sec", sec),
            ("min", min),
            ("hour", hour),
            ("dom", dom),
            ("mon", mon),
            ("dow", dow),
            ("year", year),
        ] {
            map.insert(key.to_string(), Value::from(*value));
        }
    }
    v
}

/// `{"type": "config", ...}`.
pub(crate) fn config_message(c: &ConfigView) -> Value {
    let crons: Map<String, Value> = c
        .crons
        .iter()
        .map(|e| {
            let name = match e {
                CronEntryView::Valid(v) => &v.name,
                CronEntryView::Invalid { name, .. } => name,
            };
            (name.clone(), cron_json(e))
        })
        .collect();
    let s = &c.settings;
    let mut v = json!({
        "type": "config",
        "config": {
            "crons": crons,
            "maintenance": {
                "global": c.maintenance_global,
                "machines": c.maintenance_machines,
            },
            "saltpeter_config": {
                "api_ws": s.api_ws,
                "api_ws_port": s.api_ws_port,
                "api_ws_bind_addr": s.api_ws_bind_addr,
                "machines_ws_port": s.machines_ws_port,
                "machines_ws_bind_addr": s.machines_ws_bind_addr,
                "default_saltpeter_server_host": s.default_saltpeter_server_host,
                "default_wrapper_path": s.default_wrapper_path,
                "executor": s.executor,
                "timezone": s.timezone,
                "heartbeat": s.heartbeat,
                "pickup_timeout": s.pickup_timeout,
                "api_token": s.api_token_set.then_some("***"),
            },
            "serial": c.serial,
            "errors": c.errors,
        },
        "sp_version": SP_VERSION,
    });
    strip_nulls(&mut v);
    v
}

/// `config.maintenance` of a configuration (what `/api/v1/maintenance` falls back on).
pub(crate) fn maintenance_json(c: &ConfigView) -> Value {
    json!({"global": c.maintenance_global, "machines": c.maintenance_machines})
}

/// `{"type": "status", ...}`: a running job's `result_ok` is true, as in the original.
pub(crate) fn status_message(s: &StatusView) -> Value {
    let mut running = Map::new();
    let mut last_state = Map::new();
    for last in &s.last_state {
        last_state.insert(
            last.job.clone(),
            json!({"last_run": time(last.last_run), "result_ok": last.result_ok}),
        );
    }
    for r in &s.running {
        running.insert(
            instance(&r.job, r.run),
            json!({"started": time(r.started), "name": r.job, "machines": r.machines,
                   "run": r.run}),
        );
        last_state.insert(
            r.job.clone(),
            json!({"last_run": time(r.started), "result_ok": true}),
        );
    }
    let mut v = json!({
        "type": "status",
        "running": running,
        "last_state": last_state,
        "sp_version": SP_VERSION,
    });
    strip_nulls(&mut v);
    v
}

/// What the hub adds to a target of `details` from what it sees itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TargetSeen {
    /// The last message from its wrapper the hub saw (UTC milliseconds).
    pub heartbeat: Option<Millis>,
    /// Characters of its output text.
    pub output_length: u64,
}

fn result_json(job: &str, run: Option<u64>, t: &TargetView, seen: TargetSeen) -> Value {
    let r = &t.record;
    let heartbeat = match (t.last_heartbeat, seen.heartbeat) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    json!({
        "starttime": time(r.started),
        "endtime": if t.finished { time(r.ended) } else { Value::Null },
        "retcode": match (t.finished, r.exit_code) {
            (true, Some(code)) => json!(code),
            _ => json!(""),
        },
        "last_heartbeat": time(heartbeat),
        "wrapper_version": t.wrapper_version,
        "output_length": seen.output_length,
        // The original UI knows no suspension: the state stays `running`, the flag is extra.
        "state": r.state.as_str(),
        "suspended": r.suspended,
        "reason": r.reason.map(|x| x.as_str()),
        "waiting": r.waiting,
        "limits": r.limits,
        "server": r.server,
        "job_instance": run.map(|run| instance(job, run)),
    })
}

/// `{"type": "details", ...}`; `seen` gives what the hub knows of each target.
pub(crate) fn details_message(d: &DetailsView, seen: impl Fn(&str) -> TargetSeen) -> Value {
    let mut results = Map::new();
    let mut targets = Vec::new();
    for t in &d.targets {
        let machine = &t.record.machine;
        results.insert(
            machine.clone(),
            result_json(&d.job, d.run, t, seen(machine)),
        );
        if t.record.state != crate::wire::records::TargetState::SkippedMaintenance {
            targets.push(machine.clone());
        }
    }
    let mut v = json!({
        "type": "details",
        "cron": d.job,
        "data": {
            "next_run": time(d.next_run),
            "last_run": time(d.last_run),
            "group": d.group,
            "targets": targets,
            "results": results,
            "last_success": d.last_success,
            "overlap": d.overlap,
            "run": d.run,
            "job_instance": d.run.map(|r| instance(&d.job, r)),
        },
    });
    strip_nulls(&mut v);
    v
}

/// `{"type": "timeline", ...}`: a start and a result per target of `runs`.
pub(crate) fn timeline_message(id: Value, runs: &[RunRecord], serial: Millis) -> Value {
    let mut content = Vec::new();
    for run in runs {
        let instance = instance(&run.job, run.id);
        for t in &run.targets {
            if t.started.is_some() {
                content.push(json!({"cron": run.job, "timestamp": time(t.started),
                    "msg_type": "machine_start", "job_instance": instance,
                    "machine": t.machine}));
            }
            if t.ended.is_some() {
                content.push(json!({"cron": run.job, "timestamp": time(t.ended),
                    "ret_code": t.exit_code, "msg_type": "machine_result",
                    "job_instance": instance, "machine": t.machine}));
            }
        }
    }
    let mut v = json!({
        "type": "timeline",
        "timeline": {"content": content, "id": id, "serial": serial},
    });
    strip_nulls(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::records::{TargetRecord, TargetState};
    use crate::wire::ui::LastStateView;

    fn target(machine: &str, started: Option<Millis>) -> TargetView {
        TargetView {
            record: TargetRecord {
                machine: machine.into(),
                state: TargetState::Running,
                reason: None,
                exit_code: None,
                started,
                ended: None,
                suspended: false,
                waiting: None,
                limits: None,
                server: None,
            },
            finished: false,
            last_heartbeat: Some(1_000),
            wrapper_version: None,
        }
    }

    fn nulls(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::Object(m) => m.values().any(nulls),
            Value::Array(a) => a.iter().any(nulls),
            _ => false,
        }
    }

    #[test]
    fn absent_values_are_left_out_not_null() {
        let never_ran = StatusView {
            running: Vec::new(),
            last_state: vec![LastStateView {
                job: "a".into(),
                last_run: None,
                result_ok: false,
            }],
        };
        let status = status_message(&never_ran);
        assert!(!nulls(&status), "{status}");
        assert!(status["last_state"]["a"].get("last_run").is_none());
        let disabled = DetailsView {
            job: "a".into(),
            group: "g".into(),
            next_run: None,
            last_run: None,
            run: None,
            last_success: None,
            overlap: false,
            targets: vec![target("m", None)],
        };
        let details = details_message(&disabled, |_| TargetSeen::default());
        assert!(!nulls(&details), "{details}");
        assert!(details["data"].get("next_run").is_none());
        assert_eq!(details["data"]["results"]["m"]["retcode"], "");
    }

    #[test]
    fn the_newest_heartbeat_of_main_and_hub_shows() {
        let d = DetailsView {
            job: "a".into(),
            group: "g".into(),
            next_run: Some(0),
            last_run: Some(0),
            run: Some(3),
            last_success: Some(true),
            overlap: false,
            targets: vec![target("m", Some(0))],
        };
        let seen = TargetSeen {
            heartbeat: Some(5_000),
            output_length: 7,
        };
        let v = details_message(&d, |_| seen);
        let r = &v["data"]["results"]["m"];
        assert_eq!(r["last_heartbeat"], "1970-01-01T00:00:05Z");
        assert_eq!(r["output_length"], 7);
        assert_eq!(r["job_instance"], "a_3");
    }
}
