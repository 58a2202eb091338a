//! The verbs of the complete admin tool that ask once and print once: `jobs`, `show`,
//! `runs`, `events`, `kill-job`, `output` (without `-f`). Each prints a table for people
//! or JSON for scripts.

use std::io::Write;

use serde_json::{Value, json};

use super::arg_error::ArgError;
use super::client::Client;
use super::exit::{CtlResult, EXIT_FAILED, EXIT_OK};
use super::render::{elision_marker, run_json, time};
use super::table::{Color, Style, Table, cell, duration, run_color, when};
use crate::wire::admin::{
    AdminRequest, AdminResponse, EventInfo, JobDetail, JobState, JobSummary, OutputRange,
    OutputSlice,
};
use crate::wire::records::{Millis, RunId, RunRecord, TargetState};
use crate::wire::wrapper::Stream;

/// The fire times `show` lists.
const SHOW_UPCOMING: u32 = 5;

fn print_json(v: &Value) {
    outln!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// An answer that is not the one expected: a failure's message and exit code.
pub(super) fn unexpected(resp: AdminResponse, json: bool) -> CtlResult {
    super::render::response(resp, json)?;
    Err((EXIT_FAILED, "unexpected answer from the daemon".into()))
}

/// `--since`: RFC 3339, a date (`2026-11-25`, midnight UTC), or an age (`90s`, `15m`,
/// `2h`, `7d`, optionally written `now-2h`).
pub(super) fn parse_since(text: &str, now: Millis) -> Result<Millis, ArgError> {
    let t = text.trim();
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(at.timestamp_millis());
    }
    if let Ok(day) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        && let Some(midnight) = day.and_hms_opt(0, 0, 0)
    {
        return Ok(midnight.and_utc().timestamp_millis());
    }
    let age = t.strip_prefix("now-").unwrap_or(t);
    let split = age.find(|c: char| !c.is_ascii_digit()).unwrap_or(age.len());
    let (n, unit) = age.split_at(split);
    let n: i64 = n.parse().map_err(|_| ArgError::Since {
        text: text.to_string(),
    })?;
    let unit_ms = match unit {
        "s" | "" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => {
            return Err(ArgError::SinceUnit {
                unit: unit.to_string(),
                text: text.to_string(),
            });
        }
    };
    Ok(now - n.saturating_mul(unit_ms))
}

fn job_json(j: &JobSummary) -> Value {
    json!({
        "name": j.info.name,
        "group": j.info.group,
        "state": j.state.as_str(),
        "running": j.running,
        "next_run": time(j.info.next_run),
        "last_run": time(j.info.last_run),
        "last_result": j.info.last_result.map(|s| s.as_str()),
        "enabled": j.info.enabled,
        "error": j.info.error,
        "inactive": j.info.inactive,
    })
}

fn state_color(s: JobState) -> Option<Color> {
    match s {
        JobState::Running => Some(Color::Blue),
        JobState::Idle => None,
        JobState::Disabled | JobState::Paused => Some(Color::Dim),
        JobState::Invalid | JobState::Failing => Some(Color::Red),
    }
}

pub(super) fn jobs(
    client: &mut Client,
    group: Option<String>,
    state: Option<JobState>,
    json: bool,
) -> CtlResult {
    let (jobs, invalid_omitted) = match client.request(&AdminRequest::Jobs { group, state })? {
        AdminResponse::Jobs {
            jobs,
            invalid_omitted,
        } => (jobs, invalid_omitted),
        other => return unexpected(other, json),
    };
    // The daemon lists a bounded number of invalid jobs; `config check` lists them all.
    let omitted = (invalid_omitted > 0).then(|| {
        format!(
            "{invalid_omitted} more invalid job(s) not listed \
             (saltpeterctl config check lists them all)"
        )
    });
    if json {
        print_json(&Value::Array(jobs.iter().map(job_json).collect()));
        if let Some(note) = omitted {
            eprintln!("{note}");
        }
        return Ok(EXIT_OK);
    }
    let style = Style::stdout();
    let mut t = Table::new(&[
        "JOB",
        "GROUP",
        "STATE",
        "NEXT RUN",
        "LAST RUN",
        "LAST RESULT",
    ]);
    for j in &jobs {
        let last = j.info.last_result;
        t.row(vec![
            cell(&j.info.name),
            cell(&j.info.group),
            (j.state.as_str().into(), state_color(j.state)),
            cell(when(j.info.next_run)),
            cell(when(j.info.last_run)),
            (
                last.map(|s| s.as_str()).unwrap_or("-").into(),
                last.and_then(run_color),
            ),
        ]);
    }
    out!("{}", t.render(style, ""));
    for j in jobs.iter() {
        if let Some(note) = &j.info.inactive {
            outln!(
                "{}",
                style.paint(&format!("{}: {note}", j.info.name), Some(Color::Dim))
            );
        }
    }
    for j in jobs.iter().filter(|j| j.info.error.is_some()) {
        let e = j.info.error.as_deref().unwrap_or_default();
        outln!(
            "{}",
            style.paint(&format!("{}: {e}", j.info.name), Some(Color::Red))
        );
    }
    if let Some(note) = omitted {
        outln!("{}", style.paint(&note, Some(Color::Red)));
    }
    Ok(EXIT_OK)
}

pub(super) fn show(client: &mut Client, job: String, json: bool) -> CtlResult {
    let req = AdminRequest::Job {
        job,
        upcoming: SHOW_UPCOMING,
    };
    let d: JobDetail = match client.request(&req)? {
        AdminResponse::Job(d) => *d,
        other => return unexpected(other, json),
    };
    let config: Value = d
        .config_json
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null);
    if json {
        print_json(&json!({
            "job": job_json(&d.summary),
            "config": config,
            "errors": d.errors,
            "next_runs": d.next_runs.iter().map(|t| time(Some(*t))).collect::<Vec<_>>(),
            "last_runs": d.last_runs.iter().map(run_json).collect::<Vec<_>>(),
        }));
        return Ok(EXIT_OK);
    }
    let style = Style::stdout();
    let s = &d.summary;
    outln!(
        "{}  ({})  {}",
        style.paint(&s.info.name, Some(Color::Bold)),
        s.info.group,
        style.paint(s.state.as_str(), state_color(s.state))
    );
    for e in &d.errors {
        outln!(
            "  {}",
            style.paint(
                &format!("error: {}", crate::logsafe::escape(e)),
                Some(Color::Red)
            )
        );
    }
    if let Value::Object(map) = &config {
        const FIRST: &[&str] = &[
            "schedule",
            "timezone",
            "command",
            "targets",
            "target_type",
            "executor",
            "user",
            "cwd",
            "env",
        ];
        let rest = map.keys().filter(|k| !FIRST.contains(&k.as_str()));
        for k in FIRST.iter().copied().chain(rest.map(String::as_str)) {
            let Some(v) = map.get(k) else { continue };
            if k == "name" || k == "group" || v.is_null() {
                continue;
            }
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            outln!("  {k:<22} {text}");
        }
    }
    outln!("\n{}", style.paint("Next runs", Some(Color::Bold)));
    if let Some(note) = &s.info.inactive {
        outln!("  ({note})");
    }
    if d.next_runs.is_empty() {
        outln!("  -");
    }
    for t in &d.next_runs {
        outln!("  {}", when(Some(*t)));
    }
    outln!("\n{}", style.paint("Last runs", Some(Color::Bold)));
    out!("{}", runs_table(&d.last_runs, style, "  "));
    Ok(EXIT_OK)
}

fn runs_table(runs: &[RunRecord], style: Style, indent: &str) -> String {
    let mut t = Table::new(&[
        "RUN", "JOB", "TRIGGER", "STATE", "STARTED", "DURATION", "TARGETS",
    ]);
    for r in runs {
        let ran: Vec<_> = r
            .targets
            .iter()
            .filter(|t| t.state != TargetState::SkippedMaintenance)
            .collect();
        let ok = ran
            .iter()
            .filter(|t| t.state == TargetState::Finished && t.exit_code == Some(0))
            .count();
        t.row(vec![
            cell(r.id.to_string()),
            cell(&r.job),
            cell(r.trigger.as_str()),
            (r.state.as_str().into(), run_color(r.state)),
            cell(when(r.started.or(r.slot))),
            cell(duration(r.started, r.ended)),
            cell(format!("{ok}/{} ok", ran.len())),
        ]);
    }
    t.render(style, indent)
}

pub(super) fn runs(client: &mut Client, req: AdminRequest, json: bool) -> CtlResult {
    let runs = match client.request(&req)? {
        AdminResponse::Runs(runs) => runs,
        other => return unexpected(other, json),
    };
    if json {
        print_json(&Value::Array(runs.iter().map(run_json).collect()));
    } else {
        out!("{}", runs_table(&runs, Style::stdout(), ""));
    }
    Ok(EXIT_OK)
}

/// The name of a uid, from the password database (best effort).
fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn event_json(e: &EventInfo) -> Value {
    json!({
        "id": e.id,
        "at": time(Some(e.at)),
        "kind": e.kind,
        "job": e.job,
        "run": e.run,
        "machine": e.machine,
        "message": e.message,
        "uid": e.uid,
        "user": e.uid.and_then(user_name),
    })
}

pub(super) fn events(client: &mut Client, req: AdminRequest, json: bool) -> CtlResult {
    let events = match client.request(&req)? {
        AdminResponse::Events(events) => events,
        other => return unexpected(other, json),
    };
    if json {
        print_json(&Value::Array(events.iter().map(event_json).collect()));
        return Ok(EXIT_OK);
    }
    let mut t = Table::new(&["TIME", "KIND", "JOB", "RUN", "MACHINE", "BY", "MESSAGE"]);
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    for e in &events {
        let by = match e.uid {
            Some(uid) => user_name(uid).unwrap_or_else(|| format!("uid {uid}")),
            None => "daemon".into(),
        };
        t.row(vec![
            cell(when(Some(e.at))),
            cell(&e.kind),
            cell(opt(&e.job)),
            cell(e.run.map(|r| r.to_string()).unwrap_or_else(|| "-".into())),
            cell(opt(&e.machine)),
            cell(by),
            cell(&e.message),
        ]);
    }
    out!("{}", t.render(Style::stdout(), ""));
    Ok(EXIT_OK)
}

/// Write output bytes with the elision marker where the output limit left bytes out.
pub(super) fn write_output(
    out: &mut impl Write,
    data: &[u8],
    omitted_bytes: u64,
    omitted_at: Option<usize>,
) -> std::io::Result<()> {
    let at = omitted_at.unwrap_or(data.len()).min(data.len());
    out.write_all(&data[..at])?;
    if omitted_bytes > 0 && omitted_at.is_some() {
        out.write_all(elision_marker(omitted_bytes).as_bytes())?;
    }
    out.write_all(&data[at..])
}

/// `output RUN MACHINE [--tail N] [--stream S]`: the stored output, page by page.
pub(super) fn output(
    client: &mut Client,
    run: RunId,
    machine: String,
    stream: Option<Stream>,
    tail: Option<u64>,
    json: bool,
) -> CtlResult {
    let mut from = 0;
    let mut all: Vec<u8> = Vec::new();
    let mut first: Option<OutputSlice> = None;
    let stdout = std::io::stdout();
    loop {
        let req = AdminRequest::Output {
            run,
            machine: machine.clone(),
            range: OutputRange {
                stream,
                from,
                tail: if first.is_none() { tail } else { None },
                // As much as main gives in one answer.
                max_bytes: None,
            },
        };
        let slice = match client.request(&req)? {
            AdminResponse::OutputSlice(s) => s,
            other => return unexpected(other, json),
        };
        let more = !slice.data.is_empty() && slice.next_from > from && tail.is_none();
        from = slice.next_from;
        if json {
            all.extend_from_slice(&slice.data);
        } else {
            write_output(
                &mut stdout.lock(),
                &slice.data,
                slice.omitted_bytes,
                slice.omitted_at,
            )
            .map_err(super::out::write_failed)?;
        }
        let at_end = slice.next_from >= slice.total_bytes;
        if first.is_none() {
            first = Some(slice);
        }
        if !more || at_end {
            break;
        }
    }
    if json {
        let first = first.unwrap_or_default();
        print_json(&json!({
            "run": run,
            "machine": machine,
            "output": String::from_utf8_lossy(&all),
            "omitted_bytes": first.omitted_bytes,
            "total_bytes": first.total_bytes,
        }));
    } else {
        let _ = stdout.lock().flush();
    }
    Ok(EXIT_OK)
}

pub(super) fn kill_job(client: &mut Client, job: String, json: bool) -> CtlResult {
    let resp = client.request(&AdminRequest::KillJob {
        job,
        machine: None,
        run: None,
    })?;
    super::render::response(resp, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_ages_dates_and_rfc3339() {
        let now = 1_000_000_000_000;
        assert_eq!(parse_since("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_since("now-15m", now), Ok(now - 900_000));
        assert_eq!(parse_since("7d", now), Ok(now - 604_800_000));
        assert_eq!(
            parse_since("2026-11-25", now),
            Ok(chrono::DateTime::parse_from_rfc3339("2026-11-25T00:00:00Z")
                .unwrap()
                .timestamp_millis())
        );
        assert_eq!(
            parse_since("2026-11-25T10:00:00+01:00", now),
            Ok(chrono::DateTime::parse_from_rfc3339("2026-11-25T09:00:00Z")
                .unwrap()
                .timestamp_millis())
        );
        assert!(parse_since("yesterday", now).is_err());
        assert!(parse_since("3y", now).is_err());
    }
}
