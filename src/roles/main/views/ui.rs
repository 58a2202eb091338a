//! The live view of main's state for the dashboard's `/ws` (docs/api.md, `/ws`).
//!
//! Event-driven: the handlers that change a run mark its job (`run_changed`, called from
//! `Main::wake_run`), and after every event the loop calls `flush`, which sends the hub
//! typed views (`crate::wire::ui`) of what changed, in this order:
//! 1. `ConfigView` (the jobs, `env` names only, maintenance, settings) when the
//!    configuration was (re)loaded;
//! 2. `StatusView` (runs in flight, last result per job) when it differs from the last one;
//! 3. `DetailsView` of each changed job that a `/ws` client watches (hub's `UiWatch`).
//!
//! The hub renders the JSON, re-sends it every 2 s while clients are connected, and keeps
//! the live output of watched targets from the wrapper frames it relays itself; main only
//! remembers the last output seq it passed to db per target, which is where the hub's
//! read of the stored output (`LiveOutput`) ends. Main keeps the last finished run of each
//! job in memory (loaded from db at start), so nothing here waits for db.

use crate::roles::main::state::views::LastRun;
use std::collections::BTreeMap;

use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::roles::main::state::active::ActiveRun;
use crate::roles::main::state::{DbWait, Main};
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::MainToHub;
use crate::wire::records::now_ms;
use crate::wire::records::{RunId, RunRecord, RunState};
use crate::wire::ui::{
    ConfigView, CronEntryView, CronView, DetailsView, LastStateView, RunningView, SettingsView,
    StatusView, TargetView,
};

/// What a db reply for the live view is.
#[derive(Debug, Clone)]
pub(crate) enum UiWait {
    /// The newest run of every job, at start.
    LastRuns,
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

    /// The original's current rule: a run is good when every target succeeded (one
    /// failed target makes it a failure).
    fn ok(&self) -> bool {
        self.state == RunState::Succeeded
    }
}

/// Start-up: the configuration goes out at once, the status once db said what ran last.
pub(crate) fn start(core: &mut Main) {
    core.views.ui.config_dirty = true;
    core.db_call(
        DbRequest::LastRuns,
        DbWait::with(UiWait::LastRuns, db_answer),
    );
}

pub(crate) fn db_answer(core: &mut Main, wait: UiWait, result: Result<DbReply, CallError>) {
    match (wait, calls::LastRuns::take(result)) {
        (UiWait::LastRuns, Ok(runs)) => {
            for (job, run) in runs {
                if run.state.is_final() && run.state != RunState::Skipped {
                    core.views.ui.last.insert(job, LastRun::from_record(&run));
                }
            }
            let jobs: Vec<String> = core.views.ui.last.keys().cloned().collect();
            core.views.ui.dirty_jobs.extend(jobs);
        }
        (UiWait::LastRuns, Err(e)) => log::warn!("dashboard: last runs not loaded: {e}"),
    }
}

/// A run changed (created, a target started or settled, ...).
pub(crate) fn run_changed(core: &mut Main, run: RunId) {
    if let Some(job) = core.run(run).map(|r| r.job.name.clone()) {
        core.views.ui.run_started.entry(run).or_insert_with(now_ms);
        core.views.ui.dirty_jobs.insert(job);
    }
}

/// Something of `job` changed that the views show (a run of the leader's, on a standby).
pub(crate) fn job_changed(core: &mut Main, job: &str) {
    core.views.ui.job_changed(job);
}

/// A run the leader drove ended (on a standby): it becomes its job's last run.
pub(crate) fn mirrored_run_ended(core: &mut Main, record: &RunRecord) {
    if record.state.is_final() && record.state != RunState::Skipped {
        let newer = core
            .views
            .ui
            .last
            .get(&record.job)
            .is_some_and(|last| last.id > record.id);
        if !newer {
            let last = LastRun::from_record(record);
            core.views.ui.last.insert(record.job.clone(), last);
        }
    }
    core.views.ui.dirty_jobs.insert(record.job.clone());
}

/// A run ended with `state`: it becomes its job's last run.
pub(crate) fn run_finished(core: &mut Main, active: &ActiveRun, state: RunState) {
    let run = active.id;
    let started = core.views.ui.run_started.remove(&run);
    let now = now_ms();
    let targets: Vec<_> = active.targets.iter().map(|(m, t)| t.record(m)).collect();
    let ended = crate::roles::main::rules::job_metrics::EndedRun {
        state,
        duration_s: started.map(|s| (now - s) as f64 / 1000.0),
        now_ms: now,
        lateness_s: crate::roles::main::rules::job_metrics::run_lateness(
            active.slot,
            active.trigger,
            &targets,
        ),
        targets: &targets,
    };
    core.views.ui.metrics.run_ended(&active.job.name, &ended);
    let mut versions = BTreeMap::new();
    core.views.ui.sent.remove(&run);
    for machine in active.targets.keys() {
        if let Some(v) = core.views.ui.versions.remove(&(run, machine.clone())) {
            versions.insert(machine.clone(), v);
        }
    }
    if state != RunState::Skipped {
        let last = LastRun {
            id: run,
            state,
            started: started.or(active.slot),
            targets,
            versions,
        };
        core.views.ui.last.insert(active.job.name.clone(), last);
    }
    core.views.ui.overlapped.remove(&active.job.name);
    core.views.ui.dirty_jobs.insert(active.job.name.clone());
}

/// A slot of `job` came: it ran or was skipped (`skip` says why).
pub(crate) fn slot_fired(core: &mut Main, job: &str, lateness_ms: i64, skip: Option<&str>) {
    core.views.ui.metrics.observe_lateness(lateness_ms);
    if skip.is_some_and(|why| why.starts_with("overlap")) {
        core.views.ui.overlapped.insert(job.to_string());
    }
    // Its next run moved on.
    core.views.ui.dirty_jobs.insert(job.to_string());
}

pub(crate) fn wrapper_welcomed(core: &mut Main, run: RunId, machine: &str, version: &str) {
    core.views
        .ui
        .versions
        .insert((run, machine.to_string()), version.to_string());
}

/// An output frame arrived from a wrapper and goes to db: counted, and its seq kept
/// (the hub shows it live from the frame it relayed).
pub(crate) fn output_arrived(core: &mut Main, run: RunId, machine: &str, seq: u64, data: &[u8]) {
    core.views.ui.metrics.output(data.len());
    if !core.in_flight(run) {
        return;
    }
    let per_run = core.views.ui.sent.entry(run).or_default();
    match per_run.get_mut(machine) {
        Some(sent) => *sent = (*sent).max(seq),
        None => {
            per_run.insert(machine.to_string(), seq);
        }
    }
}

/// The last output seq passed to db for a target: a read of its output sent now
/// contains every frame up to it (the link to db keeps the order).
pub(crate) fn seen_seq(core: &Main, run: RunId, machine: &str) -> u64 {
    let Some(active) = core.run(run) else {
        return u64::MAX; // finished: everything is stored
    };
    let acked = active.targets.get(machine).map_or(0, |t| t.acked_seq());
    core.views
        .ui
        .sent
        .get(&run)
        .and_then(|m| m.get(machine))
        .copied()
        .unwrap_or(0)
        .max(acked)
}

/// The configuration was (re)loaded.
pub(crate) fn config_changed(core: &mut Main) {
    core.views.ui.config_dirty = true;
    let jobs: Vec<String> = core.config.jobs.keys().cloned().collect();
    core.views.ui.dirty_jobs.extend(jobs);
}

/// The hub's `/ws` clients started or stopped watching `job`.
pub(crate) fn watch(core: &mut Main, job: String, watch: bool) {
    if watch {
        core.views.ui.dirty_jobs.insert(job.clone());
        core.views.ui.watched.insert(job);
    } else {
        core.views.ui.watched.remove(&job);
    }
}

/// Send the hub what changed since the last call (see the module outline).
pub(crate) fn flush(core: &mut Main) {
    if core.views.ui.config_dirty {
        core.views.ui.config_dirty = false;
        core.views.ui.config_serial = now_ms();
        let view = config_view(core);
        core.tell_hub(MainToHub::UiConfig(view));
    }
    let dirty = std::mem::take(&mut core.views.ui.dirty_jobs);
    if !dirty.is_empty() {
        let status = status_view(core);
        if core.views.ui.last_status.as_ref() != Some(&status) {
            core.views.ui.last_status = Some(status.clone());
            core.tell_hub(MainToHub::UiStatus(status));
        }
    }
    let watched: Vec<String> = dirty
        .into_iter()
        .filter(|j| core.views.ui.watched.contains(j))
        .collect();
    for job in &watched {
        let view = details(core, job);
        core.tell_hub(MainToHub::UiDetails(view));
    }
}

/// A job's configuration as the UI is shown it (`env` names only).
pub(crate) fn cron_view(entry: &crate::config::JobEntry) -> CronEntryView {
    match entry {
        crate::config::JobEntry::Valid(job) => CronEntryView::Valid(Box::new(CronView {
            name: job.name.clone(),
            group: job.group.to_string(),
            file: job.file.display().to_string(),
            line: job.line,
            schedule: job.schedule.describe(),
            timezone: job.timezone.name().to_string(),
            command: job.command.clone(),
            targets: job.targets.clone(),
            target_expr: job.target_expr.clone(),
            target_type: job.target_type.as_str().to_string(),
            executor: job.executor.as_str().to_string(),
            user: job.user.clone(),
            cwd: job.cwd.clone(),
            env_names: job.env.keys().cloned().collect(),
            timeout: job.timeout_s,
            kill_grace: job.kill_grace_s,
            number_of_targets: job.number_of_targets,
            batch_size: job.batch_size,
            overlap: job.overlap.as_str().to_string(),
            missed: job.missed.as_str().to_string(),
            missed_deadline: job.missed_deadline_s,
            splay: job.splay_s,
            enabled: job.enabled,
            output_limit_head: job.output_limit.head_bytes,
            output_limit_tail: job.output_limit.tail_bytes,
            wrapper_path: job.wrapper_path.clone(),
            server_host: job.server_host.clone(),
        })),
        crate::config::JobEntry::Invalid(bad) => CronEntryView::Invalid {
            name: bad.name.clone(),
            group: bad.group.clone(),
            file: bad.file.display().to_string(),
            error: crate::roles::main::views::answer::bounded_errors(
                bad.errors.iter().map(|d| d.to_string()),
            )
            .join("; "),
        },
    }
}

fn config_view(core: &Main) -> ConfigView {
    let sp = &core.config.saltpeter;
    ConfigView {
        crons: core.config.jobs.values().map(cron_view).collect(),
        maintenance_global: core.config.maintenance.global,
        maintenance_machines: core.config.maintenance.machines.iter().cloned().collect(),
        settings: SettingsView {
            api_ws: sp.api_ws,
            api_ws_port: sp.api_ws_port,
            api_ws_bind_addr: sp.api_ws_bind_addr.to_string(),
            machines_ws_port: sp.machines_ws_port,
            machines_ws_bind_addr: sp.machines_ws_bind_addr.to_string(),
            default_saltpeter_server_host: sp.default_saltpeter_server_host.clone(),
            default_wrapper_path: sp.default_wrapper_path.clone(),
            executor: sp.executor.as_str().to_string(),
            timezone: sp.timezone.name().to_string(),
            heartbeat: sp.heartbeat_s,
            pickup_timeout: sp.pickup_timeout_s,
            api_token_set: sp.api_token.is_some(),
        },
        serial: core.views.ui.config_serial,
        errors: crate::roles::main::views::answer::bounded_errors(
            core.config
                .diagnostics
                .iter()
                .filter(|d| d.severity == crate::config::Severity::Error)
                .map(|d| d.to_string()),
        ),
    }
}

fn status_view(core: &Main) -> StatusView {
    let mut view = StatusView::default();
    for (job, last) in &core.views.ui.last {
        view.last_state.push(LastStateView {
            job: job.clone(),
            last_run: last.started,
            result_ok: last.ok(),
        });
    }
    for active in core.runs() {
        let id = &active.id;
        if active.awaiting_go() {
            continue; // waiting for its slot: not running yet
        }
        view.running.push(RunningView {
            job: active.job.name.clone(),
            run: *id,
            started: core.views.ui.run_started.get(id).copied().or(active.slot),
            machines: active
                .targets
                .iter()
                .filter(|(_, t)| !t.is_settled())
                .map(|(m, _)| m.clone())
                .collect(),
        });
    }
    view.running
        .extend(crate::roles::main::views::mirror_view::running(core));
    view
}

/// The `details` view of a job: its newest run in flight, else its last run.
fn details(core: &Main, job: &str) -> DetailsView {
    let now = now_ms();
    let newest_active = core
        .runs()
        .filter(|r| r.job.name == job)
        .max_by_key(|r| r.id);
    let mut targets = Vec::new();
    let (run, last_run, last_success) = match newest_active {
        Some(active) => {
            for (machine, t) in &active.targets {
                targets.push(TargetView {
                    record: t.record(machine),
                    finished: t.is_settled(),
                    last_heartbeat: t
                        .last_seen()
                        .map(|seen| now - seen.elapsed().as_millis() as i64),
                    wrapper_version: core
                        .views
                        .ui
                        .versions
                        .get(&(active.id, machine.clone()))
                        .cloned(),
                });
            }
            let started = core.views.ui.run_started.get(&active.id).copied();
            let ok = core.views.ui.last.get(job).map(LastRun::ok);
            (Some(active.id), started.or(active.slot), ok)
        }
        None => match crate::roles::main::views::mirror_view::newest_details(core, job) {
            Some((run, started, shown)) => {
                targets = shown;
                let ok = core.views.ui.last.get(job).map(LastRun::ok);
                (Some(run), started, ok)
            }
            None => match core.views.ui.last.get(job) {
                Some(last) => {
                    for t in &last.targets {
                        targets.push(TargetView {
                            record: t.clone(),
                            finished: true,
                            last_heartbeat: None,
                            wrapper_version: last.versions.get(&t.machine).cloned(),
                        });
                    }
                    (Some(last.id), last.started, Some(last.ok()))
                }
                None => (None, None, None),
            },
        },
    };
    let group = core
        .config
        .jobs
        .get(job)
        .map(|e| e.group().to_string())
        .unwrap_or_default();
    DetailsView {
        job: job.to_string(),
        group,
        next_run: core.scheduler.next_of(job).map(|t| t.timestamp_millis()),
        last_run,
        run,
        last_success,
        overlap: core.views.ui.overlapped.contains(job),
        targets,
    }
}
