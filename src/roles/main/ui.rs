//! The live view of main's state for the dashboard's `/ws` (PROTOCOLS.md section 2.1).
//!
//! Event-driven: the handlers that change a run mark its job (`run_changed`, called from
//! `Main::wake_run`), and after every event the loop calls `flush`, which sends the hub
//! what changed, in this order:
//! 1. `config` (the jobs with `env` values redacted, maintenance, settings) when the
//!    configuration was (re)loaded;
//! 2. `status` (runs in flight, last result per job) when it differs from the last one;
//! 3. `details` of each changed job that a `/ws` client watches (hub's `UiWatch`);
//! 4. new output of watched jobs' targets, each frame once (resends skipped by seq).
//!
//! Details come before output so that the hub learns of a new run before its output.
//! Main keeps the last finished run of each job in memory (loaded from db at start), so
//! nothing here waits for db.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};

use super::runs::ActiveRun;
use super::{DbWait, Main};
use crate::ctl::render::time as iso;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::MainToHub;
use crate::wire::records::{Millis, RunId, RunRecord, RunState, TargetRecord, TargetState};
use crate::wire::ui::{LiveTarget, instance};

/// What a db reply for the live view is.
#[derive(Debug, Clone)]
pub enum UiWait {
    /// The newest run of every job, at start.
    LastRuns,
}

/// The last finished run of a job, as the dashboard shows it.
#[derive(Debug, Clone)]
struct LastRun {
    id: RunId,
    state: RunState,
    started: Option<Millis>,
    targets: Vec<TargetRecord>,
    versions: BTreeMap<String, String>,
}

impl LastRun {
    fn from_record(r: &RunRecord) -> LastRun {
        LastRun {
            id: r.id,
            state: r.state,
            started: r.started.or(r.slot),
            targets: r.targets.clone(),
            versions: BTreeMap::new(),
        }
    }

    /// The original's rule: a run is good unless none of its targets succeeded.
    fn ok(&self) -> bool {
        matches!(self.state, RunState::Succeeded | RunState::Partial)
    }
}

#[derive(Default)]
pub struct UiState {
    /// Jobs some `/ws` client is subscribed to.
    watched: BTreeSet<String>,
    dirty_jobs: BTreeSet<String>,
    config_dirty: bool,
    config_serial: i64,
    last_status: String,
    last: BTreeMap<String, LastRun>,
    /// Highest output seq passed on per target of runs in flight.
    seen: HashMap<(RunId, String), u64>,
    versions: HashMap<(RunId, String), String>,
    /// When main first saw each run in flight.
    run_started: HashMap<RunId, Millis>,
    /// Jobs whose last firing was skipped because the previous run was still going.
    overlapped: BTreeSet<String>,
    pending_output: Vec<MainToHub>,
    pub metrics: super::metrics::MainMetrics,
}

fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// Start-up: the configuration goes out at once, the status once db said what ran last.
pub fn start(core: &mut Main) {
    core.ui.config_dirty = true;
    core.db_call(DbRequest::LastRuns, DbWait::Ui(UiWait::LastRuns));
}

pub fn db_answer(core: &mut Main, wait: UiWait, result: Result<DbReply, CallError>) {
    match (wait, calls::LastRuns::take(result)) {
        (UiWait::LastRuns, Ok(runs)) => {
            for (job, run) in runs {
                if run.state.is_final() && run.state != RunState::Skipped {
                    core.ui.last.insert(job, LastRun::from_record(&run));
                }
            }
            let jobs: Vec<String> = core.ui.last.keys().cloned().collect();
            core.ui.dirty_jobs.extend(jobs);
        }
        (UiWait::LastRuns, Err(e)) => log::warn!("dashboard: last runs not loaded: {e}"),
    }
}

/// A run changed (created, a target started or settled, ...).
pub fn run_changed(core: &mut Main, run: RunId) {
    if let Some(active) = core.runs.get(&run) {
        core.ui.run_started.entry(run).or_insert_with(now_ms);
        core.ui.dirty_jobs.insert(active.job.name.clone());
    }
}

/// A run ended with `state`: it becomes its job's last run.
pub fn run_finished(core: &mut Main, active: &ActiveRun, state: RunState) {
    let run = active.id;
    let started = core.ui.run_started.remove(&run);
    let now = now_ms();
    core.ui
        .metrics
        .run_ended(state, started.map(|s| (now - s) as f64 / 1000.0));
    let mut versions = BTreeMap::new();
    for machine in active.targets.keys() {
        core.ui.seen.remove(&(run, machine.clone()));
        if let Some(v) = core.ui.versions.remove(&(run, machine.clone())) {
            versions.insert(machine.clone(), v);
        }
    }
    if state != RunState::Skipped {
        let last = LastRun {
            id: run,
            state,
            started: started.or(active.slot),
            targets: active.targets.iter().map(|(m, t)| t.record(m)).collect(),
            versions,
        };
        core.ui.last.insert(active.job.name.clone(), last);
    }
    core.ui.overlapped.remove(&active.job.name);
    core.ui.dirty_jobs.insert(active.job.name.clone());
}

/// A slot of `job` came: it ran or was skipped (`skip` says why).
pub fn slot_fired(core: &mut Main, job: &str, lateness_ms: i64, skip: Option<&str>) {
    core.ui.metrics.observe_lateness(lateness_ms);
    if skip.is_some_and(|why| why.starts_with("overlap")) {
        core.ui.overlapped.insert(job.to_string());
    }
    // Its next run moved on.
    core.ui.dirty_jobs.insert(job.to_string());
}

pub fn wrapper_welcomed(core: &mut Main, run: RunId, machine: &str, version: &str) {
    core.ui
        .versions
        .insert((run, machine.to_string()), version.to_string());
}

/// An output frame arrived from a wrapper: counted, and passed on once if watched.
pub fn output_arrived(core: &mut Main, run: RunId, machine: &str, seq: u64, data: &[u8]) {
    core.ui.metrics.output(data.len());
    let Some(active) = core.runs.get(&run) else {
        return;
    };
    if !core.ui.watched.contains(&active.job.name) {
        return;
    }
    let acked = active.targets.get(machine).map_or(0, |t| t.acked_seq);
    let seen = core
        .ui
        .seen
        .entry((run, machine.to_string()))
        .or_insert(acked);
    if seq <= *seen {
        return; // a resend of a frame already passed on
    }
    *seen = seq;
    let job = active.job.name.clone();
    core.ui.pending_output.push(MainToHub::UiOutput {
        job,
        run,
        machine: machine.to_string(),
        seq,
        data: data.to_vec(),
    });
}

/// The last output seq passed on for a target (what a live view read now contains).
pub fn seen_seq(core: &Main, run: RunId, machine: &str) -> u64 {
    let Some(active) = core.runs.get(&run) else {
        return u64::MAX; // finished: everything is stored
    };
    let acked = active.targets.get(machine).map_or(0, |t| t.acked_seq);
    core.ui
        .seen
        .get(&(run, machine.to_string()))
        .copied()
        .unwrap_or(0)
        .max(acked)
}

/// The configuration was (re)loaded.
pub fn config_changed(core: &mut Main) {
    core.ui.config_dirty = true;
    let jobs: Vec<String> = core.config.jobs.keys().cloned().collect();
    core.ui.dirty_jobs.extend(jobs);
}

/// The hub's `/ws` clients started or stopped watching `job`.
pub fn watch(core: &mut Main, job: String, watch: bool) {
    if watch {
        core.ui.dirty_jobs.insert(job.clone());
        core.ui.watched.insert(job);
    } else {
        core.ui.watched.remove(&job);
        core.ui.seen.retain(|(run, _), _| {
            core.runs
                .get(run)
                .is_some_and(|r| core.ui.watched.contains(&r.job.name))
        });
    }
}

/// Send the hub what changed since the last call (see the module outline).
pub fn flush(core: &mut Main) {
    if core.ui.config_dirty {
        core.ui.config_dirty = false;
        core.ui.config_serial = now_ms();
        let json = config_message(core).to_string();
        core.to_hub(MainToHub::UiConfig { json });
    }
    let dirty = std::mem::take(&mut core.ui.dirty_jobs);
    if !dirty.is_empty() {
        let status = status_message(core).to_string();
        if status != core.ui.last_status {
            core.ui.last_status = status.clone();
            core.to_hub(MainToHub::UiStatus { json: status });
        }
    }
    let watched: Vec<String> = dirty
        .into_iter()
        .filter(|j| core.ui.watched.contains(j))
        .collect();
    for job in &watched {
        let (data, live) = details(core, job);
        core.to_hub(MainToHub::UiDetails {
            job: job.clone(),
            json: data.to_string(),
            live,
        });
    }
    for msg in std::mem::take(&mut core.ui.pending_output) {
        core.to_hub(msg);
    }
}

/// A job's configuration as the original's `config.crons` entries show it: its keys,
/// the seven cron fields, `env` values redacted.
pub fn cron_json(entry: &crate::config::JobEntry) -> Value {
    match entry {
        crate::config::JobEntry::Valid(job) => {
            let mut v = job.redacted_json();
            let schedule = job.schedule.describe();
            let fields: Vec<&str> = schedule.split_whitespace().collect();
            if let (Value::Object(map), [sec, min, hour, dom, mon, dow, year]) =
                (&mut v, fields.as_slice())
            {
                for (key, value) in [
                    ("sec", sec),
                    ("min", min),
                    ("hour", hour),
                    ("dom", dom),
                    ("mon", mon),
                    ("dow", dow),
                    ("year", year),
                ] {
                    map.insert(key.to_string(), Value::from(*value));
                }
            }
            v
        }
        crate::config::JobEntry::Invalid(bad) => json!({
            "name": bad.name,
            "group": bad.group,
            "file": bad.file.display().to_string(),
            "enabled": false,
            "error": bad.errors.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; "),
        }),
    }
}

fn config_message(core: &Main) -> Value {
    let crons: serde_json::Map<String, Value> = core
        .config
        .jobs
        .values()
        .map(|e| (e.name().to_string(), cron_json(e)))
        .collect();
    let sp = &core.config.saltpeter;
    json!({
        "type": "config",
        "config": {
            "crons": crons,
            "maintenance": {
                "global": core.config.maintenance.global,
                "machines": core.config.maintenance.machines,
            },
            "saltpeter_config": {
                "api_ws": sp.api_ws,
                "api_ws_port": sp.api_ws_port,
                "api_ws_bind_addr": sp.api_ws_bind_addr,
                "machines_ws_port": sp.machines_ws_port,
                "machines_ws_bind_addr": sp.machines_ws_bind_addr,
                "default_saltpeter_server_host": sp.default_saltpeter_server_host,
                "default_wrapper_path": sp.default_wrapper_path,
                "executor": sp.executor.as_str(),
                "timezone": sp.timezone.name(),
                "heartbeat": sp.heartbeat_s,
                "pickup_timeout": sp.pickup_timeout_s,
                "api_token": sp.api_token.as_ref().map(|_| "***"),
            },
            "serial": core.ui.config_serial,
            "errors": core.config.diagnostics.iter()
                .filter(|d| d.severity == crate::config::Severity::Error)
                .map(|d| d.to_string()).collect::<Vec<_>>(),
        },
        "sp_version": env!("CARGO_PKG_VERSION"),
    })
}

fn status_message(core: &Main) -> Value {
    let mut running = serde_json::Map::new();
    let mut last_state = serde_json::Map::new();
    for (job, last) in &core.ui.last {
        last_state.insert(
            job.clone(),
            json!({"last_run": iso(last.started), "result_ok": last.ok()}),
        );
    }
    for (id, active) in &core.runs {
        if active.prestaged && !active.go_sent {
            continue; // waiting for its slot: not running yet
        }
        let started = core.ui.run_started.get(id).copied().or(active.slot);
        let machines: Vec<&String> = active
            .targets
            .iter()
            .filter(|(_, t)| !t.is_settled())
            .map(|(m, _)| m)
            .collect();
        running.insert(
            instance(&active.job.name, *id),
            json!({"started": iso(started), "name": active.job.name, "machines": machines,
                   "run": id}),
        );
        last_state.insert(
            active.job.name.clone(),
            json!({"last_run": iso(started), "result_ok": true}),
        );
    }
    json!({
        "type": "status",
        "running": running,
        "last_state": last_state,
        "sp_version": env!("CARGO_PKG_VERSION"),
    })
}

/// A target in `details.results`.
fn result_json(
    job: &str,
    run: RunId,
    t: &TargetRecord,
    finished: bool,
    last_heartbeat: Option<Millis>,
    version: Option<&String>,
) -> Value {
    json!({
        "starttime": iso(t.started),
        "endtime": if finished { iso(t.ended) } else { Value::Null },
        "retcode": if finished { json!(t.exit_code) } else { json!("") },
        "last_heartbeat": iso(last_heartbeat),
        "wrapper_version": version,
        "output_length": 0,
        "state": t.state.as_str(),
        "reason": t.reason.map(|r| r.as_str()),
        "job_instance": instance(job, run),
    })
}

/// The `details` data of a job and the targets whose output it covers.
fn details(core: &Main, job: &str) -> (Value, Vec<LiveTarget>) {
    let now = now_ms();
    let newest_active = core
        .runs
        .values()
        .filter(|r| r.job.name == job)
        .max_by_key(|r| r.id);
    let mut results = serde_json::Map::new();
    let mut live = Vec::new();
    let mut targets = Vec::new();
    let (run, last_run, last_success) = match newest_active {
        Some(active) => {
            for (machine, t) in &active.targets {
                let record = t.record(machine);
                let heartbeat = t
                    .last_seen()
                    .map(|seen| now - seen.elapsed().as_millis() as i64);
                let version = core.ui.versions.get(&(active.id, machine.clone()));
                let finished = t.is_settled();
                results.insert(
                    machine.clone(),
                    result_json(job, active.id, &record, finished, heartbeat, version),
                );
                if record.started.is_some() || finished {
                    live.push(LiveTarget {
                        machine: machine.clone(),
                        run: active.id,
                        finished,
                    });
                }
                if record.state != TargetState::SkippedMaintenance {
                    targets.push(machine.clone());
                }
            }
            let started = core.ui.run_started.get(&active.id).copied();
            let ok = core.ui.last.get(job).map(LastRun::ok);
            (Some(active.id), started.or(active.slot), ok)
        }
        None => match core.ui.last.get(job) {
            Some(last) => {
                for t in &last.targets {
                    results.insert(
                        t.machine.clone(),
                        result_json(job, last.id, t, true, None, last.versions.get(&t.machine)),
                    );
                    if t.started.is_some() {
                        live.push(LiveTarget {
                            machine: t.machine.clone(),
                            run: last.id,
                            finished: true,
                        });
                    }
                    if t.state != TargetState::SkippedMaintenance {
                        targets.push(t.machine.clone());
                    }
                }
                (Some(last.id), last.started, Some(last.ok()))
            }
            None => (None, None, None),
        },
    };
    let group = core
        .config
        .jobs
        .get(job)
        .map(|e| e.group().to_string())
        .unwrap_or_default();
    let data = json!({
        "next_run": iso(core.scheduler.next_of(job).map(|t| t.timestamp_millis())),
        "last_run": iso(last_run),
        "group": group,
        "targets": targets,
        "results": results,
        "last_success": last_success,
        "overlap": core.ui.overlapped.contains(job),
        "run": run,
        "job_instance": run.map(|r| instance(job, r)),
    });
    (data, live)
}
