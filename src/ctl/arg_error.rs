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

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripts and the integration tests read these on stderr: the text is the contract.
    #[test]
    fn messages_read_as_before() {
        let cases = [
            (
                ArgError::Until { text: "x".into() },
                "--until `x` is not a time: give an RFC 3339 instant (2026-11-30T08:00:00Z), \
                 a UTC date and time (2026-11-30 08:00) or a delay (2h, 1d)",
            ),
            (
                ArgError::Since { text: "x".into() },
                "cannot read the time \"x\" (try 2h, 7d, 2026-11-25 or RFC 3339)",
            ),
            (
                ArgError::SinceUnit {
                    unit: "y".into(),
                    text: "3y".into(),
                },
                "unknown time unit \"y\" in \"3y\" (s, m, h, d, w)",
            ),
            (
                ArgError::Count { count: 0 },
                &format!("--count 0 is out of range: it must be 1-{MAX_UPCOMING}"),
            ),
            (
                ArgError::Tz {
                    name: "Mars".into(),
                },
                "--tz `Mars` is not an IANA time zone (e.g. Europe/Berlin)",
            ),
            (ArgError::NoSource, "give --expr EXPR or --job NAME"),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
        let source = chrono::DateTime::parse_from_rfc3339("now").unwrap_err();
        let err = ArgError::From {
            text: "now".into(),
            source,
        };
        assert_eq!(
            err.to_string(),
            format!(
                "--from `now` is not an RFC 3339 instant (e.g. 2026-11-25T10:00:00Z): {source}"
            )
        );
    }
}
