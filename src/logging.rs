//! Logging for every Saltpeter process: `log` + `env_logger`, the role on every line.
//!
//! Under journald (`$JOURNAL_STREAM` set) each line starts with the `<N>` syslog priority
//! and carries no timestamp (journald adds its own), so `journalctl -u saltpeter -p
//! warning` filters by level. Elsewhere lines carry an RFC 3339 timestamp and the level.
//! `RUST_LOG` overrides the default level (`info`, or `debug` when asked for), except for
//! the PostgreSQL client, kept at `warn`: its debug lines carry statement parameters.

use std::io::Write;

use log::Level;

/// syslog priority of a log level.
fn priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// Install the logger for a process named `role` (e.g. "hub", "saltpeterctl").
pub(crate) fn init(role: &str, debug: bool) {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let role = role.to_string();
    let default = if debug { "debug" } else { "info" };
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default));
    builder.format(move |buf, record| {
        if journald {
            writeln!(
                buf,
                "<{}>{}: {}",
                priority(record.level()),
                role,
                record.args()
            )
        } else {
            writeln!(
                buf,
                "{} {:<5} {}: {}",
                buf.timestamp_millis(),
                record.level(),
                role,
                record.args()
            )
        }
    });
    // The PostgreSQL client logs every statement with its parameters at debug level:
    // output bytes, settings, the shared server secret. Never that, whatever RUST_LOG
    // says (and formatting each 64 KiB frame would also slow db down tenfold).
    builder.filter_module("tokio_postgres", log::LevelFilter::Warn);
    builder.filter_module("postgres", log::LevelFilter::Warn);
    // A second init (tests running roles in threads) keeps the first logger.
    let _ = builder.try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_match_syslog() {
        assert_eq!(priority(Level::Error), 3);
        assert_eq!(priority(Level::Warn), 4);
        assert_eq!(priority(Level::Info), 6);
        assert_eq!(priority(Level::Debug), 7);
    }
}
