//! Types of the HTTP API and of the dashboard's live updates (docs/api.md)
//! that cross the hub-main link.
//!
//! The API's questions and commands are `AdminRequest`s (`wire/admin.rs`, one vocabulary
//! with the admin socket); the live pushes of `/ws` travel as `MainToHub` casts carrying
//! the typed snapshots below (`ConfigView`, `StatusView`, `DetailsView`). Main says what is true; the hub
//! renders the original UI protocol's JSON from them (`crate::json::ui`), re-sends them
//! every 2 s while clients watch, and adds what it sees itself (heartbeats, live output).

use serde::{Deserialize, Serialize};

use super::records::{Millis, RunId, TargetRecord};

/// Where the live output of one target starts for the hub: the stored output, and the
/// last frame it contains (the hub relays later frames itself).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveBase {
    #[serde(with = "crate::wire::bytes")]
    pub data: Vec<u8>,
    pub omitted_bytes: u64,
    pub omitted_at: Option<usize>,
    /// Frames up to this seq are in `data`; `u64::MAX` for a finished run.
    pub upto_seq: u64,
    /// Stored bytes before `data` that were not read (the read keeps the newest part):
    /// the text shown starts that far in, so lengths and positions stay those of the
    /// whole output.
    #[serde(default)]
    pub skipped_bytes: u64,
}

/// A target whose output a `details` message covers: the hub keeps its text for
/// subscribers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveTarget {
    pub machine: String,
    pub run: RunId,
    /// The target's outcome is recorded: no more output will come.
    pub finished: bool,
}

/// A job's configuration as the original UI's `config.crons` entry shows it (`env` is
/// only its names: values never leave main).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CronView {
    pub name: String,
    pub group: String,
    pub file: String,
    pub line: usize,
    /// The schedule as seven fields: sec min hour dom mon dow year.
    pub schedule: String,
    pub timezone: String,
    pub command: String,
    pub targets: Vec<String>,
    pub target_expr: String,
    pub target_type: String,
    pub executor: String,
    pub user: Option<String>,
    pub cwd: Option<String>,
    pub env_names: Vec<String>,
    pub timeout: u64,
    pub kill_grace: u64,
    pub number_of_targets: Option<usize>,
    pub batch_size: Option<usize>,
    pub overlap: String,
    pub missed: String,
    pub missed_deadline: u64,
    pub splay: u64,
    pub enabled: bool,
    pub output_limit_head: u64,
    pub output_limit_tail: u64,
    pub wrapper_path: Option<String>,
    pub server_host: Option<String>,
}

/// A `config.crons` entry: a valid job, or one disabled by an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CronEntryView {
    Valid(Box<CronView>),
    Invalid {
        name: String,
        group: String,
        file: String,
        error: String,
    },
}

/// The `saltpeter_config` settings the UI is shown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SettingsView {
    pub api_ws: bool,
    pub api_ws_port: u16,
    pub api_ws_bind_addr: String,
    pub machines_ws_port: u16,
    pub machines_ws_bind_addr: String,
    pub default_saltpeter_server_host: Option<String>,
    pub default_wrapper_path: Option<String>,
    pub executor: String,
    pub timezone: String,
    pub heartbeat: u64,
    pub pickup_timeout: u64,
    pub api_token_set: bool,
}

/// What the `config` message shows: sent on start and on every (re)load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConfigView {
    pub crons: Vec<CronEntryView>,
    pub maintenance_global: bool,
    pub maintenance_machines: Vec<String>,
    pub settings: SettingsView,
    /// Changes with every (re)load (milliseconds of the load).
    pub serial: i64,
    pub errors: Vec<String>,
}

/// A run in flight in the `status` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunningView {
    pub job: String,
    pub run: RunId,
    pub started: Option<Millis>,
    /// Its targets that have not settled.
    pub machines: Vec<String>,
}

/// A job's last result in the `status` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LastStateView {
    pub job: String,
    pub last_run: Option<Millis>,
    pub result_ok: bool,
}

/// What the `status` message shows: runs in flight and the last result of every job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StatusView {
    pub running: Vec<RunningView>,
    pub last_state: Vec<LastStateView>,
}

/// A target of the run a `details` message shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetView {
    pub record: TargetRecord,
    /// The outcome is recorded: no more output will come.
    pub finished: bool,
    /// When main last heard from its wrapper (UTC milliseconds).
    pub last_heartbeat: Option<Millis>,
    pub wrapper_version: Option<String>,
}

/// What a `details` message of a watched job shows: its current run, else its last one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DetailsView {
    pub job: String,
    pub group: String,
    pub next_run: Option<Millis>,
    pub last_run: Option<Millis>,
    pub run: Option<RunId>,
    pub last_success: Option<bool>,
    pub overlap: bool,
    pub targets: Vec<TargetView>,
}

impl DetailsView {
    /// The targets whose output the view shows (those that started or finished).
    pub(crate) fn live_targets(&self) -> impl Iterator<Item = LiveTarget> + '_ {
        let run = self.run;
        self.targets
            .iter()
            .filter(|t| t.record.started.is_some() || t.finished)
            .filter_map(move |t| {
                Some(LiveTarget {
                    machine: t.record.machine.clone(),
                    run: run?,
                    finished: t.finished,
                })
            })
    }
}

/// The instance name of a run in the original UI protocol (`job_12`).
pub(crate) fn instance(job: &str, run: RunId) -> String {
    format!("{job}_{run}")
}

/// The run id of an instance name (`job_12`, or `12`).
pub(crate) fn run_of_instance(instance: &str) -> Option<RunId> {
    instance.rsplit('_').next().and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_round_trip() {
        assert_eq!(instance("backup_db", 12), "backup_db_12");
        assert_eq!(run_of_instance("backup_db_12"), Some(12));
        assert_eq!(run_of_instance("12"), Some(12));
        assert_eq!(run_of_instance("backup"), None);
    }
}
