//! `saltpeterctl pause JOB [--until TIME]`, `resume JOB`, `skip JOB [--next N]`, `paused`,
//! and `maintenance windows`: job control and the calendar of maintenance windows of the
//! running daemon. `--until` is validated here (an RFC 3339 instant, a date and time in
//! UTC, or a delay such as 2h), so a typo never reaches the daemon.

use std::path::PathBuf;

use chrono::{DateTime, NaiveDateTime, Utc};

use super::arg_error::ArgError;
use super::exit::{CtlResult, EXIT_OK, EXIT_USAGE};
use super::{client, render};
use crate::wire::admin::{
    AdminRequest, AdminResponse, JobControl, JobControlInfo, WindowOccurrence,
};
use crate::wire::records::Millis;

/// `--until`: an RFC 3339 instant, `YYYY-MM-DD HH:MM[:SS]` or `YYYY-MM-DD` in UTC, or a
/// delay from now (`90s`, `30m`, `2h`, `1d`, `1w`).
pub(super) fn parse_until(text: &str, now: DateTime<Utc>) -> Result<Millis, ArgError> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.timestamp_millis());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(t, f) {
            return Ok(at.and_utc().timestamp_millis());
        }
    }
    if let Ok(day) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        && let Some(midnight) = day.and_hms_opt(0, 0, 0)
    {
        return Ok(midnight.and_utc().timestamp_millis());
    }
    let delay = t.strip_prefix('+').unwrap_or(t);
    let split = delay
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(delay.len());
    let (n, unit) = delay.split_at(split);
    let bad = || ArgError::Until {
        text: text.to_string(),
    };
    let n: i64 = n.parse().map_err(|_| bad())?;
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms)
        .and_then(|d| now.timestamp_millis().checked_add(d))
        .ok_or_else(bad)
}

/// Send a job control request and print the answer.
pub(super) fn run(socket: Option<PathBuf>, change: JobControl, json: bool) -> CtlResult {
    let mut client = client::Client::connect(socket)?;
    match client.request(&AdminRequest::JobControl(change))? {
        AdminResponse::JobControl(info) => {
            print(&info, json);
            Ok(EXIT_OK)
        }
        other => render::response(other, json),
    }
}

/// `pause JOB [--until TIME]`.
pub(super) fn pause(
    socket: Option<PathBuf>,
    job: String,
    until: Option<String>,
    json: bool,
) -> CtlResult {
    let until = until
        .map(|u| parse_until(&u, Utc::now()))
        .transpose()
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
    run(socket, JobControl::Pause { job, until }, json)
}

fn time(ms: Millis) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

fn print(info: &JobControlInfo, json: bool) {
    if json {
        render::print_json(&info.to_json());
        return;
    }
    if let Some(note) = &info.note {
        outln!("{note}");
    }
    if info.jobs.is_empty() {
        outln!("no job is paused or skipping");
        return;
    }
    for e in &info.jobs {
        let mut parts = Vec::new();
        if e.paused {
            let by = e
                .paused_by
                .map_or("the HTTP API".to_string(), |u| format!("uid {u}"));
            parts.push(match e.until {
                Some(u) => format!("paused by {by} until {}", time(u)),
                None => format!("paused by {by}"),
            });
        }
        if e.skip_next > 0 {
            parts.push(format!("skips the next {} slot(s)", e.skip_next));
        }
        outln!("  {:<32} {}", e.job, parts.join("; "));
    }
}

/// `maintenance windows [--count N]`.
pub(super) fn windows(socket: Option<PathBuf>, count: u32, json: bool) -> CtlResult {
    let mut client = client::Client::connect(socket)?;
    match client.request(&AdminRequest::MaintenanceWindows { count })? {
        AdminResponse::Windows(list) => {
            if json {
                render::print_json(&WindowOccurrence::to_json(&list));
            } else if list.is_empty() {
                outln!("no maintenance windows ahead");
            } else {
                for w in &list {
                    let scope = match (w.machines.is_empty(), w.groups.is_empty()) {
                        (true, true) => "whole fleet".to_string(),
                        (true, false) => format!("groups {}", w.groups.join(",")),
                        (false, true) => format!("machines {}", w.machines.join(",")),
                        (false, false) => format!(
                            "machines {} of groups {}",
                            w.machines.join(","),
                            w.groups.join(",")
                        ),
                    };
                    outln!(
                        "{:<20} {} - {}  {:<5} {}{}",
                        w.name,
                        time(w.start),
                        time(w.end),
                        w.policy,
                        scope,
                        if w.open { "  (open now)" } else { "" }
                    );
                }
            }
            Ok(EXIT_OK)
        }
        other => render::response(other, json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_takes_instants_dates_and_delays() {
        let now = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap_or_default();
        let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 30)
            .and_then(|d| d.and_hms_opt(8, 0, 0))
            .map(|t| t.and_utc().timestamp_millis());
        assert_eq!(parse_until("2026-11-30T08:00:00Z", now).ok(), at);
        assert_eq!(parse_until("2026-11-30 08:00", now).ok(), at);
        assert_eq!(parse_until("2026-11-30T09:00:00+01:00", now).ok(), at);
        assert_eq!(parse_until("2h", now), Ok(1_800_000_000_000 + 7_200_000));
        assert_eq!(parse_until("+1d", now), Ok(1_800_000_000_000 + 86_400_000));
        assert!(parse_until("monday", now).is_err());
        assert!(parse_until("2x", now).is_err());
        assert!(parse_until("99999999999999999w", now).is_err());
    }
}
