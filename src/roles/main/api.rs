//! The HTTP API's requests that `saltpeterctl` does not make (`/api/v1/...` and `/ws`
//! through the hub): one job with its next fire times, runs by filter, output ranges,
//! kills by job, metrics, and where a target's live output starts.

use super::admin::Pending;
use super::{DbWait, Main, sessions, ui};
use crate::ipc::CallId;
use crate::ipc::rpc::CallError;
use crate::wire::admin::{AdminFailure, AdminRequest, AdminResponse};
use crate::wire::db::OutputQuery;
use crate::wire::db::RunFilter;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::HubReply;
use crate::wire::records::RunId;
use crate::wire::ui::{JobDetail, LiveBase, OutputSlice};

/// Most fire times one request may ask for.
const MAX_UPCOMING: u32 = 100;
/// Bytes of stored output a live view starts with (the newest ones).
const LIVE_BASE_BYTES: u64 = 1 << 20;

/// What an API request waits for from db.
#[derive(Debug, Clone)]
pub enum ApiWait {
    Job { job: String, upcoming: u32 },
    Slice,
    Live { upto_seq: u64 },
}

fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.reply_hub(call, HubReply::Admin(resp));
}

fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

pub fn handle(core: &mut Main, call: CallId, req: AdminRequest) {
    match req {
        AdminRequest::JobDetail { job, upcoming } => {
            if !core.config.jobs.contains_key(&job) {
                return failure(
                    core,
                    call,
                    AdminFailure::NotFound(format!("no job named {job}")),
                );
            }
            core.db_call(
                DbRequest::ListRuns(RunFilter {
                    job: Some(job.clone()),
                    limit: Some(1),
                    ..Default::default()
                }),
                DbWait::Api(
                    call,
                    ApiWait::Job {
                        job,
                        upcoming: upcoming.min(MAX_UPCOMING),
                    },
                ),
            );
        }
        AdminRequest::RunsQuery(q) => {
            core.db_call(
                DbRequest::ListRuns(RunFilter {
                    job: q.job,
                    state: q.state,
                    since: q.since,
                    until: q.until,
                    before_id: q.before_id,
                    limit: Some(q.limit.clamp(1, 10_000) as usize),
                }),
                DbWait::Admin(call, Pending::Runs),
            );
        }
        AdminRequest::OutputRange {
            run,
            machine,
            range,
        } => {
            core.db_call(
                DbRequest::Output {
                    run,
                    machine,
                    query: OutputQuery {
                        stream: None,
                        from: range.from,
                        tail: range.tail,
                        max_bytes: range.max_bytes,
                    },
                },
                DbWait::Api(call, ApiWait::Slice),
            );
        }
        AdminRequest::KillJob { job, machine, run } => {
            let resp = kill_job(core, &job, machine.as_deref(), run);
            respond(core, call, resp);
        }
        AdminRequest::Metrics => {
            let text = super::metrics::render(core);
            respond(core, call, AdminResponse::Metrics(text));
        }
        AdminRequest::LiveOutput { run, machine } => {
            // Everything passed on so far is in what db reads now: the link to db keeps
            // the order, and frames go to db as they arrive.
            let upto_seq = ui::seen_seq(core, run, &machine);
            core.db_call(
                DbRequest::Output {
                    run,
                    machine,
                    query: OutputQuery {
                        tail: Some(LIVE_BASE_BYTES),
                        ..OutputQuery::default()
                    },
                },
                DbWait::Api(call, ApiWait::Live { upto_seq }),
            );
        }
        other => failure(
            core,
            call,
            AdminFailure::Internal(format!("request not served here: {other:?}")),
        ),
    }
}

/// Kill every run of `job` in flight (or only `run`), or only `machine` in them.
fn kill_job(
    core: &mut Main,
    job: &str,
    machine: Option<&str>,
    only: Option<RunId>,
) -> AdminResponse {
    let runs: Vec<RunId> = core
        .runs
        .values()
        .filter(|r| r.job.name == job && only.is_none_or(|id| id == r.id))
        .filter(|r| machine.is_none_or(|m| r.targets.contains_key(m)))
        .map(|r| r.id)
        .collect();
    if runs.is_empty() {
        let what = match machine {
            Some(m) => format!("no run of {job} in flight has target {m}"),
            None => format!("no run of {job} is in flight"),
        };
        return AdminResponse::Failure(AdminFailure::NotFound(what));
    }
    let mut reached = 0;
    for run in &runs {
        match sessions::kill(core, *run, machine) {
            Ok(n) => reached += n,
            Err(e) => log::warn!("kill of run {run}: {e}"),
        }
    }
    let ids: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
    AdminResponse::Done(format!(
        "kill sent to {reached} target(s) of run(s) {}",
        ids.join(", ")
    ))
}

/// A db reply for an API request.
pub fn answer(core: &mut Main, call: CallId, wait: ApiWait, result: Result<DbReply, CallError>) {
    let reply = match result {
        Ok(reply) => reply,
        Err(CallError::Remote(crate::ipc::rpc::RemoteError::NotFound(m))) => {
            return failure(core, call, AdminFailure::NotFound(m));
        }
        Err(e) => return failure(core, call, AdminFailure::Internal(e.to_string())),
    };
    let resp = match (wait, reply) {
        (ApiWait::Job { job, upcoming }, DbReply::Runs(runs)) => {
            match job_detail(core, &job, upcoming, runs) {
                Some(detail) => AdminResponse::Job(detail),
                None => {
                    AdminResponse::Failure(AdminFailure::NotFound(format!("no job named {job}")))
                }
            }
        }
        (ApiWait::Slice, DbReply::Output(out)) => AdminResponse::UiOutputSlice(OutputSlice {
            data: out.data,
            omitted_bytes: out.omitted_bytes,
            omitted_at: out.omitted_at,
            total_bytes: out.total_bytes,
            next_from: out.next_from,
        }),
        (ApiWait::Live { upto_seq }, DbReply::Output(out)) => AdminResponse::LiveOutput(LiveBase {
            // Only a read cut at its size left bytes before it.
            skipped_bytes: match out.data.len() as u64 >= LIVE_BASE_BYTES {
                true => (out.total_bytes.saturating_sub(out.omitted_bytes))
                    .saturating_sub(out.data.len() as u64),
                false => 0,
            },
            data: out.data,
            omitted_bytes: out.omitted_bytes,
            omitted_at: out.omitted_at,
            upto_seq,
        }),
        (wait, other) => AdminResponse::Failure(AdminFailure::Internal(format!(
            "db answered {wait:?} with {other:?}"
        ))),
    };
    respond(core, call, resp);
}

fn job_detail(
    core: &Main,
    job: &str,
    upcoming: u32,
    last: Vec<crate::wire::records::RunRecord>,
) -> Option<JobDetail> {
    let entry = core.config.jobs.get(job)?;
    let last: std::collections::BTreeMap<String, _> =
        last.into_iter().map(|r| (r.job.clone(), r)).collect();
    let info = super::admin::jobs(core, &last)
        .into_iter()
        .find(|j| j.name == job)?;
    let next_runs = match entry.job() {
        Some(j) if j.enabled => {
            // The first is the planned slot (which may be in the past while it fires).
            let first = core.scheduler.next_of(job);
            let mut times: Vec<i64> = first.iter().map(|t| t.timestamp_millis()).collect();
            if let Some(from) = first {
                times.extend(
                    j.schedule
                        .upcoming(from, upcoming.saturating_sub(1) as usize)
                        .iter()
                        .map(|t| t.timestamp_millis()),
                );
            }
            times.truncate(upcoming as usize);
            times
        }
        _ => Vec::new(),
    };
    Some(JobDetail {
        info,
        next_runs,
        config: ui::cron_view(entry),
        running: core
            .runs
            .values()
            .filter(|r| r.job.name == job)
            .map(|r| r.id)
            .collect(),
    })
}
