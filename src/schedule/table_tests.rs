//! Next fire times against a table of expressions. Every expected instant was worked out by
//! hand from the calendar and the zone's rules (not by running this code), so a row that
//! fails is a real disagreement with the contract (docs/configuration.md, Job keys).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::Schedule;

/// One row: expression, zone, the instant to start after, the firings expected next.
struct Row {
    expr: &'static str,
    tz: Tz,
    from: &'static str,
    expect: &'static [&'static str],
    why: &'static str,
}

const BERLIN: Tz = chrono_tz::Europe::Berlin;
const NEW_YORK: Tz = chrono_tz::America::New_York;
const UTC: Tz = Tz::UTC;

/// Rows: DST changes in Berlin (2027-03-28 01:00Z spring, 2026-10-25 01:00Z fall) and New
/// York (2027-03-14 07:00Z spring, 2026-11-01 06:00Z fall); fixed-hour against `*`-hour
/// jobs; leap years; `L`; names; dom/dow OR; 5, 6 and 7 fields; `@` shortcuts.
const TABLE: &[Row] = &[
    // --- Berlin, spring forward: 02:00 CET becomes 03:00 CEST.
    Row {
        expr: "30 2 * * *",
        tz: BERLIN,
        from: "2027-03-27T23:00:00Z",
        expect: &["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"],
        why: "fixed hour: the skipped 02:30 runs once at 03:00 CEST",
    },
    Row {
        expr: "0 2,4 * * *",
        tz: BERLIN,
        from: "2027-03-27T22:30:00Z",
        expect: &["2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z"],
        why: "fixed hours: 02:00 moves to 03:00 CEST, 04:00 CEST is as usual",
    },
    Row {
        expr: "0 */2 * * *",
        tz: BERLIN,
        from: "2027-03-27T22:30:00Z",
        expect: &["2027-03-27T23:00:00Z", "2027-03-28T02:00:00Z"],
        why: "`*/2` hour follows real time: the non-existent 02:00 is not invented",
    },
    Row {
        expr: "* 2 * * *",
        tz: BERLIN,
        from: "2027-03-28T00:00:00Z",
        expect: &["2027-03-29T00:00:00Z", "2027-03-29T00:01:00Z"],
        why: "`*` minute follows real time: hour 2 does not exist that day",
    },
    Row {
        expr: "*/30 * * * *",
        tz: BERLIN,
        from: "2027-03-28T00:45:00Z",
        expect: &["2027-03-28T01:00:00Z", "2027-03-28T01:30:00Z"],
        why: "real time across the gap: 01:45 CET, then 03:00 CEST",
    },
    // --- Berlin, fall back: 03:00 CEST becomes 02:00 CET, 02:xx happens twice.
    Row {
        expr: "30 2 * * *",
        tz: BERLIN,
        from: "2026-10-24T22:00:00Z",
        expect: &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        why: "fixed hour: the repeated 02:30 runs once, the first time",
    },
    Row {
        expr: "0 2 * * *",
        tz: BERLIN,
        from: "2026-10-24T23:30:00Z",
        expect: &["2026-10-25T00:00:00Z", "2026-10-26T01:00:00Z"],
        why: "fixed hour at the very start of the repeated hour",
    },
    Row {
        expr: "0 * * * *",
        tz: BERLIN,
        from: "2026-10-24T23:30:00Z",
        expect: &[
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T02:00:00Z",
        ],
        why: "`*` hour: 02:00 CEST, 02:00 CET, 03:00 CET all fire",
    },
    Row {
        expr: "0 */2 * * *",
        tz: BERLIN,
        from: "2026-10-24T21:30:00Z",
        expect: &[
            "2026-10-24T22:00:00Z",
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T03:00:00Z",
        ],
        why: "`*/2` hour: 00:00, 02:00 CEST, 02:00 CET, 04:00 CET",
    },
    // --- New York, spring forward: 02:00 EST becomes 03:00 EDT.
    Row {
        expr: "30 2 * * *",
        tz: NEW_YORK,
        from: "2027-03-14T05:00:00Z",
        expect: &["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"],
        why: "fixed hour: 02:30 does not exist, runs at 03:00 EDT",
    },
    Row {
        expr: "0 2 * * *",
        tz: NEW_YORK,
        from: "2027-03-14T06:00:00Z",
        expect: &["2027-03-14T07:00:00Z", "2027-03-15T06:00:00Z"],
        why: "fixed hour at the start of the gap",
    },
    Row {
        expr: "*/15 * * * *",
        tz: NEW_YORK,
        from: "2027-03-14T06:50:00Z",
        expect: &["2027-03-14T07:00:00Z", "2027-03-14T07:15:00Z"],
        why: "real time: 01:50 EST, then 03:00 EDT",
    },
    // --- New York, fall back: 02:00 EDT becomes 01:00 EST, 01:xx happens twice.
    Row {
        expr: "30 1 * * *",
        tz: NEW_YORK,
        from: "2026-11-01T04:00:00Z",
        expect: &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        why: "fixed hour: the first 01:30 only",
    },
    Row {
        expr: "0,30 1 * * *",
        tz: NEW_YORK,
        from: "2026-11-01T04:00:00Z",
        expect: &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:00:00Z",
        ],
        why: "fixed hour with a minute list: the first pass only",
    },
    Row {
        expr: "*/30 1 * * *",
        tz: NEW_YORK,
        from: "2026-11-01T04:00:00Z",
        expect: &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-02T06:00:00Z",
        ],
        why: "`*/30` minute follows real time: both passes of 01:xx",
    },
    Row {
        expr: "30 * * * *",
        tz: NEW_YORK,
        from: "2026-11-01T04:00:00Z",
        expect: &[
            "2026-11-01T04:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:30:00Z",
        ],
        why: "`*` hour: 00:30 EDT, 01:30 EDT, 01:30 EST, 02:30 EST",
    },
    Row {
        expr: "@hourly",
        tz: NEW_YORK,
        from: "2026-11-01T04:30:00Z",
        expect: &[
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ],
        why: "@hourly follows real time: one firing per real hour",
    },
    Row {
        expr: "@daily",
        tz: BERLIN,
        from: "2027-03-27T12:00:00Z",
        expect: &["2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z"],
        why: "midnight CET, then midnight CEST",
    },
    // --- Leap years and `L`.
    Row {
        expr: "0 0 29 2 *",
        tz: UTC,
        from: "2026-01-01T00:00:00Z",
        expect: &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
        why: "29 February only in leap years",
    },
    Row {
        expr: "0 12 L 2 *",
        tz: UTC,
        from: "2027-03-01T00:00:00Z",
        expect: &["2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z"],
        why: "last day of February, leap or not",
    },
    Row {
        expr: "0 0 L * *",
        tz: UTC,
        from: "2026-04-15T00:00:00Z",
        expect: &[
            "2026-04-30T00:00:00Z",
            "2026-05-31T00:00:00Z",
            "2026-06-30T00:00:00Z",
        ],
        why: "last day of each month",
    },
    Row {
        expr: "0 0 LW * *",
        tz: UTC,
        from: "2027-01-01T00:00:00Z",
        expect: &["2027-01-29T00:00:00Z"],
        why: "31 January 2027 is a Sunday: the last weekday is Friday the 29th",
    },
    Row {
        expr: "0 0 15W * *",
        tz: UTC,
        from: "2026-11-01T00:00:00Z",
        expect: &["2026-11-16T00:00:00Z"],
        why: "15 November 2026 is a Sunday: the nearest weekday is Monday the 16th",
    },
    Row {
        expr: "0 0 * * 5L",
        tz: UTC,
        from: "2026-11-28T00:00:00Z",
        expect: &["2026-12-25T00:00:00Z", "2027-01-29T00:00:00Z"],
        why: "last Friday of the month",
    },
    Row {
        expr: "0 0 * * fri#2",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2026-12-11T00:00:00Z", "2027-01-08T00:00:00Z"],
        why: "second Friday of the month",
    },
    // --- Names.
    Row {
        expr: "0 9 * jan,JUL mon",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2027-01-04T09:00:00Z", "2027-01-11T09:00:00Z"],
        why: "Mondays of January and July",
    },
    Row {
        expr: "0 8 * * MON-FRI",
        tz: UTC,
        from: "2026-11-27T10:00:00Z",
        expect: &["2026-11-30T08:00:00Z", "2026-12-01T08:00:00Z"],
        why: "weekdays: Friday 10:00, then Monday",
    },
    Row {
        expr: "0 0 * * sat,sun",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z"],
        why: "weekend days",
    },
    Row {
        expr: "0 0 * * fri-sun",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &[
            "2026-11-27T00:00:00Z",
            "2026-11-28T00:00:00Z",
            "2026-11-29T00:00:00Z",
            "2026-12-04T00:00:00Z",
        ],
        why: "a day range through Sunday",
    },
    Row {
        expr: "0 0 1 feb *",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2027-02-01T00:00:00Z"],
        why: "month name",
    },
    Row {
        expr: "0 0 * * 7",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2026-11-29T00:00:00Z"],
        why: "dow 7 is Sunday",
    },
    // --- dom and dow: OR when both are restricted, AND when one starts with `*`.
    Row {
        expr: "0 0 13 * fri",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &[
            "2026-11-27T00:00:00Z",
            "2026-12-04T00:00:00Z",
            "2026-12-11T00:00:00Z",
            "2026-12-13T00:00:00Z",
            "2026-12-18T00:00:00Z",
        ],
        why: "the 13th or any Friday",
    },
    Row {
        expr: "0 0 1-3 * mon",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &[
            "2026-11-30T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2026-12-02T00:00:00Z",
            "2026-12-03T00:00:00Z",
            "2026-12-07T00:00:00Z",
        ],
        why: "1st to 3rd or Mondays",
    },
    Row {
        expr: "0 0 */10 * sun",
        tz: UTC,
        from: "2026-10-31T00:00:00Z",
        expect: &[
            "2026-11-01T00:00:00Z",
            "2027-01-31T00:00:00Z",
            "2027-02-21T00:00:00Z",
        ],
        why: "dom `*/10` (1, 11, 21, 31) makes it AND: Sundays on those days",
    },
    Row {
        expr: "0 0 * * mon",
        tz: UTC,
        from: "2026-11-25T00:00:00Z",
        expect: &["2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"],
        why: "dom `*`: Mondays only",
    },
    // --- 5, 6 and 7 fields.
    Row {
        expr: "*/15 * * * *",
        tz: UTC,
        from: "2026-11-25T10:07:00Z",
        expect: &["2026-11-25T10:15:00Z", "2026-11-25T10:30:00Z"],
        why: "5 fields: seconds are 0",
    },
    Row {
        expr: "30 */15 * * * *",
        tz: UTC,
        from: "2026-11-25T10:07:00Z",
        expect: &["2026-11-25T10:15:30Z", "2026-11-25T10:30:30Z"],
        why: "6 fields: seconds first",
    },
    Row {
        expr: "0,15,30,45 * 1-23 * * *",
        tz: UTC,
        from: "2026-11-25T23:59:50Z",
        expect: &["2026-11-26T01:00:00Z", "2026-11-26T01:00:15Z"],
        why: "the original's example: every 15 s, hours 1-23",
    },
    Row {
        expr: "0 0 12 * * * 2027",
        tz: UTC,
        from: "2026-12-31T13:00:00Z",
        expect: &["2027-01-01T12:00:00Z", "2027-01-02T12:00:00Z"],
        why: "7 fields: year last",
    },
    Row {
        expr: "0 0 0 1 1 * 2027-2028",
        tz: UTC,
        from: "2026-06-01T00:00:00Z",
        expect: &["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"],
        why: "a year range ends",
    },
    // --- Shortcuts.
    Row {
        expr: "@yearly",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2027-01-01T00:00:00Z"],
        why: "@yearly",
    },
    Row {
        expr: "@annually",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2027-01-01T00:00:00Z"],
        why: "@annually",
    },
    Row {
        expr: "@monthly",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2026-12-01T00:00:00Z"],
        why: "@monthly",
    },
    Row {
        expr: "@weekly",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2026-11-29T00:00:00Z"],
        why: "@weekly is Sunday midnight",
    },
    Row {
        expr: "@daily",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2026-11-26T00:00:00Z"],
        why: "@daily",
    },
    Row {
        expr: "@midnight",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2026-11-26T00:00:00Z"],
        why: "@midnight",
    },
    Row {
        expr: "@hourly",
        tz: UTC,
        from: "2026-11-25T10:00:00Z",
        expect: &["2026-11-25T11:00:00Z"],
        why: "@hourly, strictly after",
    },
];

fn parse_time(text: &str) -> DateTime<Utc> {
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => t.with_timezone(&Utc),
        Err(e) => panic!("bad time in the table: {text}: {e}"),
    }
}

#[test]
fn next_fire_times_match_the_table() {
    let mut failures = Vec::new();
    for row in TABLE {
        let schedule = match Schedule::from_expr(row.expr, row.tz) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{} ({}): rejected: {e}", row.expr, row.why));
                continue;
            }
        };
        let got: Vec<String> = schedule
            .upcoming(parse_time(row.from), row.expect.len())
            .iter()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect();
        if got != row.expect {
            failures.push(format!(
                "{} in {} after {} ({}):\n  expected {:?}\n  got      {:?}",
                row.expr, row.tz, row.from, row.why, row.expect, got
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows differ:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
}

/// Every invalid field is named, with what it accepts.
#[test]
fn every_invalid_field_names_the_field_and_its_range() {
    let cases: &[(&str, &str, &str)] = &[
        ("60 * * * * *", "sec", "0-59"),
        ("*/0 * * * * *", "sec", "0-59"),
        ("0 60 * * * *", "min", "0-59"),
        ("0 1-x * * * *", "min", "0-59"),
        ("0 0 24 * * *", "hour", "0-23"),
        ("0 0 L * * *", "hour", "0-23"),
        ("0 0 5-3 * * *", "hour", "0-23"),
        ("0 0 0 32 * *", "dom", "1-31"),
        ("0 0 0 0 * *", "dom", "1-31"),
        ("0 0 0 L3 * *", "dom", "1-31"),
        ("0 0 0 1,,2 * *", "dom", "1-31"),
        ("0 0 0 * 13 *", "mon", "1-12"),
        ("0 0 0 * foo *", "mon", "1-12"),
        ("0 0 0 * * 8", "dow", "0-7"),
        ("0 0 0 * * L", "dow", "0-7"),
        ("0 0 0 * * mon#6", "dow", "0-7"),
        ("0 0 0 * * blah", "dow", "0-7"),
        ("0 0 0 1 1 * 1969", "year", "1970-2099"),
        ("0 0 0 1 1 * 2100", "year", "1970-2099"),
        ("0 0 0 1 1 * 20x0", "year", "1970-2099"),
    ];
    for (expr, field, range) in cases {
        match Schedule::from_expr(expr, Tz::UTC) {
            Ok(s) => panic!("{expr} accepted as {}", s.describe()),
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("field `{field}`:")) && text.contains(range),
                    "{expr}: expected field `{field}` and {range} in: {text}"
                );
            }
        }
    }
}

/// A leap day in a year that has none never fires (a validation error, never a crash).
#[test]
fn a_leap_day_in_a_common_year_never_fires() {
    let now = parse_time("2026-01-01T00:00:00Z");
    let common = match Schedule::from_expr("0 0 0 29 2 * 2027", Tz::UTC) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(common.next_after(now), None);
    assert!(common.check_fires(now).is_err());
    let leap = match Schedule::from_expr("0 0 0 29 2 * 2028", Tz::UTC) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        leap.next_after(now),
        Some(parse_time("2028-02-29T00:00:00Z"))
    );
}
