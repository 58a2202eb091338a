use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::{CronFields, FieldKind, FieldProblem, Schedule, ScheduleError};

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    match Utc.with_ymd_and_hms(y, mo, d, h, mi, s) {
        chrono::LocalResult::Single(t) => t,
        _ => panic!("bad test date"),
    }
}

fn expr(e: &str, tz: Tz) -> Schedule {
    match Schedule::from_expr(e, tz) {
        Ok(s) => s,
        Err(err) => panic!("{e}: {err}"),
    }
}

/// The next `n` firings as `MM-DD HH:MM:SS` in UTC.
fn fires(e: &str, tz: Tz, after: DateTime<Utc>, n: usize) -> Vec<String> {
    expr(e, tz)
        .upcoming(after, n)
        .iter()
        .map(|t| t.format("%m-%d %H:%M:%S").to_string())
        .collect()
}

fn field_error(e: &str) -> String {
    match Schedule::from_expr(e, Tz::UTC) {
        Ok(s) => panic!("{e} accepted as {}", s.describe()),
        Err(err) => err.to_string(),
    }
}

#[test]
fn five_six_and_seven_field_forms() {
    let start = utc(2026, 11, 25, 10, 0, 0);
    assert_eq!(expr("30 9 * * *", Tz::UTC).describe(), "0 30 9 * * * *");
    assert_eq!(
        fires("30 9 * * *", Tz::UTC, start, 2),
        ["11-26 09:30:00", "11-27 09:30:00"]
    );
    assert_eq!(
        fires("*/20 * * * * *", Tz::UTC, start, 3),
        ["11-25 10:00:20", "11-25 10:00:40", "11-25 10:01:00"]
    );
    let seven = expr("0 0 12 1 1 * 2030", Tz::UTC);
    assert_eq!(seven.next_after(start), Some(utc(2030, 1, 1, 12, 0, 0)));
    assert_eq!(seven.next_after(utc(2030, 1, 1, 12, 0, 0)), None);
    assert!(field_error("1 2 3").contains("has 3 fields"));
}

#[test]
fn fields_form_defaults_sec_and_year() {
    let fields = CronFields::new("15", "*/6", "*", "*", "*");
    let s = match Schedule::from_fields(&fields, Tz::UTC) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(s.describe(), "0 15 */6 * * * *");
    assert_eq!(
        s.next_after(utc(2026, 1, 1, 0, 15, 0)),
        Some(utc(2026, 1, 1, 6, 15, 0))
    );
}

#[test]
fn shortcuts() {
    let start = utc(2026, 11, 25, 10, 0, 0);
    assert_eq!(expr("@yearly", Tz::UTC).describe(), "0 0 0 1 1 * *");
    assert_eq!(expr("@annually", Tz::UTC).describe(), "0 0 0 1 1 * *");
    assert_eq!(expr("@monthly", Tz::UTC).describe(), "0 0 0 1 * * *");
    assert_eq!(expr("@weekly", Tz::UTC).describe(), "0 0 0 * * 0 *");
    assert_eq!(expr("@daily", Tz::UTC).describe(), "0 0 0 * * * *");
    assert_eq!(expr("@HOURLY", Tz::UTC).describe(), "0 0 * * * * *");
    // 2026-11-29 is a Sunday.
    assert_eq!(fires("@weekly", Tz::UTC, start, 1), ["11-29 00:00:00"]);
    assert!(expr("@hourly", Tz::UTC).follows_real_time());
    assert!(!expr("@daily", Tz::UTC).follows_real_time());
    assert!(field_error("@fortnightly").contains("unknown schedule shortcut"));
}

#[test]
fn names_and_sunday_as_seven() {
    assert_eq!(
        expr("0 9 * jan-MAR Mon-fri", Tz::UTC).describe(),
        "0 0 9 * 1-3 1-5 *"
    );
    let start = utc(2026, 11, 25, 10, 0, 0);
    let sundays = fires("0 0 * * 0", Tz::UTC, start, 2);
    assert_eq!(fires("0 0 * * 7", Tz::UTC, start, 2), sundays);
    assert_eq!(fires("0 0 * * sun", Tz::UTC, start, 2), sundays);
    assert_eq!(sundays, ["11-29 00:00:00", "12-06 00:00:00"]);
    // fri-sun wraps to Sunday as 7.
    assert_eq!(
        expr("0 0 * * fri-sun", Tz::UTC).describe(),
        "0 0 0 * * 5-7 *"
    );
}

#[test]
fn dom_and_dow_use_the_vixie_or_rule() {
    let start = utc(2026, 11, 25, 10, 0, 0);
    // Either the 1st or a Monday: Mon 30 Nov, Tue 1 Dec, Mon 7 Dec.
    assert_eq!(
        fires("0 0 1 * mon", Tz::UTC, start, 3),
        ["11-30 00:00:00", "12-01 00:00:00", "12-07 00:00:00"]
    );
    // A dom starting with `*` makes Vixie cron require both: odd days that are Mondays.
    assert_eq!(
        fires("0 0 */2 * mon", Tz::UTC, utc(2026, 11, 1, 0, 0, 0), 4),
        [
            "11-09 00:00:00",
            "11-23 00:00:00",
            "12-07 00:00:00",
            "12-21 00:00:00"
        ]
    );
}

#[test]
fn last_day_of_month_and_last_weekday() {
    assert_eq!(
        fires("0 0 L 2 *", Tz::UTC, utc(2027, 1, 1, 0, 0, 0), 2),
        ["02-28 00:00:00", "02-29 00:00:00"]
    );
    // The original's `L5` (last Friday) is read as `5L`; 2026-11-27 is the last Friday.
    assert_eq!(expr("0 0 * * L5", Tz::UTC).describe(), "0 0 0 * * 5L *");
    assert_eq!(
        fires("0 0 * * L5", Tz::UTC, utc(2026, 11, 1, 0, 0, 0), 1),
        ["11-27 00:00:00"]
    );
}

#[test]
fn invalid_fields_name_the_field_and_range() {
    assert_eq!(
        field_error("0 25 * * *"),
        "field `hour`: 25 is out of range 0-23"
    );
    assert_eq!(
        field_error("60 * * * *"),
        "field `min`: 60 is out of range 0-59"
    );
    assert_eq!(
        field_error("0 0 0 * *"),
        "field `dom`: 0 is out of range 1-31"
    );
    assert_eq!(
        field_error("0 0 1 13 *"),
        "field `mon`: 13 is out of range 1-12"
    );
    assert_eq!(
        field_error("0 0 * * 8"),
        "field `dow`: 8 is out of range 0-7"
    );
    assert_eq!(
        field_error("0 0 0 1 1 * 1969"),
        "field `year`: 1969 is out of range 1970-2099"
    );
    assert_eq!(
        field_error("0 0 * foo *"),
        "field `mon`: `foo` is not a number in 1-12 or a month name (jan-dec)"
    );
    assert!(field_error("*/0 * * * *").starts_with("field `min`: step `0`"));
    assert!(field_error("0 5-3 * * *").starts_with("field `hour`: range 5-3 goes backwards"));
    assert!(field_error("0 L * * *").starts_with("field `hour`:"));
    assert!(field_error("0 0 * * L").starts_with("field `dow`:"));
    let empty = Schedule::from_fields(&CronFields::new("", "1", "*", "*", "*"), Tz::UTC);
    assert!(matches!(
        empty,
        Err(ScheduleError::Field { field: "min", .. })
    ));
}

#[test]
fn field_errors_say_what_the_field_takes_unless_they_name_its_range() {
    assert_eq!(
        field_error("*/0 * * * *"),
        "field `min`: step `0` in `*/0` must be a whole number of at least 1; min takes 0-59"
    );
    assert_eq!(
        field_error("0 0 * * L"),
        "field `dow`: `L` alone is not a weekday; write e.g. `5L` for the last Friday; dow \
         takes 0-7 (0 and 7 are Sunday) or sun-sat, `<day>L` (last in the month), `<day>#<n>`"
    );
    // The text names the range already (here inside what was given): nothing is added.
    assert_eq!(
        field_error("0-59, * * * *"),
        "field `min`: `0-59,` has an empty list item"
    );
    let err = Schedule::from_expr("0 0 * * 5#6", Tz::UTC).map(|_| ());
    assert_eq!(
        err,
        Err(ScheduleError::Field {
            field: "dow",
            problem: FieldProblem::Occurrence { nth: "6".into() },
            takes: Some(FieldKind::Dow.allowed()),
        })
    );
}

#[test]
fn schedules_that_never_fire_are_reported() {
    let now = utc(2026, 11, 25, 10, 0, 0);
    let feb30 = expr("0 0 30 2 *", Tz::UTC);
    assert_eq!(feb30.next_after(now), None);
    let err = feb30.check_fires(now).err().map(|e| e.to_string());
    assert!(err.is_some_and(|m| m.contains("never fires")));
    let past = expr("0 0 0 1 1 * 2020", Tz::UTC);
    assert!(past.check_fires(now).is_err());
    assert!(expr("0 0 0 1 1 * 2030", Tz::UTC).check_fires(now).is_ok());
}

#[test]
fn berlin_spring_forward_2027() {
    let tz = chrono_tz::Europe::Berlin;
    // 2027-03-28: 02:00 CET (01:00Z) jumps to 03:00 CEST. 02:30 does not exist.
    let start = utc(2027, 3, 27, 23, 0, 0);
    // Fixed hour: the skipped 02:30 runs once at 03:00 CEST.
    assert_eq!(
        fires("30 2 * * *", tz, start, 2),
        ["03-28 01:00:00", "03-29 00:30:00"]
    );
    // Fixed hour as a list (croner alone would skip it): 01:30 CET, then 03:00 CEST.
    assert_eq!(
        fires("30 1,2 * * *", tz, start, 3),
        ["03-28 00:30:00", "03-28 01:00:00", "03-28 23:30:00"]
    );
    // Several skipped times, and 03:00 itself, collapse into one firing.
    assert_eq!(
        fires("0,30 2,3 * * *", tz, start, 3),
        ["03-28 01:00:00", "03-28 01:30:00", "03-29 00:00:00"]
    );
    // Real time: nothing invented in the gap, nothing lost.
    assert_eq!(
        fires("*/30 * * * *", tz, start, 5),
        [
            "03-27 23:30:00",
            "03-28 00:00:00",
            "03-28 00:30:00",
            "03-28 01:00:00",
            "03-28 01:30:00"
        ]
    );
}

#[test]
fn berlin_fall_back_2026() {
    let tz = chrono_tz::Europe::Berlin;
    // 2026-10-25: 03:00 CEST (01:00Z) goes back to 02:00 CET; 02:xx happens twice.
    let start = utc(2026, 10, 24, 22, 0, 0);
    assert_eq!(
        fires("30 2 * * *", tz, start, 2),
        ["10-25 00:30:00", "10-26 01:30:00"]
    );
    // Fixed hour with a list and a range step: only the first pass.
    assert_eq!(
        fires("30 1,2 * * *", tz, start, 3),
        ["10-24 23:30:00", "10-25 00:30:00", "10-26 00:30:00"]
    );
    assert_eq!(
        fires("0-59/30 2 * * *", tz, start, 3),
        ["10-25 00:00:00", "10-25 00:30:00", "10-26 01:00:00"]
    );
    // Real time: both passes, in real order, none twice.
    assert_eq!(
        fires("0 * * * *", tz, start, 4),
        [
            "10-24 23:00:00",
            "10-25 00:00:00",
            "10-25 01:00:00",
            "10-25 02:00:00"
        ]
    );
    // Starting inside the first pass (02:10 CEST).
    assert_eq!(
        fires("*/30 * * * *", tz, utc(2026, 10, 25, 0, 10, 0), 4),
        [
            "10-25 00:30:00",
            "10-25 01:00:00",
            "10-25 01:30:00",
            "10-25 02:00:00"
        ]
    );
    // Every minute of hour 2 follows real time: 02:59 CEST is followed by 02:00 CET.
    assert_eq!(
        fires("* 2 * * *", tz, utc(2026, 10, 25, 0, 58, 30), 2),
        ["10-25 00:59:00", "10-25 01:00:00"]
    );
    // Starting inside the second pass (02:40 CET): the fixed job is already done for today.
    assert_eq!(
        fires("30 2 * * *", tz, utc(2026, 10, 25, 1, 40, 0), 1),
        ["10-26 01:30:00"]
    );
    assert_eq!(
        fires("*/30 * * * *", tz, utc(2026, 10, 25, 1, 10, 0), 1),
        ["10-25 01:30:00"]
    );
}

#[test]
fn new_york_changes() {
    let tz = chrono_tz::America::New_York;
    // 2027-03-14: 02:00 EST (07:00Z) jumps to 03:00 EDT.
    assert_eq!(
        fires("30 2 * * *", tz, utc(2027, 3, 14, 0, 0, 0), 2),
        ["03-14 07:00:00", "03-15 06:30:00"]
    );
    // 2026-11-01: 02:00 EDT (06:00Z) goes back to 01:00 EST; 01:xx happens twice.
    assert_eq!(
        fires("30 1 * * *", tz, utc(2026, 11, 1, 0, 0, 0), 2),
        ["11-01 05:30:00", "11-02 06:30:00"]
    );
    assert_eq!(
        fires("*/30 * * * *", tz, utc(2026, 11, 1, 4, 50, 0), 5),
        [
            "11-01 05:00:00",
            "11-01 05:30:00",
            "11-01 06:00:00",
            "11-01 06:30:00",
            "11-01 07:00:00"
        ]
    );
}

#[test]
fn next_after_is_strict_even_with_subsecond_input() {
    let s = expr("0 12 * * *", Tz::UTC);
    let at = utc(2026, 1, 1, 12, 0, 0);
    assert_eq!(s.next_after(at), Some(utc(2026, 1, 2, 12, 0, 0)));
    let just_before = at - chrono::Duration::milliseconds(1);
    assert_eq!(s.next_after(just_before), Some(at));
    let just_after = at + chrono::Duration::milliseconds(1);
    assert_eq!(s.next_after(just_after), Some(utc(2026, 1, 2, 12, 0, 0)));
}

#[test]
fn a_whole_year_in_berlin_keeps_the_dst_invariants() {
    let tz = chrono_tz::Europe::Berlin;
    let start = utc(2025, 12, 31, 23, 0, 0); // 2026-01-01 00:00 local
    let end = utc(2026, 12, 31, 23, 0, 0);
    let count = |e: &str| {
        let firings = expr(e, tz).upcoming(start, 40_000);
        assert!(
            firings.windows(2).all(|w| w[0] < w[1]),
            "{e}: not increasing"
        );
        firings.iter().filter(|t| **t <= end).count()
    };
    // Real time: one firing per real half hour, whatever the clock does.
    assert_eq!(count("*/30 * * * *"), 365 * 48);
    // Fixed hour: once a day, including the days of both changes.
    assert_eq!(count("30 2 * * *"), 365);
    // Four times a day, except that 02:00 and 02:30 collapse into one on 29 March.
    assert_eq!(count("0,30 1,2 * * *"), 365 * 4 - 1);
}

fn range(from: Option<DateTime<Utc>>, until: Option<DateTime<Utc>>) -> super::ActiveRange {
    super::ActiveRange {
        from,
        until,
        from_text: Some("from".into()),
        until_text: Some("until".into()),
    }
}

#[test]
fn a_range_moves_the_first_slot_up_and_cuts_the_last() {
    let s = expr("0 * * * *", Tz::UTC).with_range(range(
        Some(utc(2026, 12, 1, 10, 0, 0)),
        Some(utc(2026, 12, 1, 12, 0, 0)),
    ));
    // Not yet active: the first slot is the one at `active_from` (inclusive).
    assert_eq!(
        s.upcoming(utc(2026, 11, 1, 0, 0, 0), 10),
        [
            utc(2026, 12, 1, 10, 0, 0),
            utc(2026, 12, 1, 11, 0, 0),
            utc(2026, 12, 1, 12, 0, 0)
        ]
    );
    // Ended: nothing, and the reason says so.
    assert_eq!(s.next_after(utc(2026, 12, 1, 12, 0, 0)), None);
    let note = s.range_note(utc(2026, 12, 1, 12, 0, 1));
    assert!(note.is_some_and(|n| n.contains("range ended")), "{s:?}");
    assert!(s.range_note(utc(2026, 12, 1, 11, 0, 0)).is_none());
    assert!(
        s.range_note(utc(2026, 11, 1, 0, 0, 0))
            .is_some_and(|n| n.contains("not active yet"))
    );
    // A range that has ended is not "never fires": the job is valid and says why.
    assert_eq!(s.check_fires(utc(2027, 1, 1, 0, 0, 0)), Ok(()));
}

#[test]
fn a_from_between_slots_starts_at_the_next_slot_and_ranges_compare() {
    let from = utc(2026, 12, 1, 10, 0, 1);
    let s = expr("*/10 * * * * *", Tz::UTC).with_range(range(Some(from), None));
    assert_eq!(
        s.next_after(utc(2026, 1, 1, 0, 0, 0)),
        Some(utc(2026, 12, 1, 10, 0, 10))
    );
    // The range is part of what a schedule is: a reload that changes it replans.
    let plain = expr("*/10 * * * * *", Tz::UTC);
    assert_ne!(s, plain);
    assert_eq!(plain.clone().with_range(range(None, None)), plain);
    assert_eq!(
        s,
        expr("*/10 * * * * *", Tz::UTC).with_range(range(Some(from), None))
    );
}
