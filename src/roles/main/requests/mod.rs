//! Requests: the one vocabulary of `AdminRequest`s that `saltpeterctl` (admin socket),
//! the HTTP API and `/ws` (through the hub) send, answered from main's state and, for
//! history, from db.
//!
//! 1. `handle_from`: a request from the admin socket carries its peer's uid; while it is
//!    handled, `Main::actor` holds that uid so every audit event it records names the
//!    operator, and state-changing requests record what was asked before anything
//!    happens.
//! 2. `handle`: dispatch by topic, one file each — `daemon` (status, metrics, reload,
//!    wrapper deployment, audit trail), `jobs`, `runs`, `output`, `maintenance`, `live`
//!    (streams: output followers, run watchers).
//! 3. Requests that need db say what they wait for (`Wait`); `answer` hands the reply to
//!    the topic's small function that shapes the one answer.
//!
//! Every answer goes out through `respond` (or `failure`), as one `AdminResponse` shape
//! per question that the caller renders.

pub mod daemon;
mod jobs;
pub mod live;
pub mod maintenance;
pub mod output;
mod runs;

use super::{DbWait, Main, MainRole};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError, RemoteError};
use crate::wire::admin::{AdminFailure, AdminPeer, AdminRequest, AdminResponse, JobState};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::link::HubReply;
use crate::wire::records::RunId;

/// Largest output slice one answer carries (the admin frame limit is 16 MiB).
pub const MAX_SLICE: u64 = 8 << 20;

/// What a request waits for from db (the hub's call id to answer).
#[derive(Debug, Clone)]
pub enum Wait {
    /// The newest run of every job, for the job list.
    Jobs {
        call: CallId,
        group: Option<String>,
        state: Option<JobState>,
    },
    /// The job's last runs, for its detail.
    Job {
        call: CallId,
        job: String,
        upcoming: u32,
    },
    Runs(CallId),
    /// One run record (also a finished run's waiters).
    Run(CallId),
    Events(CallId),
    Output(CallId),
    /// The stored output a live view starts with, and the last frame it contains.
    LiveOutput {
        call: CallId,
        upto_seq: u64,
    },
    /// The run-time maintenance settings are being saved; the note says what changed.
    Maintenance {
        call: CallId,
        note: Option<String>,
    },
    /// A follower of `live`.
    Follow(live::FollowWait),
}

/// The one way an answer leaves main.
pub fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.reply_hub(call, HubReply::Admin(resp));
}

pub fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

/// Configuration errors an answer carries (status: in all; a job: its own).
pub const ANSWER_ERRORS_MAX: usize = 100;
/// Characters of one configuration error an answer carries.
const ANSWER_ERROR_CHARS: usize = 1024;

/// The first [`ANSWER_ERRORS_MAX`] of `errors`, each cut to a bound, then one line that
/// counts the rest: a directory with 200,000 errors must not make an answer outgrow the
/// link's frame (`saltpeterctl config check` lists them all).
pub fn bounded_errors(errors: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut more = 0usize;
    for e in errors {
        if out.len() < ANSWER_ERRORS_MAX {
            out.push(crate::logsafe::cut(&e, ANSWER_ERROR_CHARS));
        } else {
            more += 1;
        }
    }
    if more > 0 {
        out.push(format!(
            "… and {more} more configuration error(s) (saltpeterctl config check lists them all)"
        ));
    }
    out
}

pub fn no_job(job: &str) -> AdminFailure {
    AdminFailure::NotFound(format!("no job named {job}"))
}

/// A request from the admin socket: handled as the peer (audit events carry its uid).
pub fn handle_from(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    call: CallId,
    peer: AdminPeer,
    req: AdminRequest,
) {
    role.core.actor.uid = Some(peer.uid);
    daemon::record_request(&mut role.core, &format!(" by uid {}", peer.uid), &req);
    handle(role, ctx, call, req);
    role.core.actor.uid = None;
}

pub fn handle(role: &mut MainRole, _ctx: &mut Ctx<MainRole>, call: CallId, req: AdminRequest) {
    let core = &mut role.core;
    if let Some(why) = core.ha.refusal()
        && matches!(
            req,
            AdminRequest::RunNow { .. }
                | AdminRequest::Maintenance(_)
                | AdminRequest::JobControl(_)
                | AdminRequest::KillJob { .. }
                | AdminRequest::Kill { .. }
                | AdminRequest::Suspend { .. }
                | AdminRequest::DeployWrapper { .. }
        )
    {
        return failure(core, call, AdminFailure::Invalid(why));
    }
    if core.flight.recovering
        && matches!(
            req,
            AdminRequest::RunNow { .. }
                | AdminRequest::Maintenance(_)
                | AdminRequest::JobControl(_)
        )
    {
        // They depend on the maintenance and job control settings, still being loaded:
        // answered once start-up is done (`boot::finish_when_ready`).
        core.boot.park(call, req);
        return;
    }
    match req {
        AdminRequest::Status => daemon::status(core, call),
        AdminRequest::Metrics => daemon::metrics(core, call),
        AdminRequest::Reload => daemon::reload(core, call),
        AdminRequest::DeployWrapper { target } => daemon::deploy_wrapper(role, call, target),
        AdminRequest::WrapperStatus => {
            let fleet = crate::wire::admin::WrapperFleet {
                this_build: core.fleet.this_build().map(str::to_string),
                minions: core.fleet.status(),
            };
            respond(core, call, AdminResponse::WrapperFleet(fleet))
        }
        AdminRequest::Events {
            job,
            run,
            kind,
            since,
            limit,
        } => daemon::events(core, call, job, run, kind, since, limit),
        AdminRequest::Jobs { group, state } => jobs::list(core, call, group, state),
        AdminRequest::Job { job, upcoming } => jobs::detail(core, call, job, upcoming),
        AdminRequest::NextFirings { job, from, count } => {
            let resp = jobs::next_firings(core, &job, from, count);
            respond(core, call, resp);
        }
        AdminRequest::RunNow { job, targets } => jobs::run_now(core, call, &job, targets),
        AdminRequest::KillJob { job, machine, run } => {
            jobs::kill_job(core, call, &job, machine.as_deref(), run)
        }
        AdminRequest::Runs(query) => runs::find(core, call, query),
        AdminRequest::GetRun { run } => send_run(core, call, run),
        AdminRequest::Kill { run, machine } => runs::kill(core, call, run, machine),
        AdminRequest::Suspend {
            run,
            machine,
            suspend,
        } => runs::suspend(core, call, run, machine, suspend),
        AdminRequest::Output {
            run,
            machine,
            range,
        } => output::read(core, call, run, machine, range),
        AdminRequest::LiveOutput { run, machine } => output::live_base(core, call, run, machine),
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
        AdminRequest::WatchRun { run } => live::watch(core, call, run),
        AdminRequest::Maintenance(change) => maintenance::change(core, call, change),
        AdminRequest::MaintenanceWindows { count } => {
            crate::roles::main::windows::request(core, call, count)
        }
        AdminRequest::JobControl(change) => crate::roles::main::jobctl::request(core, call, change),
        AdminRequest::Deliveries(filter) => crate::roles::main::notify::list(core, call, filter),
    }
}

/// Answer `call` with the stored record of `run` (db's is the truth: ended time, state).
pub fn send_run(core: &mut Main, call: CallId, run: RunId) {
    core.db_call(DbRequest::GetRun(run), request_wait(Wait::Run(call)));
}

/// A db reply for a request: the topic's function shapes the answer.
/// A request's db call: the reply is answered by `answer`.
pub fn request_wait(wait: Wait) -> DbWait {
    DbWait::with(wait, answer)
}

pub fn answer(core: &mut Main, wait: Wait, result: Result<DbReply, CallError>) {
    let (call, shaped) = match wait {
        Wait::Follow(f) => return live::answer(core, f, result),
        Wait::Maintenance { call, note } => return maintenance::saved(core, call, note, result),
        Wait::Jobs { call, group, state } => (
            call,
            calls::LastRuns::take(result).map(|last| jobs::listed(core, &last, group, state)),
        ),
        Wait::Job {
            call,
            job,
            upcoming,
        } => (
            call,
            calls::ListRuns::take(result).map(|runs| jobs::detailed(core, &job, upcoming, runs)),
        ),
        Wait::Runs(call) => (call, calls::ListRuns::take(result).map(AdminResponse::Runs)),
        Wait::Run(call) => (
            call,
            calls::GetRun::take(result).map(|r| runs::found(core, r)),
        ),
        Wait::Events(call) => (
            call,
            calls::ListEvents::take(result).map(daemon::events_read),
        ),
        Wait::Output(call) => (call, calls::Output::take(result).map(output::slice)),
        Wait::LiveOutput { call, upto_seq } => (
            call,
            calls::Output::take(result).map(|out| output::live_read(out, upto_seq)),
        ),
    };
    let resp = shaped.unwrap_or_else(|e| AdminResponse::Failure(db_failure(e)));
    respond(core, call, resp);
}

/// A failed db call as the requester sees it.
fn db_failure(err: CallError) -> AdminFailure {
    match err {
        CallError::Remote(RemoteError::NotFound(what)) => AdminFailure::NotFound(what),
        e => AdminFailure::Internal(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_a_bounded_number_of_errors() {
        let errors = bounded_errors((0..200_000).map(|n| format!("error {n}")));
        assert_eq!(errors.len(), ANSWER_ERRORS_MAX + 1);
        assert_eq!(errors[0], "error 0");
        assert!(
            errors[ANSWER_ERRORS_MAX].contains("199900 more"),
            "{errors:?}"
        );
        let long = bounded_errors(std::iter::once("x".repeat(100_000)));
        assert!(long[0].chars().count() <= ANSWER_ERROR_CHARS + 1);
        assert_eq!(bounded_errors(std::iter::empty()), Vec::<String>::new());
    }
}
