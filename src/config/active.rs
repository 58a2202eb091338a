//! `active_from` / `active_until`: a job's date range, read in the job's time zone.
//!
//! Accepted forms (the same for both keys):
//! - a date, `2026-12-01`: for `active_from` the start of that day, for `active_until`
//!   the end of that day (the day is included, as in most schedulers);
//! - a local date and time, `2026-12-01 08:00` (seconds optional, `T` or a space), read in
//!   the job's zone; `active_until` includes that instant;
//! - an RFC 3339 instant with its offset, `2026-12-01T08:00:00+01:00`.
//!
//! Pure: the zone is a parameter, nothing reads the clock.

use std::sync::Arc;

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

use crate::schedule::ActiveRange;

/// Which end of the range a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    From,
    Until,
}

impl Bound {
    fn key(self) -> &'static str {
        match self {
            Bound::From => "active_from",
            Bound::Until => "active_until",
        }
    }
}

/// The instant `text` means as `bound` of a range in `tz`.
pub(crate) fn bound_instant(text: &str, bound: Bound, tz: Tz) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return match bound {
            Bound::From => Ok(start_of_day(day, tz)),
            Bound::Until => {
                let next = day
                    .succ_opt()
                    .ok_or_else(|| format!("`{}`: {text} is out of range", bound.key()))?;
                Ok(start_of_day(next, tz) - Duration::nanoseconds(1))
            }
        };
    }
    let naive = local_date_time(text).ok_or_else(|| {
        format!(
            "`{}`: expected a date (2026-12-01), a date and time read in the job's timezone \
             (2026-12-01 08:00) or an RFC 3339 instant (2026-12-01T08:00:00Z), found `{text}`",
            bound.key()
        )
    })?;
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        // A time repeated by a fall-back change: its first occurrence.
        LocalResult::Ambiguous(first, _) => Ok(first.with_timezone(&Utc)),
        LocalResult::None => Err(format!(
            "`{}`: `{text}` does not exist in {tz} (skipped by a daylight saving change)",
            bound.key()
        )),
    }
}

/// A date and time without an offset (`2026-12-01 08:00`, seconds optional, `T` or space).
pub(crate) fn local_date_time(text: &str) -> Option<NaiveDateTime> {
    [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
}

/// The first instant of `day` in `tz` (where midnight is skipped by a daylight saving
/// change, the first instant after the gap).
fn start_of_day(day: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight = day.and_time(chrono::NaiveTime::MIN);
    for minutes in (0..=24 * 60).step_by(15) {
        if let Some(t) = tz
            .from_local_datetime(&(midnight + Duration::minutes(minutes)))
            .earliest()
        {
            return t.with_timezone(&Utc);
        }
    }
    // No zone skips a whole day at midnight and more; read it as UTC then.
    midnight.and_utc()
}

/// The range of both texts, or the message of the first problem (`from` after `until`
/// included).
pub(crate) fn range(
    from: Option<&str>,
    until: Option<&str>,
    tz: Tz,
) -> Result<ActiveRange, (Bound, String)> {
    let from_at = from
        .map(|t| bound_instant(t, Bound::From, tz))
        .transpose()
        .map_err(|m| (Bound::From, m))?;
    let until_at = until
        .map(|t| bound_instant(t, Bound::Until, tz))
        .transpose()
        .map_err(|m| (Bound::Until, m))?;
    if let (Some(f), Some(u)) = (from_at, until_at)
        && f > u
    {
        return Err((
            Bound::From,
            format!(
                "`active_from` {} is after `active_until` {}: the job would never be active",
                from.unwrap_or_default().trim(),
                until.unwrap_or_default().trim()
            ),
        ));
    }
    Ok(ActiveRange {
        from: from_at,
        until: until_at,
        from_text: from.map(|t| Arc::from(t.trim())),
        until_text: until.map(|t| Arc::from(t.trim())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        match DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn a_date_is_the_whole_day_in_the_job_zone() {
        let berlin = chrono_tz::Europe::Berlin;
        assert_eq!(
            bound_instant("2026-12-01", Bound::From, berlin),
            Ok(utc("2026-11-30T23:00:00Z"))
        );
        assert_eq!(
            bound_instant("2026-12-01", Bound::Until, berlin),
            Ok(utc("2026-12-01T22:59:59.999999999Z"))
        );
        assert_eq!(
            bound_instant("2026-12-01", Bound::Until, Tz::UTC),
            Ok(utc("2026-12-01T23:59:59.999999999Z"))
        );
    }

    #[test]
    fn times_are_local_unless_they_carry_an_offset() {
        let berlin = chrono_tz::Europe::Berlin;
        assert_eq!(
            bound_instant("2026-07-01 08:30", Bound::From, berlin),
            Ok(utc("2026-07-01T06:30:00Z"))
        );
        assert_eq!(
            bound_instant("2026-07-01T08:30:15", Bound::Until, berlin),
            Ok(utc("2026-07-01T06:30:15Z"))
        );
        assert_eq!(
            bound_instant("2026-07-01T08:30:00Z", Bound::Until, berlin),
            Ok(utc("2026-07-01T08:30:00Z"))
        );
        let gap = bound_instant("2026-03-29 02:30", Bound::From, berlin);
        assert!(gap.is_err_and(|m| m.contains("does not exist")));
    }

    #[test]
    fn bad_text_and_reversed_ranges_are_errors() {
        let bad = bound_instant("next tuesday", Bound::Until, Tz::UTC);
        assert!(bad.is_err_and(|m| m.contains("`active_until`") && m.contains("next tuesday")));
        assert!(bound_instant("2026-02-30", Bound::From, Tz::UTC).is_err());
        let reversed = range(Some("2026-12-02"), Some("2026-12-01"), Tz::UTC);
        assert!(reversed.is_err_and(|(b, m)| b == Bound::From && m.contains("is after")));
        // The same day for both: that whole day.
        let day = range(Some("2026-12-01"), Some("2026-12-01"), Tz::UTC);
        assert!(
            day.is_ok_and(|r| r.contains(utc("2026-12-01T12:00:00Z"))
                && !r.contains(utc("2026-12-02T00:00:00Z")))
        );
    }
}
