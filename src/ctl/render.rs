//! Printing answers: a table for people, JSON (the documented shapes, `crate::json`) for
//! scripts.

use std::path::Path;

use serde_json::{Value, json};

use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
pub(crate) use super::out::print_json;
pub(crate) use crate::json::{elision_marker, run_json, status_json, time};
use crate::logsafe::escape;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::records::RunRecord;

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn run(r: &RunRecord, json: bool) {
    use super::table::{Color, Style, Table, cell, duration, run_color, target_outcome};
    if json {
        print_json(&run_json(r));
        return;
    }
    let style = Style::stdout();
    outln!(
        "run {}  job {}  {}  {}{}",
        r.id,
        style.paint(&escape(&r.job), Some(Color::Bold)),
        escape(&r.trigger.to_string()),
        style.paint(r.state.as_str(), run_color(r.state)),
        r.reason
            .as_deref()
            .map(|x| format!(" ({})", escape(x)))
            .unwrap_or_default()
    );
    outln!(
        "  slot {}  started {}  ended {}",
        text(&time(r.slot)),
        text(&time(r.started)),
        text(&time(r.ended))
    );
    // Several masters on one database: which server's master launched each target.
    let servers = r.targets.iter().any(|t| t.server.is_some());
    let mut headers = vec!["MACHINE", "STATE", "REASON", "EXIT", "DURATION", "OUTCOME"];
    if servers {
        headers.push("SERVER");
    }
    let mut t = Table::new(&headers);
    for target in &r.targets {
        let (outcome, color) = target_outcome(target);
        let mut row = vec![
            cell(&target.machine),
            cell(if target.suspended {
                format!("{} (suspended)", target.state.as_str())
            } else {
                target.state.as_str().to_string()
            }),
            cell(target.reason.map(|x| x.as_str()).unwrap_or("-")),
            cell(
                target
                    .exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            cell(duration(target.started, target.ended)),
            (outcome, color),
        ];
        if servers {
            row.push(cell(target.server.as_deref().unwrap_or("-")));
        }
        t.row(row);
    }
    out!("{}", t.render(style, "  "));
    for target in &r.targets {
        if let Some(why) = &target.waiting {
            outln!("  {}: {}", escape(&target.machine), escape(why));
        }
        if let Some(limits) = &target.limits {
            outln!("  {} limits: {}", escape(&target.machine), escape(limits));
        }
    }
    if !r.attempts.is_empty() {
        outln!("  attempts:");
        let mut t = Table::new(&["MACHINE", "ATTEMPT", "REASON", "EXIT", "STARTED", "ENDED"]);
        for a in &r.attempts {
            t.row(vec![
                cell(&a.machine),
                cell(a.attempt.to_string()),
                cell(a.reason.map(|x| x.as_str()).unwrap_or("-")),
                cell(
                    a.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "-".into()),
                ),
                cell(text(&time(a.started))),
                cell(text(&time(a.ended))),
            ]);
        }
        out!("{}", t.render(style, "    "));
    }
}

pub(crate) fn started(run: u64, json: bool) -> CtlResult {
    if json {
        print_json(&json!({ "run": run }));
    } else {
        outln!("started run {run}");
    }
    Ok(EXIT_OK)
}

pub(crate) fn response(resp: AdminResponse, json: bool) -> CtlResult {
    match resp {
        AdminResponse::Status(s) => {
            if json {
                print_json(&status_json(&s));
            } else {
                outln!("saltpeter {}  up {}s", s.version, s.uptime_s);
                for p in &s.processes {
                    outln!("  {:<12} pid {}", p.role, p.pid);
                }
                outln!("  {} jobs, {} runs in flight", s.jobs, s.running_runs);
                for e in &s.config_errors {
                    outln!("  config error: {}", crate::logsafe::escape(e));
                }
                if let Some(e) = &s.db_error {
                    outln!("  DATABASE CANNOT STORE: {}", crate::logsafe::escape(e));
                }
                if let Some(ha) = &s.ha {
                    // The leader's name is what another server wrote in the database.
                    let leader = crate::logsafe::escape(ha.leader.as_deref().unwrap_or("unknown"));
                    outln!(
                        "  server {} is {}; leader: {leader}",
                        crate::logsafe::escape(&ha.server),
                        ha.role
                    );
                }
            }
        }
        AdminResponse::Runs(runs) => {
            if json {
                print_json(&Value::Array(runs.iter().map(run_json).collect()));
            } else {
                for r in &runs {
                    run(r, false);
                }
            }
        }
        AdminResponse::Run(r) => run(&r, json),
        AdminResponse::WrapperFleet(fleet) => return super::wrappers::status(&fleet, json),
        AdminResponse::Started { run } => return started(run, json),
        AdminResponse::Done(message) => {
            if json {
                print_json(&json!({ "ok": true, "message": message }));
            } else {
                outln!("{message}");
            }
        }
        AdminResponse::Progress(line) => eprintln!("{line}"),
        AdminResponse::NextFirings(times) => {
            let texts: Vec<Value> = times.into_iter().map(|t| time(Some(t))).collect();
            if json {
                print_json(&Value::Array(texts));
            } else {
                for t in &texts {
                    outln!("{}", text(t));
                }
            }
        }
        AdminResponse::Maintenance(info) => {
            print_json(&info.to_json());
        }
        AdminResponse::Metrics(text) => out!("{text}"),
        AdminResponse::LiveOutput(_) => {
            return Err((
                EXIT_FAILED,
                "the daemon sent an answer saltpeterctl did not ask for".into(),
            ));
        }
        AdminResponse::Failure(f) => {
            let code = match f {
                AdminFailure::NotFound(_) | AdminFailure::Invalid(_) => EXIT_USAGE,
                AdminFailure::Internal(_) => EXIT_FAILED,
            };
            return Err((code, f.to_string()));
        }
        other => {
            if json {
                print_json(&json!({ "answer": format!("{other:?}") }));
            } else {
                outln!("{other:?}");
            }
        }
    }
    Ok(EXIT_OK)
}

/// `config check DIR`: validate without a daemon; exit 1 when any error is found.
pub(crate) fn config_check(dir: &Path, json: bool) -> CtlResult {
    use crate::config::Severity;
    let mut loaded = crate::config::check_dir(dir, chrono::Utc::now())
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
    // The executor plugins judge their part, as the daemon's start does (a pinned one
    // runs through the daemon binary beside this one).
    let daemon = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("saltpeter-daemon")))
        .unwrap_or_else(|| std::path::PathBuf::from("saltpeter-daemon"));
    loaded.run_plugin_checks(&daemon);
    let (errors, warnings): (Vec<_>, Vec<_>) = loaded
        .diagnostics
        .iter()
        .partition(|d| d.severity == Severity::Error);
    let valid = loaded.valid_jobs().count();
    if json {
        print_json(&json!({
            "ok": errors.is_empty(),
            "jobs": loaded.jobs.len(),
            "valid_jobs": valid,
            "errors": errors.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            "warnings": warnings.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        }));
    } else {
        for d in &loaded.diagnostics {
            outln!("{}: {d}", d.severity);
        }
        outln!(
            "{}: {} jobs ({} valid), {} errors, {} warnings",
            dir.display(),
            loaded.jobs.len(),
            valid,
            errors.len(),
            warnings.len()
        );
    }
    Ok(if errors.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
