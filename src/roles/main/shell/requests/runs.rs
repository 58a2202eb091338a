//! Requests about runs: lists by job, state and time (with paging), one run, and killing,
//! suspending or resuming a run in flight or one of its targets.

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::{answer_with, failure, respond, send_run};
use crate::wire::admin::{AdminFailure, AdminResponse, RunQuery};
use crate::wire::db::DbRequest;
use crate::wire::db::RunFilter;
use crate::wire::db::calls;
use crate::wire::records::RunId;

/// Most runs one answer lists.
const MAX_RUNS: u32 = 10_000;

pub(super) fn find(core: &mut Main, call: CallId, q: RunQuery) {
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

/// `GetRun`: the stored record, with what only main knows of a run in flight.
pub(super) fn get(core: &mut Main, call: CallId, run: RunId) {
    send_run(core, call, run);
}

pub(super) fn kill(core: &mut Main, call: CallId, run: RunId, machine: Option<String>) {
    match crate::roles::main::shell::wrappers::sessions::kill(core, run, machine.as_deref()) {
        Ok(n) => {
            let msg = format!("kill sent to {n} target(s) of run {run}");
            respond(core, call, AdminResponse::Done(msg));
        }
        Err(e) => failure(core, call, AdminFailure::NotFound(e)),
    }
}

pub(super) fn suspend(
    core: &mut Main,
    call: CallId,
    run: RunId,
    machine: Option<String>,
    want: bool,
) {
    match crate::roles::main::shell::run::suspend::suspend(core, run, machine.as_deref(), want) {
        Ok(msg) => respond(core, call, AdminResponse::Done(msg)),
        Err(e) => failure(core, call, e),
    }
}
