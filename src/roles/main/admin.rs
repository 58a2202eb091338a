//! Admin requests (`saltpeterctl`, forwarded by the hub), answered from main's state and,
//! for history, from db.

use std::sync::Arc;

use super::run::RunRequest;
use super::{DbWait, Main, MainRole, sessions};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::CallError;
use crate::wire::admin::{AdminFailure, AdminRequest, AdminResponse, JobInfo, StatusInfo};
use crate::wire::db::OutputQuery;
use crate::wire::db::RunFilter;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::HubReply;
use crate::wire::records::{RunRecord, Trigger};

/// What an admin request waits for from db.
#[derive(Debug, Clone)]
pub enum Pending {
    Jobs,
    Runs,
    Run,
    Output,
    /// The run-time maintenance settings are being saved; the note says what changed.
    Maintenance(Option<String>),
}

fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.reply_hub(call, HubReply::Admin(resp));
}

fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

pub fn handle(role: &mut MainRole, _ctx: &mut Ctx<MainRole>, call: CallId, req: AdminRequest) {
    let core = &mut role.core;
    if core.recovering
        && matches!(
            req,
            AdminRequest::RunNow { .. }
                | AdminRequest::Maintenance(_)
                | AdminRequest::JobControl(_)
        )
    {
        // They depend on the maintenance settings, still being loaded: answered once
        // start-up is done (`boot::finish_when_ready`).
        core.boot.park(call, req);
        return;
    }
    match req {
        AdminRequest::Status => {
            let now = chrono::Utc::now().timestamp_millis();
            let config_errors = core
                .config
                .diagnostics
                .iter()
                .filter(|d| d.severity == crate::config::Severity::Error)
                .map(|d| d.to_string())
                .collect();
            let status = StatusInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_at: core.started_at,
                uptime_s: ((now - core.started_at).max(0) / 1000) as u64,
                processes: core.processes.clone(),
                jobs: core.config.jobs.len(),
                running_runs: core.runs.len(),
                config_errors,
                wrapper_port: core.wrapper_port,
                db_error: core.db_trouble.clone(),
                api_port: core.api_port,
            };
            respond(core, call, AdminResponse::Status(status));
        }
        AdminRequest::Jobs => {
            core.db_call(DbRequest::LastRuns, DbWait::Admin(call, Pending::Jobs));
        }
        AdminRequest::Runs { job, limit } => {
            if let Some(job) = &job
                && !core.config.jobs.contains_key(job)
            {
                // History of a job that left the configuration is still shown.
                log::debug!("runs of {job}, which is not configured now");
            }
            core.db_call(
                DbRequest::ListRuns(RunFilter {
                    job,
                    limit: Some(limit.clamp(1, 10_000) as usize),
                    ..Default::default()
                }),
                DbWait::Admin(call, Pending::Runs),
            );
        }
        AdminRequest::GetRun { run } => {
            core.db_call(DbRequest::GetRun(run), DbWait::Admin(call, Pending::Run));
        }
        AdminRequest::WaitRun { run } => match core.runs.get_mut(&run) {
            Some(active) => active.waiters.push(call),
            None => {
                core.db_call(DbRequest::GetRun(run), DbWait::Admin(call, Pending::Run));
            }
        },
        AdminRequest::RunNow { job } => {
            let entry = core.config.jobs.get(&job);
            match entry {
                None => failure(
                    core,
                    call,
                    AdminFailure::NotFound(format!("no job named {job}")),
                ),
                Some(crate::config::JobEntry::Invalid(bad)) => {
                    let why = bad
                        .errors
                        .first()
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "invalid".into());
                    failure(
                        core,
                        call,
                        AdminFailure::Invalid(format!("job {job} is disabled by an error: {why}")),
                    );
                }
                Some(crate::config::JobEntry::Valid(j)) => {
                    let j = Arc::clone(j);
                    if let Some(why) = core.db_trouble.clone() {
                        failure(
                            core,
                            call,
                            AdminFailure::Internal(format!(
                                "the database cannot record new runs ({why}); free space or \
                                 raise database_max_size"
                            )),
                        );
                    } else if core.stopping {
                        failure(
                            core,
                            call,
                            AdminFailure::Invalid("the daemon is stopping".into()),
                        );
                    } else if !j.enabled {
                        // One rule for saltpeterctl, the API and /ws: `enabled: false`
                        // switches the job off, run now included (docs/api.md).
                        failure(
                            core,
                            call,
                            AdminFailure::Invalid(format!(
                                "job {job} is disabled (enabled: false in {}); enable it \
                                 to run it",
                                j.file.display()
                            )),
                        );
                    } else if core.global_maintenance() {
                        failure(
                            core,
                            call,
                            AdminFailure::Invalid(
                                "global maintenance is on: no new runs start \
                                 (saltpeterctl maintenance show)"
                                    .into(),
                            ),
                        );
                    } else if j.overlap == crate::config::Overlap::Forbid && core.job_busy(&job) {
                        failure(
                            core,
                            call,
                            AdminFailure::Invalid(format!(
                                "job {job} is still running and its overlap is `forbid`"
                            )),
                        );
                    } else {
                        core.queue_run(RunRequest {
                            job: j,
                            slot: None,
                            trigger: Trigger::Manual,
                            admin_call: Some(call),
                            prestaged: false,
                        });
                    }
                }
            }
        }
        AdminRequest::Output { run, machine } => {
            core.db_call(
                DbRequest::Output {
                    run,
                    machine,
                    query: OutputQuery::default(),
                },
                DbWait::Admin(call, Pending::Output),
            );
        }
        AdminRequest::Kill { run, machine } => {
            match sessions::kill(core, run, machine.as_deref()) {
                Ok(n) => respond(
                    core,
                    call,
                    AdminResponse::Done(format!("kill sent to {n} target(s) of run {run}")),
                ),
                Err(e) => failure(core, call, AdminFailure::NotFound(e)),
            }
        }
        AdminRequest::DeployWrapper { target } => {
            if !super::deploy::applies(core) {
                failure(
                    core,
                    call,
                    AdminFailure::Invalid("no job uses the salt executor".into()),
                );
            } else {
                let workflow = super::deploy::workflow(core, call, target);
                role.workflows
                    .start(workflow, &mut role.core, std::time::Instant::now());
            }
        }
        // Answered when the reload is applied (`reload::poll`).
        AdminRequest::Reload => super::reload::request(&mut role.core, Some(call)),
        req @ (AdminRequest::ListJobs { .. }
        | AdminRequest::ShowJob { .. }
        | AdminRequest::FindRuns { .. }
        | AdminRequest::ReadOutput { .. }
        | AdminRequest::Follow { .. }
        | AdminRequest::RunWith { .. }
        | AdminRequest::WatchRun { .. }
        | AdminRequest::KillJob {
            machine: None,
            run: None,
            ..
        }
        | AdminRequest::Events { .. }) => super::admin_more::handle(role, call, req),
        AdminRequest::NextFirings { job, from, count } => {
            let resp = next_firings(core, &job, from, count);
            respond(core, call, resp);
        }
        AdminRequest::Maintenance(change) => super::maintenance::change(core, call, change),
        AdminRequest::Deliveries(filter) => super::notify::list(core, call, filter),
        AdminRequest::MaintenanceWindows { count } => super::windows::request(core, call, count),
        AdminRequest::JobControl(change) => super::jobctl::request(core, call, change),
        other => super::api::handle(core, call, other),
    }
}

/// The next `count` firings of a configured job after `from` (default now).
fn next_firings(core: &Main, job: &str, from: Option<i64>, count: u32) -> AdminResponse {
    let fail = |f| AdminResponse::Failure(f);
    let j = match core.config.jobs.get(job) {
        None => return fail(AdminFailure::NotFound(format!("no job named {job}"))),
        Some(crate::config::JobEntry::Invalid(bad)) => {
            let why = bad
                .errors
                .first()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "invalid".into());
            return fail(AdminFailure::Invalid(format!(
                "job {job} is disabled by an error: {why}"
            )));
        }
        Some(crate::config::JobEntry::Valid(j)) => j,
    };
    if !j.enabled {
        return fail(AdminFailure::Invalid(format!(
            "job {job} has `enabled: false`: it never fires"
        )));
    }
    let from = match from {
        None => chrono::Utc::now(),
        Some(ms) => match chrono::DateTime::from_timestamp_millis(ms) {
            Some(t) => t,
            None => {
                return fail(AdminFailure::Invalid(format!(
                    "--from {ms} is out of range"
                )));
            }
        },
    };
    let count = count.clamp(1, crate::schedule::MAX_UPCOMING) as usize;
    let upcoming = j.schedule.upcoming(from, count);
    AdminResponse::NextFirings(
        super::jobctl::account(core, j, upcoming)
            .iter()
            .map(|t| t.timestamp_millis())
            .collect(),
    )
}

/// A db reply for an admin request.
pub fn answer(core: &mut Main, call: CallId, pending: Pending, result: Result<DbReply, CallError>) {
    let reply = match (result, &pending) {
        (Ok(reply), _) => reply,
        (Err(e), Pending::Maintenance(_)) => {
            let why = format!(
                "the change is in effect, but could not be saved ({e}): it is lost at the next \
                 restart"
            );
            failure(core, call, AdminFailure::Internal(why));
            return;
        }
        (Err(e), _) => {
            failure(core, call, AdminFailure::Internal(e.to_string()));
            return;
        }
    };
    let resp = match (pending, reply) {
        (Pending::Jobs, DbReply::LastRuns(last)) => AdminResponse::Jobs(jobs(core, &last)),
        (Pending::Runs, DbReply::Runs(runs)) => AdminResponse::Runs(runs),
        (Pending::Run, DbReply::Run(Some(run))) => AdminResponse::Run(run),
        (Pending::Run, DbReply::Run(None)) => {
            AdminResponse::Failure(AdminFailure::NotFound("no such run".into()))
        }
        (Pending::Maintenance(note), DbReply::Done) => {
            AdminResponse::Maintenance(core.maintenance_info(note))
        }
        (Pending::Output, DbReply::Output(out)) => AdminResponse::Output {
            data: out.data,
            omitted_bytes: out.omitted_bytes,
            omitted_at: out.omitted_at,
        },
        (pending, other) => AdminResponse::Failure(AdminFailure::Internal(format!(
            "db answered {pending:?} with {other:?}"
        ))),
    };
    respond(core, call, resp);
}

pub(super) fn jobs(
    core: &Main,
    last: &std::collections::BTreeMap<String, RunRecord>,
) -> Vec<JobInfo> {
    core.config
        .jobs
        .values()
        .map(|entry| {
            let name = entry.name().to_string();
            let last_run = last.get(&name);
            let (enabled, error) = match entry {
                crate::config::JobEntry::Valid(j) => (j.enabled, None),
                crate::config::JobEntry::Invalid(bad) => (
                    false,
                    Some(
                        bad.errors
                            .iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join("; "),
                    ),
                ),
            };
            JobInfo {
                paused: core.jobctl.paused_note(&name, chrono::Utc::now()),
                next_run: core.scheduler.next_of(&name).map(|t| t.timestamp_millis()),
                last_run: last_run.and_then(|r| r.slot.or(r.started)),
                last_result: last_run.map(|r| r.state),
                group: entry.group().to_string(),
                enabled,
                error,
                name,
            }
        })
        .collect()
}
