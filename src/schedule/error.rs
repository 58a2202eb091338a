//! Why a schedule was rejected.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Why a schedule was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// One field is invalid: what is wrong with it and, unless that already names the
    /// field's range, everything the field takes.
    #[error(
        "field `{field}`: {problem}{}",
        takes.map(|t| format!("; {field} takes {t}")).unwrap_or_default()
    )]
    Field {
        field: &'static str,
        problem: FieldProblem,
        takes: Option<&'static str>,
    },
    /// A `schedule:` expression with the wrong number of fields.
    #[error(
        "schedule `{expr}` has {count} fields: expected 5 (min hour dom mon dow), 6 (sec first) \
         or 7 (sec first, year last), or one of @yearly @annually @monthly @weekly @daily @hourly"
    )]
    FieldCount { expr: String, count: usize },
    /// An `@name` that is not a known shortcut.
    #[error(
        "unknown schedule shortcut `{expr}`: expected one of @yearly @annually @monthly @weekly \
         @daily @hourly"
    )]
    UnknownShortcut { expr: String },
    /// croner refused the checked fields (should not happen; kept so it can never panic).
    #[error("schedule `{schedule}` was rejected by the cron parser: {message}")]
    Rejected { schedule: String, message: String },
    /// The schedule matches no instant after the given time (e.g. 30 February, a past year).
    #[error("schedule `{schedule}` in {tz} never fires after {after}")]
    NeverFires {
        schedule: String,
        tz: Tz,
        after: DateTime<Utc>,
    },
}

/// What is wrong with one field of a schedule (the field itself is named by
/// [`ScheduleError::Field`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("is empty")]
    Empty,
    #[error("`{text}` contains spaces; separate list items with commas")]
    Spaces { text: String },
    #[error("`{text}` has an empty list item")]
    EmptyItem { text: String },
    /// A month or day name whose position does not fit a number (cannot happen).
    #[error("`{token}` is out of range")]
    NameIndex { token: String },
    /// `names`: how the field also takes names (" or a month name (jan-dec)"), or empty.
    #[error("`{token}` is not a number in {lo}-{hi}{names}")]
    NotANumber {
        token: String,
        lo: u32,
        hi: u32,
        names: &'static str,
    },
    #[error("{token} is out of range {lo}-{hi}")]
    OutOfRange { token: String, lo: u32, hi: u32 },
    #[error("step `{step}` in `{item}` must be a whole number of at least 1")]
    Step { step: String, item: String },
    #[error("range {a}-{b} goes backwards; write it as two ranges")]
    Backwards { a: String, b: String },
    #[error(
        "`{item}`: dom takes `L` (last day), `LW` (last weekday) or `<day>W` (nearest weekday)"
    )]
    DomSpecial { item: String },
    #[error("`#{nth}` must name an occurrence 1-5")]
    Occurrence { nth: String },
    #[error("`L` alone is not a weekday; write e.g. `5L` for the last Friday")]
    LoneLast,
    #[error("`{item}`: `L`, `W` and `#` are only allowed in dom and dow")]
    SpecialElsewhere { item: String },
    /// croner refused the checked field (its words: its error cannot be cloned or
    /// compared, and a schedule's error is both).
    #[error("`{text}`: {message}")]
    CronRefused { text: String, message: String },
}
