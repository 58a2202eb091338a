//! Why an argument of `saltpeterctl` is refused before anything reaches the daemon: one
//! variant per argument and way it can be wrong, each naming what was given and what
//! is accepted. Printed once by `main` (exit 2).

use crate::schedule::{MAX_UPCOMING, ScheduleError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ArgError {
    #[error(
        "--until `{text}` is not a time: give an RFC 3339 instant (2026-11-30T08:00:00Z), a \
         UTC date and time (2026-11-30 08:00) or a delay (2h, 1d)"
    )]
    Until { text: String },
    #[error("cannot read the time {text:?} (try 2h, 7d, 2026-11-25 or RFC 3339)")]
    Since { text: String },
    #[error("unknown time unit {unit:?} in {text:?} (s, m, h, d, w)")]
    SinceUnit { unit: String, text: String },
    #[error("--count {count} is out of range: it must be 1-{}", MAX_UPCOMING)]
    Count { count: u32 },
    #[error("--from `{text}` is not an RFC 3339 instant (e.g. 2026-11-25T10:00:00Z): {source}")]
    From {
        text: String,
        source: chrono::ParseError,
    },
    #[error("--tz `{name}` is not an IANA time zone (e.g. Europe/Berlin)")]
    Tz { name: String },
    #[error("invalid schedule `{expr}`: {source}")]
    Schedule { expr: String, source: ScheduleError },
    #[error("give --expr EXPR or --job NAME")]
    NoSource,
}
