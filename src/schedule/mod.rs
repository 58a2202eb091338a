//! Saltpeter's schedules: when a job fires, as a pure function of the job's cron fields, its
//! time zone and a given instant (`now` is always a parameter, never read from the clock).
//!
//! Outline:
//! 1. [`Schedule::from_fields`] / [`Schedule::from_expr`] check each of the seven fields on its
//!    own (`fields.rs`), so an error names the field and its allowed range, then hand the
//!    numeric 7-field text to croner. `from_expr` also takes 5- and 6-field expressions and the
//!    `@yearly`-style shortcuts.
//! 2. croner only ever answers "which wall-clock time matches next" (it is given naive local
//!    times, where there is no daylight saving). `walk.rs` maps those wall-clock times to real
//!    instants in the job's zone by the Vixie cron / cronie rule:
//!    - a job whose minute or hour field starts with `*` follows real time: every real
//!      occurrence fires once, a time that does not exist is not invented;
//!    - any other job has a fixed hour: a time skipped by a spring-forward change runs once at
//!      the first instant after the gap, a time repeated by a fall-back change runs once, at
//!      its first occurrence.
//!
//!    croner's own DST handling is not used because it classifies jobs differently: it treats
//!    every list, range or step (`30 1,2 * * *`, `0-59/30 2 * * *`) as an interval job, which
//!    skips the spring-forward gap and fires twice in the fall-back hour.
//! 3. dom and dow follow Vixie cron: when both are restricted a day matches if either matches
//!    (croner's default); when one of them starts with `*` without being `*` (e.g. `*/2`),
//!    Vixie cron requires both, so only then croner's AND mode is used.
//!
//! A schedule that can never fire is reported by [`Schedule::check_fires`], which the config
//! loader calls with its `now`.
//!
//! Memory: croner's matcher keeps a byte per possible year (years 1 to 5000), about 5.3 KB
//! per schedule, which made 10,000 distinct schedules cost main ~50 MB. A [`Schedule`] keeps
//! only its canonical text (one string of the seven numeric fields, under 100 bytes); the
//! matcher is built when the schedule is asked (a few microseconds: one parse), and the
//! last one built is kept per thread, so walking one schedule slot by slot parses once.

mod error;
mod fields;
mod range;
mod walk;

#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

pub(crate) use error::{FieldProblem, ScheduleError};
use fields::FieldKind;
pub(crate) use range::{ActiveRange, RangePhase};
use walk::Matcher;

/// Most firings `saltpeterctl schedule next` lists at once.
pub(crate) const MAX_UPCOMING: u32 = 10_000;

/// The seven cron fields as written in a job (`sec` defaults to `0`, `year` to `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronFields {
    pub sec: String,
    pub min: String,
    pub hour: String,
    pub dom: String,
    pub mon: String,
    pub dow: String,
    pub year: String,
}

impl CronFields {
    /// The five classic fields, with `sec` `0` and `year` `*`.
    pub fn new(min: &str, hour: &str, dom: &str, mon: &str, dow: &str) -> CronFields {
        CronFields {
            sec: "0".to_string(),
            min: min.to_string(),
            hour: hour.to_string(),
            dom: dom.to_string(),
            mon: mon.to_string(),
            dow: dow.to_string(),
            year: "*".to_string(),
        }
    }

    fn get(&self, kind: FieldKind) -> &str {
        match kind {
            FieldKind::Sec => &self.sec,
            FieldKind::Min => &self.min,
            FieldKind::Hour => &self.hour,
            FieldKind::Dom => &self.dom,
            FieldKind::Mon => &self.mon,
            FieldKind::Dow => &self.dow,
            FieldKind::Year => &self.year,
        }
    }
}

/// The checked fields: the canonical text and how croner must read it.
#[derive(Debug)]
struct Compiled {
    /// Canonical numeric fields in 7-field order, separated by spaces.
    text: String,
    /// dom and dow are ANDed (Vixie cron, see the module note).
    vixie_and: bool,
}

/// A validated schedule read in one time zone.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Shared, so a copy of a job does not copy the text and comparing two copies is a
    /// pointer comparison.
    compiled: Arc<Compiled>,
    tz: Tz,
    /// Minute or hour field starts with `*`: the job follows real time across DST changes.
    follows_real_time: bool,
    /// `active_from` / `active_until`: slots outside are not slots at all. Shared like
    /// `compiled`; `None` when the job has neither key.
    range: Option<Arc<ActiveRange>>,
}

impl Schedule {
    /// Builds a schedule from the seven job fields, read in `tz`.
    pub fn from_fields(fields: &CronFields, tz: Tz) -> Result<Schedule, ScheduleError> {
        let mut canonical: [String; 7] = Default::default();
        for (slot, kind) in canonical.iter_mut().zip(FieldKind::ALL) {
            *slot = fields::normalize(kind, fields.get(kind))?;
        }
        let follows_real_time =
            fields.min.trim().starts_with('*') || fields.hour.trim().starts_with('*');
        Self::build(canonical, tz, follows_real_time)
    }

    /// Builds a schedule from a `schedule:` expression: 5 fields (min hour dom mon dow), 6 (sec
    /// first), 7 (sec first, year last), or `@yearly` `@annually` `@monthly` `@weekly` `@daily`
    /// `@hourly`.
    pub fn from_expr(expr: &str, tz: Tz) -> Result<Schedule, ScheduleError> {
        let trimmed = expr.trim();
        let expanded = if trimmed.starts_with('@') {
            match trimmed.to_ascii_lowercase().as_str() {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                _ => {
                    return Err(ScheduleError::UnknownShortcut {
                        expr: trimmed.to_string(),
                    });
                }
            }
        } else {
            trimmed
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let fields = match parts.as_slice() {
            [min, hour, dom, mon, dow] => CronFields::new(min, hour, dom, mon, dow),
            [sec, min, hour, dom, mon, dow] => CronFields {
                sec: sec.to_string(),
                ..CronFields::new(min, hour, dom, mon, dow)
            },
            [sec, min, hour, dom, mon, dow, year] => CronFields {
                sec: sec.to_string(),
                year: year.to_string(),
                ..CronFields::new(min, hour, dom, mon, dow)
            },
            _ => {
                return Err(ScheduleError::FieldCount {
                    expr: trimmed.to_string(),
                    count: parts.len(),
                });
            }
        };
        Self::from_fields(&fields, tz)
    }

    fn build(
        canonical: [String; 7],
        tz: Tz,
        follows_real_time: bool,
    ) -> Result<Schedule, ScheduleError> {
        let dom = &canonical[3];
        let dow = &canonical[5];
        // Vixie cron: a dom or dow field starting with `*` (but not `*` itself, which croner
        // already treats as unrestricted) makes the day test an AND of both fields.
        let vixie_and =
            (dom.starts_with('*') && dom != "*") || (dow.starts_with('*') && dow != "*");
        let parser = parser(vixie_and);
        let text = canonical.join(" ");
        if let Err(err) = parser.parse(&text) {
            return Err(blame_field(&parser, &canonical, &text, &err));
        }
        Ok(Schedule {
            compiled: Arc::new(Compiled { text, vixie_and }),
            tz,
            follows_real_time,
            range: None,
        })
    }

    /// The same schedule, firing only inside `range` (an unbounded range changes nothing).
    pub fn with_range(mut self, range: ActiveRange) -> Schedule {
        self.range = (!range.is_unbounded()).then(|| Arc::new(range));
        self
    }

    /// The active range, when the job has one.
    pub fn range(&self) -> Option<&ActiveRange> {
        self.range.as_deref()
    }

    /// Why the job has no next slot at `now` (its range ended) or none yet (not active
    /// yet); `None` while its range is open or when it has none.
    pub fn range_note(&self, now: DateTime<Utc>) -> Option<String> {
        self.range.as_ref().and_then(|r| r.note(now))
    }

    /// Runs `f` with this schedule's matcher: the one built last on this thread when it was
    /// this schedule's (a walk asks one schedule many times in a row), else a new one.
    fn with_matcher<R>(&self, f: impl FnOnce(&Matcher) -> R) -> R {
        LAST_MATCHER.with(|cell| {
            let mut last = cell.borrow_mut();
            // The cache holds its `Arc`, so the pointer cannot be reused by another schedule.
            let hit = matches!(&*last, Some((compiled, m))
                if Arc::ptr_eq(compiled, &self.compiled)
                    && m.tz == self.tz
                    && m.follows_real_time == self.follows_real_time);
            if !hit {
                *last = Some((Arc::clone(&self.compiled), self.matcher()));
            }
            match &*last {
                Some((_, m)) => f(m),
                None => f(&self.matcher()),
            }
        })
    }

    /// croner's matcher for this schedule's wall-clock times, built for one query. The
    /// fields were accepted by the same parser in [`Schedule::build`]; should it refuse them
    /// now anyway, the schedule matches nothing (never a panic).
    fn matcher(&self) -> Matcher {
        let wall = parser(self.compiled.vixie_and)
            .parse(&self.compiled.text)
            .ok();
        Matcher {
            wall,
            tz: self.tz,
            follows_real_time: self.follows_real_time,
        }
    }

    /// The canonical 7-field text (`sec min hour dom mon dow year`, names as numbers).
    pub fn describe(&self) -> String {
        self.compiled.text.clone()
    }

    /// The zone the fields are read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// Whether the job follows real time across DST changes (minute or hour starts with `*`)
    /// rather than having a fixed hour.
    pub fn follows_real_time(&self) -> bool {
        self.follows_real_time
    }

    /// The first firing strictly after `after` inside the active range, or `None` if
    /// there is none.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.with_matcher(|m| self.next_in_range(m, after))
    }

    /// The matcher's next firing after `after`, moved up to `active_from` and cut off
    /// after `active_until`.
    fn next_in_range(&self, matcher: &Matcher, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let Some(range) = self.range.as_deref() else {
            return walk::next_after(matcher, after);
        };
        let after = match range.from {
            // Strictly after the instant just before `from`: a slot at `from` counts.
            Some(from) if from > after => from - chrono::Duration::nanoseconds(1),
            _ => after,
        };
        walk::next_after(matcher, after).filter(|next| range.until.is_none_or(|u| *next <= u))
    }

    /// Up to `n` firings strictly after `after`, in order.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        self.with_matcher(|matcher| {
            let mut out = Vec::with_capacity(n.min(1024));
            let mut cursor = after;
            while out.len() < n {
                match self.next_in_range(matcher, cursor) {
                    Some(next) => {
                        debug_assert!(next > cursor, "firings must strictly increase");
                        out.push(next);
                        cursor = next;
                    }
                    None => break,
                }
            }
            out
        })
    }

    /// Fails with [`ScheduleError::NeverFires`] when no firing follows `now`, whatever the
    /// active range (a range that has ended is not an error: the job says so instead).
    pub fn check_fires(&self, now: DateTime<Utc>) -> Result<(), ScheduleError> {
        match self.with_matcher(|m| walk::next_after(m, now)) {
            Some(_) => Ok(()),
            None => Err(ScheduleError::NeverFires {
                schedule: self.describe(),
                tz: self.tz,
                after: now,
            }),
        }
    }
}

thread_local! {
    /// The matcher of the schedule asked last on this thread (one, about 5 KB).
    static LAST_MATCHER: RefCell<Option<(Arc<Compiled>, Matcher)>> = const { RefCell::new(None) };
}

/// The parser every schedule is checked and matched with.
fn parser(vixie_and: bool) -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Required)
        .dom_and_dow(vixie_and)
        .build()
}

/// Two schedules are equal when they fire at the same instants: same fields, same zone,
/// same active range.
impl PartialEq for Schedule {
    fn eq(&self, other: &Schedule) -> bool {
        self.tz == other.tz
            && self.follows_real_time == other.follows_real_time
            && self.range.as_ref().map(|r| (r.from, r.until))
                == other.range.as_ref().map(|r| (r.from, r.until))
            && (Arc::ptr_eq(&self.compiled, &other.compiled)
                || self.compiled.text == other.compiled.text)
    }
}

impl Eq for Schedule {}

/// croner refused the whole pattern: find the field it objects to by parsing each field
/// alone with the others unrestricted, so the message still names a field.
fn blame_field(
    parser: &CronParser,
    canonical: &[String; 7],
    text: &str,
    err: &croner::errors::CronError,
) -> ScheduleError {
    for (index, kind) in FieldKind::ALL.iter().enumerate() {
        let mut probe: [&str; 7] = ["0", "*", "*", "*", "*", "*", "*"];
        probe[index] = &canonical[index];
        if let Err(field_err) = parser.parse(&probe.join(" ")) {
            return kind.error(FieldProblem::CronRefused {
                text: canonical[index].clone(),
                message: field_err.to_string(),
            });
        }
    }
    ScheduleError::Rejected {
        schedule: text.to_string(),
        message: err.to_string(),
    }
}
