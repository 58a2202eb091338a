//! Query strings of the HTTP API turned into typed requests: run ids, numbers, instants,
//! the runs filter and an output range; a bad value is a 400 naming the parameter.

use super::action::{
    Action, DEFAULT_OUTPUT_BYTES, DEFAULT_RUNS, MAX_OUTPUT_BYTES, MAX_RUNS, bad_request, call,
};
use super::parse::Request;
use crate::roles::hub::state::http::Expect;
use crate::wire::admin::{AdminRequest, OutputRange, RunQuery};
use crate::wire::records::{Millis, RunId, RunState};

pub(super) fn run_id(text: &str) -> Result<RunId, Action> {
    text.parse()
        .map_err(|_| bad_request(&format!("`{text}` is not a run id")))
}

pub(super) fn number(req: &Request, name: &str, default: u64) -> Result<u64, Action> {
    match req.query(name) {
        None | Some("") => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| bad_request(&format!("`{name}` must be a number, not `{v}`"))),
    }
}

pub(super) fn optional_number(req: &Request, name: &str) -> Result<Option<u64>, Action> {
    match req.query(name) {
        None | Some("") => Ok(None),
        Some(_) => number(req, name, 0).map(Some),
    }
}

/// An instant: unix milliseconds, RFC 3339, or the `now-5m` forms.
pub(super) fn instant(req: &Request, name: &str) -> Result<Option<i64>, Action> {
    match req.query(name) {
        None | Some("") => Ok(None),
        Some(v) => parse_date(v, chrono::Utc::now())
            .map(Some)
            .ok_or_else(|| bad_request(&format!("`{name}`: `{v}` is not a time"))),
    }
}

pub(super) fn runs_query(req: &Request) -> Action {
    let state = match req.query("state") {
        None | Some("") => None,
        Some(s) => match RunState::parse(s) {
            Some(state) => Some(state),
            None => return bad_request(&format!("`{s}` is not a run state")),
        },
    };
    let parsed = (|| -> Result<RunQuery, Action> {
        let limit = number(req, "limit", DEFAULT_RUNS as u64)?.clamp(1, MAX_RUNS as u64) as u32;
        Ok(RunQuery {
            job: req
                .query("job")
                .filter(|j| !j.is_empty())
                .map(str::to_string),
            state,
            since: instant(req, "since")?,
            until: instant(req, "until")?,
            before_id: optional_number(req, "before")?,
            limit,
        })
    })();
    match parsed {
        Ok(q) => {
            let limit = q.limit;
            call(AdminRequest::Runs(q), Expect::Runs { limit })
        }
        Err(a) => a,
    }
}

/// A byte offset into a target's output: stored as a signed 64-bit integer, so a larger
/// one names no byte there can ever be (and would fail in the database as a 500).
fn offset(value: u64, name: &str) -> Result<u64, Action> {
    if value > i64::MAX as u64 {
        return Err(bad_request(&format!(
            "`{name}` is past any output: at most {}",
            i64::MAX
        )));
    }
    Ok(value)
}

pub(super) fn output_query(req: &Request, id: &str, machine: &str) -> Action {
    let run = match run_id(id) {
        Ok(run) => run,
        Err(a) => return a,
    };
    let parsed = (|| -> Result<OutputRange, Action> {
        let max = number(req, "max_bytes", DEFAULT_OUTPUT_BYTES)?.clamp(1, MAX_OUTPUT_BYTES);
        Ok(OutputRange {
            stream: None,
            from: offset(number(req, "from", 0)?, "from")?,
            tail: optional_number(req, "tail")?
                .map(|t| offset(t, "tail"))
                .transpose()?,
            max_bytes: Some(max),
        })
    })();
    let range = match parsed {
        Ok(r) => r,
        Err(a) => return a,
    };
    let raw = match req.query("format") {
        None | Some("" | "json") => false,
        Some("raw") => true,
        Some(other) => return bad_request(&format!("`format` is json or raw, not `{other}`")),
    };
    call(
        AdminRequest::Output {
            run,
            machine: machine.to_string(),
            range,
        },
        Expect::Output {
            raw,
            from: range.from,
            tail: range.tail.is_some(),
            max_bytes: u32::try_from(range.max_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES))
                .unwrap_or(u32::MAX),
        },
    )
}

/// An instant for `getTimeline` and the API: `now`, `now-5m` (s, m, h, d, w), RFC 3339,
/// `YYYY-MM-DD[ T]HH:MM:SS` in UTC, or unix milliseconds.
pub(super) fn parse_date(text: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Millis> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("now") {
        if rest.is_empty() {
            return Some(now.timestamp_millis());
        }
        let (sign, amount) = match rest.split_at(1) {
            ("-", a) => (-1, a),
            // A `+` in a query string arrives as a space.
            ("+" | " ", a) => (1, a),
            _ => return None,
        };
        let unit = amount.chars().last()?;
        let n: i64 = amount[..amount.len() - unit.len_utf8()].parse().ok()?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            'w' => 7 * 86400,
            _ => return None,
        };
        return Some(now.timestamp_millis() + sign * n.checked_mul(seconds * 1000)?);
    }
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some(dt.timestamp_millis());
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
    .map(|n| n.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn dates_of_the_original_and_iso() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let ms = now.timestamp_millis();
        assert_eq!(parse_date("now", now), Some(ms));
        assert_eq!(parse_date("now-5m", now), Some(ms - 300_000));
        assert_eq!(parse_date("now-2h", now), Some(ms - 7_200_000));
        assert_eq!(parse_date("now-1d", now), Some(ms - 86_400_000));
        assert_eq!(parse_date("now+1h", now), Some(ms + 3_600_000));
        assert_eq!(parse_date("now 1h", now), Some(ms + 3_600_000));
        assert_eq!(parse_date("2026-01-02T03:04:05Z", now), Some(ms));
        assert_eq!(parse_date("2026-01-02T04:04:05+01:00", now), Some(ms));
        assert_eq!(parse_date("2026-01-02 03:04:05", now), Some(ms));
        assert_eq!(parse_date("1767323045000", now), Some(1_767_323_045_000));
        assert_eq!(parse_date("yesterday", now), None);
        assert_eq!(parse_date("now-5x", now), None);
        assert_eq!(parse_date("now-", now), None);
    }
}
