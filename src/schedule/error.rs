//! Why a schedule was rejected.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Why a schedule was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// One field is invalid; the message says what was expected.
    #[error("field `{field}`: {message}")]
    Field {
        field: &'static str,
        message: String,
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
