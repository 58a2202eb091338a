//! The admin requests of the complete `saltpeterctl`: filtered lists (jobs, runs,
//! events), one job in detail, output slices, runs on chosen targets, killing every run of
//! a job, and who asked.
//!
//! - `handle_from`: a request from the admin socket carries its peer's uid; while it is
//!   handled, `Main::actor` holds that uid so every audit event it records names the
//!   operator, and state-changing verbs record what was asked before anything happens.
//! - `handle`: the requests added here; those that need history ask db and finish in
//!   `answer`. Streaming requests (`Follow`, `WatchRun`) live in `live`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::live::{self, FollowWait};
use super::{DbWait, Main, MainRole};
use crate::config::{Executor, JobEntry, Overlap, TargetType};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::CallError;
use crate::wire::admin::{
    AdminFailure, AdminPeer, AdminRequest, AdminResponse, EventInfo, JobDetail, JobState,
    JobSummary, OutputSlice,
};
use crate::wire::db::EventFilter;
use crate::wire::db::OutputQuery;
use crate::wire::db::RunFilter;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::HubReply;
use crate::wire::records::{RunRecord, RunState, Trigger};

/// Largest output slice one answer carries (the admin frame limit is 16 MiB).
pub const MAX_SLICE: u64 = 8 << 20;

/// What an admin request of this module waits for from db.
#[derive(Debug, Clone)]
pub enum Wait {
    Jobs {
        call: CallId,
        group: Option<String>,
        state: Option<JobState>,
    },
    ShowJob {
        call: CallId,
        job: String,
    },
    Runs(CallId),
    Output(CallId),
    Events(CallId),
    Follow(FollowWait),
}

pub fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.reply_hub(call, HubReply::Admin(resp));
}

pub fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

/// A request from the admin socket: handled as the peer (audit events carry its uid).
pub fn handle_from(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    call: CallId,
    peer: AdminPeer,
    req: AdminRequest,
) {
    role.core.actor = Some(peer.uid);
    record_request(&mut role.core, peer, &req);
    super::admin::handle(role, ctx, call, req);
    role.core.actor = None;
}

/// The audit entry of a state-changing request (kills record their own, per run).
fn record_request(core: &mut Main, peer: AdminPeer, req: &AdminRequest) {
    let by = format!("by uid {}", peer.uid);
    match req {
        AdminRequest::RunNow { job } => core.event(
            "run_requested",
            Some(job),
            None,
            None,
            format!("manual run requested {by}"),
        ),
        AdminRequest::RunWith { job, targets } => core.event(
            "run_requested",
            Some(job),
            None,
            None,
            format!("manual run on {} requested {by}", targets.join(", ")),
        ),
        AdminRequest::Reload => core.event(
            "reload_requested",
            None,
            None,
            None,
            format!("configuration reload requested {by}"),
        ),
        AdminRequest::DeployWrapper { target } => core.event(
            "wrapper_deploy_requested",
            None,
            None,
            None,
            format!(
                "wrapper deployment to {} requested {by}",
                target.as_deref().unwrap_or("*")
            ),
        ),
        _ => {}
    }
}

pub fn handle(role: &mut MainRole, call: CallId, req: AdminRequest) {
    let core = &mut role.core;
    match req {
        AdminRequest::ListJobs { group, state } => {
            core.db_call(
                DbRequest::LastRuns,
                DbWait::AdminMore(Wait::Jobs { call, group, state }),
            );
        }
        AdminRequest::ShowJob { job } => {
            if !core.config.jobs.contains_key(&job) {
                return failure(core, call, no_job(&job));
            }
            core.db_call(
                DbRequest::ListRuns(RunFilter {
                    job: Some(job.clone()),
                    limit: Some(5),
                    ..Default::default()
                }),
                DbWait::AdminMore(Wait::ShowJob { call, job }),
            );
        }
        AdminRequest::FindRuns {
            job,
            state,
            since,
            limit,
        } => {
            core.db_call(
                DbRequest::ListRuns(RunFilter {
                    job,
                    state,
                    since,
                    limit: Some(limit.clamp(1, 10_000) as usize),
                    ..Default::default()
                }),
                DbWait::AdminMore(Wait::Runs(call)),
            );
        }
        AdminRequest::ReadOutput {
            run,
            machine,
            stream,
            tail,
            from,
        } => {
            core.db_call(
                DbRequest::Output {
                    run,
                    machine,
                    query: OutputQuery {
                        stream,
                        from,
                        tail,
                        max_bytes: Some(MAX_SLICE),
                    },
                },
                DbWait::AdminMore(Wait::Output(call)),
            );
        }
        AdminRequest::Events {
            job,
            run,
            kind,
            since,
            limit,
        } => {
            core.db_call(
                DbRequest::ListEvents(EventFilter {
                    job,
                    run,
                    kind,
                    since,
                    before_id: None,
                    limit: Some(limit.clamp(1, 100_000) as usize),
                }),
                DbWait::AdminMore(Wait::Events(call)),
            );
        }
        AdminRequest::RunWith { job, targets } => run_with(core, call, &job, targets),
        AdminRequest::KillJob {
            job,
            machine: None,
            run: None,
        } => kill_job(core, call, &job),
        AdminRequest::WatchRun { run } => live::watch(core, call, run),
        AdminRequest::Follow {
            run,
            job,
            machine,
            stream,
            tail,
            live,
        } => live::follow(
            core,
            call,
            live::FollowSpec {
                run,
                job,
                machine,
                stream,
                tail,
                live,
            },
        ),
        other => failure(
            core,
            call,
            AdminFailure::Internal(format!("misrouted admin request {other:?}")),
        ),
    }
}

fn no_job(job: &str) -> AdminFailure {
    AdminFailure::NotFound(format!("no job named {job}"))
}

/// Start `job` now on `targets`: for `local` a subset of the job's targets, for `salt`
/// an explicit list of minions (run as a `list` target).
fn run_with(core: &mut Main, call: CallId, name: &str, targets: Vec<String>) {
    let job = match core.config.jobs.get(name) {
        None => return failure(core, call, no_job(name)),
        Some(JobEntry::Invalid(bad)) => {
            let why = bad
                .errors
                .first()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "invalid".into());
            return failure(
                core,
                call,
                AdminFailure::Invalid(format!("job {name} is disabled by an error: {why}")),
            );
        }
        Some(JobEntry::Valid(job)) => job,
    };
    let mut chosen: Vec<String> = Vec::new();
    for t in targets {
        let t = t.trim().to_string();
        if !t.is_empty() && !chosen.contains(&t) {
            chosen.push(t);
        }
    }
    if chosen.is_empty() {
        return failure(
            core,
            call,
            AdminFailure::Invalid("--targets names no target".into()),
        );
    }
    let mut job = (**job).clone();
    if job.executor == Executor::Local {
        if let Some(stranger) = chosen.iter().find(|t| !job.targets.contains(t)) {
            let msg = format!(
                "{stranger} is not a target of job {name} (its targets: {})",
                job.targets.join(", ")
            );
            return failure(core, call, AdminFailure::Invalid(msg));
        }
    } else {
        job.target_type = TargetType::List;
    }
    job.target_expr = chosen.join(",");
    job.targets = chosen;
    if let Some(why) = core.db_trouble.clone() {
        let msg = format!(
            "the database cannot record new runs ({why}); free space or raise database_max_size"
        );
        return failure(core, call, AdminFailure::Internal(msg));
    }
    if core.stopping {
        return failure(
            core,
            call,
            AdminFailure::Invalid("the daemon is stopping".into()),
        );
    }
    if job.overlap == Overlap::Forbid && core.job_busy(name) {
        let msg = format!("job {name} is still running and its overlap is `forbid`");
        return failure(core, call, AdminFailure::Invalid(msg));
    }
    core.queue_run(super::run::RunRequest {
        job: Arc::new(job),
        slot: None,
        trigger: Trigger::Manual,
        admin_call: Some(call),
        prestaged: false,
    });
}

/// Kill every run of `job` in flight.
fn kill_job(core: &mut Main, call: CallId, job: &str) {
    let runs: Vec<_> = core
        .runs
        .values()
        .filter(|r| r.job.name == job)
        .map(|r| r.id)
        .collect();
    if runs.is_empty() {
        let why = if core.config.jobs.contains_key(job) {
            format!("no run of job {job} is in flight")
        } else {
            format!("no job named {job} and no run of it in flight")
        };
        return failure(core, call, AdminFailure::NotFound(why));
    }
    let mut reached = 0;
    for run in &runs {
        match super::sessions::kill(core, *run, None) {
            Ok(n) => reached += n,
            Err(e) => log::warn!("kill-job {job}: {e}"),
        }
    }
    let ids: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
    let msg = format!(
        "kill sent to {reached} target(s) of {} run(s) of {job} ({})",
        runs.len(),
        ids.join(", ")
    );
    respond(core, call, AdminResponse::Done(msg));
}

/// The state `jobs` shows for a job.
fn job_state(core: &Main, entry: &JobEntry, last: Option<RunState>) -> (JobState, Vec<u64>) {
    let running: Vec<u64> = core
        .runs
        .values()
        .filter(|r| r.job.name == entry.name())
        .map(|r| r.id)
        .collect();
    let state = match entry {
        JobEntry::Invalid(_) => JobState::Invalid,
        JobEntry::Valid(_) if !running.is_empty() => JobState::Running,
        JobEntry::Valid(j) if !j.enabled => JobState::Disabled,
        JobEntry::Valid(j) if core.jobctl.paused(&j.name, chrono::Utc::now()).is_some() => {
            JobState::Paused
        }
        JobEntry::Valid(_) if matches!(last, Some(RunState::Failed | RunState::Partial)) => {
            JobState::Failing
        }
        JobEntry::Valid(_) => JobState::Idle,
    };
    (state, running)
}

fn summaries(core: &Main, last: &BTreeMap<String, RunRecord>) -> Vec<JobSummary> {
    super::admin::jobs(core, last)
        .into_iter()
        .filter_map(|info| {
            let entry = core.config.jobs.get(&info.name)?;
            let (state, running) = job_state(core, entry, info.last_result);
            Some(JobSummary {
                info,
                state,
                running,
            })
        })
        .collect()
}

/// A db reply for a request of this module.
pub fn answer(core: &mut Main, wait: Wait, result: Result<DbReply, CallError>) {
    let call = match &wait {
        Wait::Follow(f) => return live::answer(core, f.clone(), result),
        Wait::Jobs { call, .. } | Wait::ShowJob { call, .. } => *call,
        Wait::Runs(call) | Wait::Output(call) | Wait::Events(call) => *call,
    };
    let reply = match result {
        Ok(reply) => reply,
        Err(CallError::Remote(crate::ipc::rpc::RemoteError::NotFound(what))) => {
            return failure(core, call, AdminFailure::NotFound(what));
        }
        Err(e) => return failure(core, call, AdminFailure::Internal(e.to_string())),
    };
    let resp = match (wait, reply) {
        (Wait::Jobs { group, state, .. }, DbReply::LastRuns(last)) => {
            let mut jobs = summaries(core, &last);
            jobs.retain(|j| {
                group.as_ref().is_none_or(|g| &j.info.group == g)
                    && state.is_none_or(|s| j.state == s)
            });
            AdminResponse::JobList(jobs)
        }
        (Wait::ShowJob { job, .. }, DbReply::Runs(runs)) => match show_job(core, &job, runs) {
            Some(detail) => AdminResponse::JobDetail(Box::new(detail)),
            None => AdminResponse::Failure(no_job(&job)),
        },
        (Wait::Runs(_), DbReply::Runs(runs)) => AdminResponse::Runs(runs),
        (Wait::Output(_), DbReply::Output(out)) => AdminResponse::OutputSlice(OutputSlice {
            data: out.data,
            omitted_bytes: out.omitted_bytes,
            omitted_at: out.omitted_at,
            total_bytes: out.total_bytes,
            next_from: out.next_from,
        }),
        (Wait::Events(_), DbReply::Events(events)) => AdminResponse::Events(
            events
                .into_iter()
                .map(|e| EventInfo {
                    id: e.id,
                    at: e.event.at,
                    kind: e.event.kind,
                    job: e.event.job,
                    run: e.event.run,
                    machine: e.event.machine,
                    message: e.event.message,
                    uid: e.event.uid,
                })
                .collect(),
        ),
        (wait, other) => AdminResponse::Failure(AdminFailure::Internal(format!(
            "db answered {wait:?} with {other:?}"
        ))),
    };
    respond(core, call, resp);
}

fn show_job(core: &Main, name: &str, runs: Vec<RunRecord>) -> Option<JobDetail> {
    let entry = core.config.jobs.get(name)?;
    let mut last = BTreeMap::new();
    if let Some(newest) = runs.first() {
        last.insert(name.to_string(), newest.clone());
    }
    let summary = summaries(core, &last)
        .into_iter()
        .find(|s| s.info.name == name)?;
    let (config_json, errors, next_runs) = match entry {
        JobEntry::Valid(job) => (
            Some(job.redacted_json().to_string()),
            Vec::new(),
            job.schedule
                .upcoming(chrono::Utc::now(), 5)
                .into_iter()
                .map(|t| t.timestamp_millis())
                .collect(),
        ),
        JobEntry::Invalid(bad) => (
            None,
            bad.errors.iter().map(|d| d.to_string()).collect(),
            Vec::new(),
        ),
    };
    Some(JobDetail {
        summary,
        config_json,
        errors,
        next_runs,
        last_runs: runs,
    })
}
