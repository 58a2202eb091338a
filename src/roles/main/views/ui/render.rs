//! The dashboard's typed views of what changed (the order is in `ui/mod.rs`), in two
//! steps, so that the runs in flight and the configuration need not be lent to the views
//! while they change: [`UiState::changes`] renders them, [`UiState::sent`] remembers what
//! went out and hands the views to the hub. On a standby, the leader's runs are shown
//! beside this server's ([`LeaderRuns`], the mirror's).

use std::time::Instant;

use super::{LastRun, UiState};
use crate::config::{JobEntry, LoadedConfig};
use crate::roles::main::messages::Out;
use crate::roles::main::views::seen::RunSeen;
use crate::wire::link::MainToHub;
use crate::wire::records::{Millis, RunId};
use crate::wire::ui::{
    ConfigView, CronEntryView, CronView, DetailsView, LastStateView, RunningView, SettingsView,
    StatusView, TargetView,
};

/// The views of a turn's changes, to send ([`UiState::sent`]).
pub(crate) struct UiChanges {
    config: Option<ConfigView>,
    /// The status, when it differs from the last one sent.
    status: Option<StatusView>,
    details: Vec<DetailsView>,
}

/// What the dashboard shows of the runs the leader drives (on a standby: the mirror).
pub(crate) trait LeaderRuns {
    /// The runs in flight, for the status.
    fn running(&self) -> Vec<RunningView>;
    /// A job's newest run: its id, its start and its targets.
    fn newest_details(&self, job: &str) -> Option<(RunId, Option<Millis>, Vec<TargetView>)>;
}

/// What the views read of the other parts (lent for one call).
pub(crate) struct Shown<'a, R, N> {
    pub config: &'a LoadedConfig,
    /// The runs in flight here, in run id order (each call reads them again).
    pub runs: R,
    /// The next slot of a job (unix milliseconds).
    pub next_of: N,
    /// Now, as unix milliseconds and as the monotonic clock (wrappers' heartbeats).
    pub now: Millis,
    pub instant: Instant,
}

impl UiState {
    /// The views of what changed since the last ones went out (`None`: nothing did),
    /// given what the other parts show and the runs the leader drives.
    pub(crate) fn changes<'a, R, I, N>(
        &self,
        shown: &Shown<'a, R, N>,
        leader: &impl LeaderRuns,
    ) -> Option<UiChanges>
    where
        R: Fn() -> I,
        I: Iterator<Item = RunSeen<'a>>,
        N: Fn(&str) -> Option<Millis>,
    {
        if !self.config_dirty && self.dirty_jobs.is_empty() {
            return None;
        }
        let config = self
            .config_dirty
            .then(|| config_view(shown.config, shown.now));
        let status = (!self.dirty_jobs.is_empty())
            .then(|| self.status_view((shown.runs)(), leader))
            .filter(|status| self.last_status.as_ref() != Some(status));
        let details = self
            .dirty_jobs
            .iter()
            .filter(|job| self.watched.contains(*job))
            .map(|job| self.details(job, shown, leader))
            .collect();
        Some(UiChanges {
            config,
            status,
            details,
        })
    }

    /// `changes` go out: to the hub, in the order of the module outline.
    pub(crate) fn sent(&mut self, changes: UiChanges) -> Out {
        let mut out = Out::new();
        if let Some(view) = changes.config {
            self.config_dirty = false;
            out.hub(MainToHub::UiConfig(view));
        }
        self.dirty_jobs.clear();
        if let Some(status) = changes.status {
            self.last_status = Some(status.clone());
            out.hub(MainToHub::UiStatus(status));
        }
        for view in changes.details {
            out.hub(MainToHub::UiDetails(view));
        }
        out
    }

    fn status_view<'a>(
        &self,
        runs: impl Iterator<Item = RunSeen<'a>>,
        leader: &impl LeaderRuns,
    ) -> StatusView {
        let mut view = StatusView::default();
        for (job, last) in &self.last {
            view.last_state.push(LastStateView {
                job: job.clone(),
                last_run: last.started,
                result_ok: last.ok(),
            });
        }
        for active in runs {
            if active.awaiting_go {
                continue; // waiting for its slot: not running yet
            }
            view.running.push(RunningView {
                job: active.job.to_string(),
                run: active.id,
                started: self.run_started.get(&active.id).copied().or(active.slot),
                machines: active
                    .targets
                    .iter()
                    .filter(|(_, t)| !t.is_settled())
                    .map(|(m, _)| m.clone())
                    .collect(),
            });
        }
        view.running.extend(leader.running());
        view
    }

    /// The `details` view of a job: its newest run in flight, else its last run.
    fn details<'a, R, I, N>(
        &self,
        job: &str,
        shown: &Shown<'a, R, N>,
        leader: &impl LeaderRuns,
    ) -> DetailsView
    where
        R: Fn() -> I,
        I: Iterator<Item = RunSeen<'a>>,
        N: Fn(&str) -> Option<Millis>,
    {
        let now = shown.now;
        let newest_active = (shown.runs)().filter(|r| r.job == job).max_by_key(|r| r.id);
        let mut targets = Vec::new();
        let (run, last_run, last_success) = match newest_active {
            Some(active) => {
                for (machine, t) in active.targets {
                    targets.push(TargetView {
                        record: t.record(machine),
                        finished: t.is_settled(),
                        last_heartbeat: t.last_seen().map(|seen| {
                            now - shown.instant.saturating_duration_since(seen).as_millis() as i64
                        }),
                        wrapper_version: self.versions.get(&(active.id, machine.clone())).cloned(),
                    });
                }
                let started = self.run_started.get(&active.id).copied();
                let ok = self.last.get(job).map(LastRun::ok);
                (Some(active.id), started.or(active.slot), ok)
            }
            None => match leader.newest_details(job) {
                Some((run, started, shown)) => {
                    targets = shown;
                    let ok = self.last.get(job).map(LastRun::ok);
                    (Some(run), started, ok)
                }
                None => match self.last.get(job) {
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
        let group = shown
            .config
            .jobs
            .get(job)
            .map(|e| e.group().to_string())
            .unwrap_or_default();
        DetailsView {
            job: job.to_string(),
            group,
            next_run: (shown.next_of)(job),
            last_run,
            run,
            last_success,
            overlap: self.overlapped.contains(job),
            targets,
        }
    }

    /// Jobs whose views are to be sent again (for the tests).
    #[cfg(test)]
    pub(crate) fn dirty(&self) -> &std::collections::BTreeSet<String> {
        &self.dirty_jobs
    }
}

/// A job's configuration as the UI is shown it (`env` names only).
pub(crate) fn cron_view(entry: &JobEntry) -> CronEntryView {
    match entry {
        JobEntry::Valid(job) => CronEntryView::Valid(Box::new(CronView {
            name: job.name.clone(),
            group: job.group.to_string(),
            file: job.file.display().to_string(),
            line: job.line,
            schedule: job.schedule.describe(),
            timezone: job.timezone.name().to_string(),
            command: job.command.clone(),
            targets: job.targets.clone(),
            target_expr: job.target_expr.clone(),
            target_type: job.target_type_word().to_string(),
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
        JobEntry::Invalid(bad) => CronEntryView::Invalid {
            name: bad.name.clone(),
            group: bad.group.clone(),
            file: bad.file.display().to_string(),
            error: bad.error_line(),
        },
    }
}

/// The configuration's view, `serial` the time it is sent.
fn config_view(config: &LoadedConfig, serial: Millis) -> ConfigView {
    let sp = &config.saltpeter;
    let digest = config.error_digest();
    ConfigView {
        // The invalid jobs within the bounds of `config::ErrorDigest`; its errors count
        // the others.
        crons: config
            .jobs
            .values()
            .filter(|e| digest.listed(e))
            .map(cron_view)
            .collect(),
        maintenance_global: config.maintenance.global,
        maintenance_machines: config.maintenance.machines.iter().cloned().collect(),
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
        serial,
        errors: digest.shown().to_vec(),
    }
}
