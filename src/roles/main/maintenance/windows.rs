//! Maintenance windows on a calendar: when each is open, and what a slot falling inside one
//! becomes. Pure: every function takes `now` or the instant asked about.
//!
//! A recurring window opens at each firing of its schedule (in its time zone, with the
//! schedule's daylight-saving rules, `src/schedule`) and stays open for its duration of
//! real time, so a 2 h window is 2 h long even across a DST change. Finding the occurrence
//! that contains an instant `t` walks the schedule's firings from `t - duration`, at most
//! `WALK_BUDGET` of them (a schedule firing every second inside a week-long window is
//! open anyway: the walk stops early once a firing at or before `t` is found past the
//! budget).
//!
//! A window whose scope is the whole fleet acts on slots: a slot of a job it covers is
//! skipped or deferred to the window's end. A window with `machines` acts on targets: its
//! machines are left out of runs while it is open (like machines in maintenance), or with
//! `defer` the run waits for its end.

use chrono::{DateTime, Duration, Utc};

use crate::config::windows::{Window, WindowPolicy, WindowTime};
use crate::wire::admin::WindowOccurrence;

/// Most schedule firings looked at to find the occurrence containing an instant.
const WALK_BUDGET: usize = 10_000;

/// Most occurrences `maintenance windows` lists.
pub(crate) const MAX_LISTED: u32 = 1000;

/// One opening of a window: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opening {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// The opening of `w` that contains `t`, if the window is open at `t`.
pub(crate) fn open_at(w: &Window, t: DateTime<Utc>) -> Option<Opening> {
    match &w.when {
        WindowTime::Once { start, end } => (*start <= t && t < *end).then_some(Opening {
            start: *start,
            end: *end,
        }),
        WindowTime::Every {
            schedule,
            duration_s,
        } => {
            let length = Duration::seconds(i64::try_from(*duration_s).unwrap_or(i64::MAX / 2));
            // Starts in (t - length, t]: the latest of them gives the furthest end.
            let mut cursor = t - length;
            let mut latest = None;
            for _ in 0..WALK_BUDGET {
                match schedule.next_after(cursor) {
                    Some(s) if s <= t => {
                        latest = Some(s);
                        cursor = s;
                    }
                    _ => break,
                }
            }
            latest.map(|start| Opening {
                start,
                end: start + length,
            })
        }
    }
}

/// Up to `n` openings of `w` that end after `after` (the one open at `after` first), in order.
pub(crate) fn upcoming(w: &Window, after: DateTime<Utc>, n: usize) -> Vec<Opening> {
    let mut out = Vec::new();
    if n == 0 {
        return out;
    }
    match &w.when {
        WindowTime::Once { start, end } => {
            if *end > after {
                out.push(Opening {
                    start: *start,
                    end: *end,
                });
            }
        }
        WindowTime::Every {
            schedule,
            duration_s,
        } => {
            let length = Duration::seconds(i64::try_from(*duration_s).unwrap_or(i64::MAX / 2));
            if let Some(open) = open_at(w, after) {
                out.push(open);
            }
            let mut cursor = out.last().map_or(after, |o| o.start.max(after));
            while out.len() < n {
                match schedule.next_after(cursor) {
                    Some(start) => {
                        out.push(Opening {
                            start,
                            end: start + length,
                        });
                        cursor = start;
                    }
                    None => break,
                }
            }
        }
    }
    out
}

/// What a slot of a job becomes because of the fleet-wide windows open at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotRule<'w> {
    /// No fleet-wide window covers it.
    Free,
    /// A `skip` window covers it.
    Skip(&'w Window),
    /// Only `defer` windows cover it: run at the latest of their ends.
    Defer(&'w Window, DateTime<Utc>),
}

/// The fleet-wide windows covering a slot of a job of `group` at `at`: a `skip` window wins
/// over `defer` ones (a skip is the operator's stronger word).
pub(crate) fn slot_rule<'w>(windows: &'w [Window], group: &str, at: DateTime<Utc>) -> SlotRule<'w> {
    let mut rule = SlotRule::Free;
    for w in windows
        .iter()
        .filter(|w| w.fleet_wide() && w.covers_group(group))
    {
        let Some(open) = open_at(w, at) else {
            continue;
        };
        match (w.policy, &rule) {
            (WindowPolicy::Skip, _) => return SlotRule::Skip(w),
            (WindowPolicy::Defer, SlotRule::Defer(_, end)) if *end >= open.end => {}
            (WindowPolicy::Defer, _) => rule = SlotRule::Defer(w, open.end),
        }
    }
    rule
}

/// The machine window open at `at` that covers `machine` for a job of `group`, and when
/// it closes.
pub(crate) fn machine_window<'w>(
    windows: &'w [Window],
    group: &str,
    machine: &str,
    at: DateTime<Utc>,
) -> Option<(&'w Window, DateTime<Utc>)> {
    windows
        .iter()
        .filter(|w| !w.fleet_wide() && w.covers_group(group) && w.covers_machine(machine))
        .find_map(|w| open_at(w, at).map(|o| (w, o.end)))
}

/// `saltpeterctl maintenance windows`: the next `count` openings of every window after
/// `now`, in order of start.
pub(crate) fn listed(windows: &[Window], now: DateTime<Utc>, count: u32) -> Vec<WindowOccurrence> {
    let per_window = count.clamp(1, MAX_LISTED) as usize;
    let mut list: Vec<WindowOccurrence> = windows
        .iter()
        .flat_map(|w| {
            upcoming(w, now, per_window)
                .into_iter()
                .map(|o| WindowOccurrence {
                    name: w.name.clone(),
                    start: o.start.timestamp_millis(),
                    end: o.end.timestamp_millis(),
                    open: o.start <= now,
                    policy: w.policy.as_str().to_string(),
                    machines: w.machines.clone(),
                    groups: w.groups.clone(),
                    timezone: w.timezone.name().to_string(),
                })
        })
        .collect();
    list.sort_by(|a, b| (a.start, &a.name).cmp(&(b.start, &b.name)));
    list.truncate(per_window);
    list
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use chrono_tz::Tz;

    use super::*;
    use crate::schedule::Schedule;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        match Utc.with_ymd_and_hms(y, mo, d, h, mi, 0) {
            chrono::LocalResult::Single(t) => t,
            _ => panic!("bad time"),
        }
    }

    fn every(name: &str, expr: &str, tz: Tz, duration_s: u64, policy: WindowPolicy) -> Window {
        let schedule = match Schedule::from_expr(expr, tz) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        Window {
            name: name.into(),
            when: WindowTime::Every {
                schedule,
                duration_s,
            },
            timezone: tz,
            machines: Vec::new(),
            groups: Vec::new(),
            policy,
            file: "w.yaml".into(),
            line: 1,
        }
    }

    #[test]
    fn a_sunday_window_is_open_for_its_duration_only() {
        let w = every(
            "sunday-patch",
            "0 2 * * 0",
            Tz::UTC,
            7200,
            WindowPolicy::Skip,
        );
        // 2026-11-29 is a Sunday.
        assert_eq!(open_at(&w, utc(2026, 11, 29, 1, 59)), None);
        let open = open_at(&w, utc(2026, 11, 29, 2, 0));
        assert_eq!(
            open,
            Some(Opening {
                start: utc(2026, 11, 29, 2, 0),
                end: utc(2026, 11, 29, 4, 0)
            })
        );
        assert!(open_at(&w, utc(2026, 11, 29, 3, 59)).is_some());
        assert_eq!(
            open_at(&w, utc(2026, 11, 29, 4, 0)),
            None,
            "the end is open"
        );
        let next = upcoming(&w, utc(2026, 11, 29, 3, 0), 2);
        assert_eq!(next.len(), 2);
        assert_eq!(next[0].start, utc(2026, 11, 29, 2, 0));
        assert_eq!(next[1].start, utc(2026, 12, 6, 2, 0));
    }

    #[test]
    fn a_window_across_daylight_saving_changes_keeps_its_real_length() {
        let berlin: Tz = chrono_tz::Europe::Berlin;
        let w = every("patch", "0 2 * * 0", berlin, 7200, WindowPolicy::Skip);
        // Spring forward, Sunday 2026-03-29: 02:00 does not exist in Berlin; a fixed-hour
        // schedule runs at the first instant after the gap, 03:00 CEST = 01:00 UTC.
        let spring = open_at(&w, utc(2026, 3, 29, 2, 30));
        assert_eq!(
            spring,
            Some(Opening {
                start: utc(2026, 3, 29, 1, 0),
                end: utc(2026, 3, 29, 3, 0)
            })
        );
        assert_eq!(open_at(&w, utc(2026, 3, 29, 0, 59)), None);
        // Fall back, Sunday 2026-10-25: 02:00 happens twice; the window opens at the first,
        // 02:00 CEST = 00:00 UTC, and lasts two real hours, not until the second 04:00.
        let autumn = open_at(&w, utc(2026, 10, 25, 1, 30));
        assert_eq!(
            autumn,
            Some(Opening {
                start: utc(2026, 10, 25, 0, 0),
                end: utc(2026, 10, 25, 2, 0)
            })
        );
        assert_eq!(open_at(&w, utc(2026, 10, 25, 2, 0)), None);
        // The week before, in summer time: 02:00 CEST = 00:00 UTC.
        assert_eq!(
            open_at(&w, utc(2026, 10, 18, 0, 0)).map(|o| o.start),
            Some(utc(2026, 10, 18, 0, 0))
        );
        // And the week after, in winter time: 02:00 CET = 01:00 UTC.
        assert_eq!(
            open_at(&w, utc(2026, 11, 1, 1, 0)).map(|o| o.start),
            Some(utc(2026, 11, 1, 1, 0))
        );
    }

    #[test]
    fn skip_wins_over_defer_and_scopes_are_respected() {
        let t = utc(2026, 11, 29, 2, 30);
        let defer = every("d", "0 2 * * 0", Tz::UTC, 7200, WindowPolicy::Defer);
        let mut later = every(
            "d2",
            "0 1 * * 0",
            Tz::UTC,
            3 * 3600 + 60,
            WindowPolicy::Defer,
        );
        later.groups = vec!["other".into()];
        let windows = vec![defer.clone(), later.clone()];
        assert_eq!(
            slot_rule(&windows, "db", t),
            SlotRule::Defer(&windows[0], utc(2026, 11, 29, 4, 0))
        );
        // For the group `other` both apply: the latest end wins.
        assert_eq!(
            slot_rule(&windows, "other", t),
            SlotRule::Defer(&windows[1], utc(2026, 11, 29, 4, 1))
        );
        let skip = every("s", "0 2 * * 0", Tz::UTC, 600, WindowPolicy::Skip);
        let windows = vec![defer, skip];
        assert!(matches!(
            slot_rule(&windows, "db", utc(2026, 11, 29, 2, 5)),
            SlotRule::Skip(w) if w.name == "s"
        ));
        assert_eq!(
            slot_rule(&windows, "db", utc(2026, 11, 29, 5, 0)),
            SlotRule::Free
        );
        // A machine window is not a slot rule; it covers its machines only.
        let mut db = every("db", "0 2 * * 0", Tz::UTC, 7200, WindowPolicy::Skip);
        db.machines = vec!["db*".into()];
        let windows = vec![db];
        assert_eq!(slot_rule(&windows, "any", t), SlotRule::Free);
        assert!(machine_window(&windows, "any", "db01", t).is_some());
        assert!(machine_window(&windows, "any", "web01", t).is_none());
    }

    #[test]
    fn a_one_off_window() {
        let w = Window {
            when: WindowTime::Once {
                start: utc(2026, 5, 1, 10, 0),
                end: utc(2026, 5, 1, 11, 0),
            },
            ..every("x", "* * * * *", Tz::UTC, 60, WindowPolicy::Defer)
        };
        assert!(open_at(&w, utc(2026, 5, 1, 10, 0)).is_some());
        assert!(open_at(&w, utc(2026, 5, 1, 11, 0)).is_none());
        assert_eq!(upcoming(&w, utc(2026, 5, 1, 10, 30), 5).len(), 1);
        assert!(upcoming(&w, utc(2026, 5, 1, 11, 30), 5).is_empty());
    }

    #[test]
    fn globs() {
        use crate::config::windows::glob_match;
        assert!(glob_match("db*", "db01"));
        assert!(glob_match("*", ""));
        assert!(glob_match("d?0*", "db01.example"));
        assert!(!glob_match("db*", "web01"));
        assert!(!glob_match("db", "db01"));
        assert!(glob_match("*a*a*a*b", "aaaaaaaaaaaaaaaaaab"));
        assert!(!glob_match("*a*a*a*b", "aaaaaaaaaaaaaaaaaaa"));
    }
}
