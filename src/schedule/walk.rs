//! From matching wall-clock times to real instants, by the Vixie cron / cronie DST rule.
//!
//! A wall-clock time in the job's zone resolves to one instant, to two (a fall-back change
//! repeats it: the "first pass" and the "second pass" of the repeated hour), or to none (a
//! spring-forward gap). Per wall time:
//! - one instant: it fires;
//! - two instants: a fixed-hour job fires on the first only; a real-time job on both;
//! - none: a fixed-hour job fires once at the first instant after the gap (several skipped
//!   times collapse into that one firing); a real-time job does not fire.
//!
//! Instants grow with wall time except across a repeated hour, where the second pass comes
//! after every first-pass instant. So the next firing after `after` is the first candidate met
//! walking wall times forward from `after`'s own wall time, except that, while `after` lies in
//! a first pass, the second pass (which starts at an earlier wall time) must be looked at too.

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// Wall-clock searches per call; each either returns or steps past one gap or repeated hour.
const MAX_WALK_STEPS: usize = 64;
/// The longest spring-forward gap searched through (Samoa skipped a whole day in 2011).
const MAX_GAP_MINUTES: usize = 3 * 24 * 60;

/// A schedule ready to answer queries: croner's matcher for wall-clock (naive local) times,
/// the zone and the DST rule. Lives for one query (see the module note on memory).
pub(super) struct Matcher {
    pub(super) wall: Option<Cron>,
    pub(super) tz: Tz,
    pub(super) follows_real_time: bool,
}

impl Matcher {
    /// The next wall-clock time (naive local) matching the fields, at or after `from`.
    fn next_wall(&self, from: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        self.wall
            .as_ref()?
            .find_next_occurrence(&from, inclusive)
            .ok()
    }
}

pub(super) fn next_after(schedule: &Matcher, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let local = wall_of(schedule, after).with_nanosecond(0)?;
    let after_offset = offset_secs(schedule, after);

    // `after` in the first pass of a repeated hour: the second pass is still to come, and for
    // a real-time job its first match there may come before any later wall time's instant.
    let mut second_pass = None;
    if schedule.follows_real_time
        && let LocalResult::Ambiguous(first, second) = resolve(schedule, local)
        && after < second
    {
        let (start, end) = fold_walls(schedule, first, second);
        if let Some(wall) = schedule.next_wall(start, true)
            && wall < end
            && let LocalResult::Ambiguous(_, later) = resolve(schedule, wall)
        {
            second_pass = Some(later);
        }
    }

    let walked = walk_forward(schedule, after, after_offset, local);
    match (second_pass, walked) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The first candidate instant after `after`, walking wall times forward from `local`.
fn walk_forward(
    schedule: &Matcher,
    after: DateTime<Utc>,
    after_offset: i32,
    local: NaiveDateTime,
) -> Option<DateTime<Utc>> {
    let mut cursor = local;
    let mut inclusive = true;
    for _ in 0..MAX_WALK_STEPS {
        let wall = schedule.next_wall(cursor, inclusive)?;
        cursor = wall;
        inclusive = false;
        match resolve(schedule, wall) {
            LocalResult::Single(instant) => {
                if instant > after {
                    return Some(instant);
                }
            }
            LocalResult::Ambiguous(first, second) => {
                if first > after {
                    return Some(first);
                }
                let after_in_first_pass = after_offset == offset_secs(schedule, first);
                if after_in_first_pass {
                    // The second pass is handled by the caller; keep walking the first.
                    continue;
                }
                if schedule.follows_real_time {
                    if second > after {
                        return Some(second);
                    }
                } else {
                    // A fixed-hour job never fires in a second pass: skip the rest of it.
                    cursor = fold_walls(schedule, first, second).1;
                    inclusive = true;
                }
            }
            LocalResult::None => {
                let gap_end = gap_end(schedule, wall)?;
                if !schedule.follows_real_time && gap_end > after {
                    return Some(gap_end);
                }
                cursor = wall_of(schedule, gap_end);
                inclusive = true;
            }
        }
    }
    None
}

fn resolve(schedule: &Matcher, wall: NaiveDateTime) -> LocalResult<DateTime<Utc>> {
    match schedule.tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => LocalResult::Single(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
            LocalResult::Ambiguous(a.min(b), a.max(b))
        }
        LocalResult::None => LocalResult::None,
    }
}

fn wall_of(schedule: &Matcher, instant: DateTime<Utc>) -> NaiveDateTime {
    instant.with_timezone(&schedule.tz).naive_local()
}

fn offset_secs(schedule: &Matcher, instant: DateTime<Utc>) -> i32 {
    schedule
        .tz
        .offset_from_utc_datetime(&instant.naive_utc())
        .fix()
        .local_minus_utc()
}

/// The wall-time range `[start, end)` of the repeated hour whose wall time resolves to
/// `first` and `second`.
fn fold_walls(
    schedule: &Matcher,
    first: DateTime<Utc>,
    second: DateTime<Utc>,
) -> (NaiveDateTime, NaiveDateTime) {
    let old_offset = offset_secs(schedule, first);
    let new_offset = offset_secs(schedule, second);
    // The change happens at some instant in (first, second]: find it to the second.
    let (mut lo, mut hi) = (first, second);
    while hi - lo > Duration::seconds(1) {
        let mid = lo + (hi - lo) / 2;
        if offset_secs(schedule, mid) == old_offset {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let change = hi.naive_utc();
    (
        change + Duration::seconds(i64::from(new_offset)),
        change + Duration::seconds(i64::from(old_offset)),
    )
}

/// The first real instant after the spring-forward gap containing `wall`.
fn gap_end(schedule: &Matcher, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    let mut minute = wall.with_second(0)?.with_nanosecond(0)? + Duration::minutes(1);
    for _ in 0..MAX_GAP_MINUTES {
        if let LocalResult::Single(found) | LocalResult::Ambiguous(found, _) =
            resolve(schedule, minute)
        {
            // Zones change on whole minutes since 1970, but check the seconds before anyway.
            let mut first = found;
            for back in 1..60 {
                let earlier = minute - Duration::seconds(back);
                if earlier <= wall {
                    break;
                }
                match resolve(schedule, earlier) {
                    LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => first = t,
                    LocalResult::None => break,
                }
            }
            return Some(first);
        }
        minute += Duration::minutes(1);
    }
    None
}
