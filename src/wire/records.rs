//! Run and target records: the states every interface (CLI, API, database) speaks.
//!
//! A run is `queued -> dispatching -> running -> succeeded | failed | partial | canceled |
//! skipped`; a target is `queued` (its batch waits) or `pending -> launching -> picked_up ->
//! running -> finished` (with an exit code and a reason), `waiting_unreachable` (its minion
//! did not answer; `retry_unreachable` waits for it) or `skipped_maintenance`. The names here are the contract: they are what
//! `saltpeterctl --json`, the API and the `state` columns of the database show.

use serde::{Deserialize, Serialize};

/// Database id of a run; also the `SP_RUN` of its wrappers.
pub(crate) type RunId = u64;

/// Unix time in milliseconds (UTC). Instants are stored and sent as this everywhere.
pub(crate) type Millis = i64;

/// Now, as unix milliseconds (the daemon's clock for everything it records).
pub(crate) fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// An instant as Saltpeter's own JSON writes it (the HTTP API, `saltpeterctl --json`,
/// webhook payloads, job log documents): RFC 3339 in UTC with a `Z`, with a fraction of
/// exactly three digits when the instant has milliseconds and none when it falls on a
/// whole second (`2026-01-01T00:00:00Z`, `2026-01-01T00:00:01.250Z`). `None` only for
/// an instant outside the calendar chrono knows.
///
/// One format everywhere, from this one function (`crate::json::time` wraps it): it
/// loses nothing, since instants are milliseconds; whole-second instants (slots, windows)
/// read as before; and RFC 3339 with or without a fraction is what every common parser
/// takes (chrono, Python's `datetime.fromisoformat`, JavaScript's `Date`, Go's
/// `time.RFC3339`, Elasticsearch's `date`). Text for people (tables, notes, log lines,
/// mail) is not JSON and keeps its own, to-the-second form; the original UI's `/ws`
/// protocol keeps its own function (`crate::json::ui`), pinned to what that UI reads.
pub(crate) fn rfc3339(ms: Millis) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

macro_rules! str_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub(crate) enum $name { $($variant),+ }

        impl $name {
            #[allow(dead_code, reason = "not every list of states is walked whole")]
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant),+];

            pub(crate) fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub(crate) fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

str_enum!(
    /// State of a whole run.
    RunState {
        Queued => "queued",
        Dispatching => "dispatching",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        Partial => "partial",
        Canceled => "canceled",
        Skipped => "skipped",
    }
);

impl RunState {
    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Succeeded
                | RunState::Failed
                | RunState::Partial
                | RunState::Canceled
                | RunState::Skipped
        )
    }
}

str_enum!(
    /// State of one target of a run.
    TargetState {
        Pending => "pending",
        Launching => "launching",
        Running => "running",
        Finished => "finished",
        SkippedMaintenance => "skipped_maintenance",
        PickedUp => "picked_up",
        // queued: its batch waits for its turn (`batch_size`); waiting_unreachable: its
        // minion did not answer and `retry_unreachable` waits for it.
        Queued => "queued",
        WaitingUnreachable => "waiting_unreachable",
    }
);

str_enum!(
    /// Why a target finished; with the exit code it is the outcome of the target.
    TargetReason {
        Exit => "exit",
        Timeout => "timeout",
        Killed => "killed",
        Lost => "lost",
        WrapperFailed => "wrapper_failed",
        Unreachable => "unreachable",
        Canceled => "canceled",
        // gave_up: unreachable until its `retry_unreachable` window closed.
        GaveUp => "gave_up",
        // memory_limit: the kernel killed the command for exceeding `memory_max`.
        MemoryLimit => "memory_limit",
    }
);

str_enum!(
    /// What started a run.
    Trigger {
        Schedule => "schedule",
        Manual => "manual",
        Catchup => "catchup",
        Chain => "chain",
    }
);

/// One target of a run as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetRecord {
    pub machine: String,
    pub state: TargetState,
    pub reason: Option<TargetReason>,
    pub exit_code: Option<i32>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
    /// Suspended by an operator (its command is stopped); only while it runs.
    #[serde(default)]
    pub suspended: bool,
    /// Why a `queued` target waits, when it waits for a place on its machine
    /// (`max_running_per_machine`); known to the running daemon only, never stored.
    #[serde(default)]
    pub waiting: Option<String>,
    /// How the job's resource limits were applied on the target, as its wrapper said
    /// (`None` for a job without limits, and until the command started).
    #[serde(default)]
    pub limits: Option<String>,
    /// The server whose salt-master launched the target, when several servers each
    /// drive their own master on one database (docs/ha.md); `None` on a lone server.
    #[serde(default)]
    pub server: Option<String>,
}

/// One run as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub id: RunId,
    pub job: String,
    /// Scheduled instant, `None` for a manual run.
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    pub state: RunState,
    pub reason: Option<String>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
    pub targets: Vec<TargetRecord>,
    /// Every attempt of the targets that had more than one (`retries`,
    /// `retry_unreachable`), by machine and attempt; filled for a single run's view.
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
}

/// One attempt of a target that was retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AttemptRecord {
    pub machine: String,
    /// 1 for the first.
    pub attempt: u32,
    pub reason: Option<TargetReason>,
    pub exit_code: Option<i32>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
}

/// Overall state of a run whose targets are all settled: `succeeded` if every target
/// finished with exit 0, `failed` if none did, `partial` otherwise; `skipped` when no
/// target was left to run.
pub(crate) fn settle_run_state(targets: &[TargetRecord]) -> RunState {
    let ran: Vec<&TargetRecord> = targets
        .iter()
        .filter(|t| t.state != TargetState::SkippedMaintenance)
        .collect();
    if ran.is_empty() {
        return RunState::Skipped;
    }
    let ok = ran
        .iter()
        .filter(|t| t.state == TargetState::Finished && t.exit_code == Some(0))
        .count();
    if ok == ran.len() {
        RunState::Succeeded
    } else if ok == 0 {
        RunState::Failed
    } else {
        RunState::Partial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(state: TargetState, code: Option<i32>) -> TargetRecord {
        TargetRecord {
            machine: "m".into(),
            state,
            reason: None,
            exit_code: code,
            started: None,
            ended: None,
            suspended: false,
            waiting: None,
            limits: None,
            server: None,
        }
    }

    #[test]
    fn names_round_trip() {
        for s in RunState::ALL {
            assert_eq!(RunState::parse(s.as_str()), Some(*s));
        }
        assert_eq!(
            serde_json::to_string(&TargetState::SkippedMaintenance).unwrap(),
            "\"skipped_maintenance\""
        );
    }

    #[test]
    fn one_json_time_format() {
        assert_eq!(rfc3339(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        let whole = 1_795_000_000_000;
        assert_eq!(rfc3339(whole).as_deref(), Some("2026-11-18T11:06:40Z"));
        assert_eq!(
            rfc3339(whole + 250).as_deref(),
            Some("2026-11-18T11:06:40.250Z")
        );
        assert_eq!(
            rfc3339(whole + 7).as_deref(),
            Some("2026-11-18T11:06:40.007Z")
        );
        assert_eq!(rfc3339(-1).as_deref(), Some("1969-12-31T23:59:59.999Z"));
        assert_eq!(rfc3339(Millis::MAX), None);
        // Every instant reads back as itself.
        for ms in [0, whole, whole + 1, whole + 999, -1] {
            let text = rfc3339(ms).unwrap();
            let back = chrono::DateTime::parse_from_rfc3339(&text).unwrap();
            assert_eq!(back.timestamp_millis(), ms, "{text}");
        }
    }

    #[test]
    fn settle_rules() {
        use TargetState::*;
        assert_eq!(settle_run_state(&[]), RunState::Skipped);
        assert_eq!(
            settle_run_state(&[target(SkippedMaintenance, None)]),
            RunState::Skipped
        );
        assert_eq!(
            settle_run_state(&[target(Finished, Some(0)), target(SkippedMaintenance, None)]),
            RunState::Succeeded
        );
        assert_eq!(
            settle_run_state(&[target(Finished, Some(0)), target(Finished, Some(1))]),
            RunState::Partial
        );
        assert_eq!(
            settle_run_state(&[target(Finished, Some(143))]),
            RunState::Failed
        );
    }
}
