//! Requests about runs: lists by job, state and time (with paging), one run, and killing,
//! suspending or resuming a run in flight or one of its targets.

use super::answer::{answer_with, failure, respond};
use crate::ipc::CallId;
use crate::roles::main::state::Main;
use crate::wire::admin::{AdminFailure, AdminResponse, RunQuery};
use crate::wire::db::DbRequest;
use crate::wire::db::RunFilter;
use crate::wire::db::calls;
use crate::wire::records::{RunId, RunRecord};

/// Most runs one answer lists.
const MAX_RUNS: u32 = 10_000;

pub fn find(core: &mut Main, call: CallId, q: RunQuery) {
    // History of a job that left the configuration is still shown.
    let filter = RunFilter {
        job: q.job,
        state: q.state,
        since: q.since,
        until: q.until,
        before_id: q.before_id,
        limit: Some(q.limit.clamp(1, MAX_RUNS) as usize),
    };
    core.db_call(
        DbRequest::ListRuns(filter),
        answer_with::<calls::ListRuns>(call, |_, runs| AdminResponse::Runs(runs)),
    );
}

/// db's answer to `GetRun` (and to a finished run's waiters), with what only main knows
/// of a run in flight: why its queued targets wait (`max_running_per_machine`).
pub fn found(core: &Main, record: Option<RunRecord>) -> AdminResponse {
    match record {
        Some(mut run) => {
            let waiting = crate::roles::main::throttle::reasons(core, run.id);
            for t in &mut run.targets {
                if t.state == crate::wire::records::TargetState::Queued {
                    t.waiting = waiting.get(&t.machine).cloned();
                }
            }
            AdminResponse::Run(run)
        }
        None => AdminResponse::Failure(AdminFailure::NotFound("no such run".into())),
    }
}

pub fn kill(core: &mut Main, call: CallId, run: RunId, machine: Option<String>) {
    match crate::roles::main::sessions::kill(core, run, machine.as_deref()) {
        Ok(n) => {
            let msg = format!("kill sent to {n} target(s) of run {run}");
            respond(core, call, AdminResponse::Done(msg));
        }
        Err(e) => failure(core, call, AdminFailure::NotFound(e)),
    }
}

pub fn suspend(core: &mut Main, call: CallId, run: RunId, machine: Option<String>, want: bool) {
    match crate::roles::main::suspend::suspend(core, run, machine.as_deref(), want) {
        Ok(msg) => respond(core, call, AdminResponse::Done(msg)),
        Err(e) => failure(core, call, e),
    }
}

/// Answer `call` with the stored record of `run` (db's is the truth: ended time, state).
pub fn send_run(core: &mut Main, call: CallId, run: RunId) {
    core.db_call(
        DbRequest::GetRun(run),
        answer_with::<calls::GetRun>(call, |core, record| found(core, record)),
    );
}
