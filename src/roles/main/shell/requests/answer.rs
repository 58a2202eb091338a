//! How a request's answer leaves main: `respond` (or `failure`), as one `AdminResponse`
//! shape per question that the caller renders; `answer_with`, the db call of a request
//! whose reply the topic shapes into that answer; the answers other parts give too (a run
//! record, to its `run --wait` callers). The bounds every answer keeps are the views'
//! (`views/answer.rs`).

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::shell::DbWait;
use crate::roles::main::shell::Main;
use crate::roles::main::views::answer::db_failure;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::link::HubReply;
use crate::wire::records::{RunId, RunRecord};

/// The one way an answer leaves main.
pub(crate) fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.links.reply_hub(call, HubReply::Admin(resp));
}

pub(crate) fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

pub(crate) fn no_job(job: &str) -> AdminFailure {
    AdminFailure::NotFound(format!("no job named {job}"))
}

/// A request's db call: the reply, taken as `C`'s, is shaped by `shape` into the answer to
/// `call`; a failed call answers with the failure.
pub(crate) fn answer_with<C: Call<DbReply>>(
    call: CallId,
    shape: impl FnOnce(&mut Main, C::Reply) -> AdminResponse + 'static,
) -> DbWait {
    DbWait::then(move |core, _, result| {
        let resp = match C::take(result) {
            Ok(reply) => shape(core, reply),
            Err(e) => AdminResponse::Failure(db_failure(e)),
        };
        respond(core, call, resp);
    })
}

/// db's answer to `GetRun` (and to a finished run's waiters), with what only main knows
/// of a run in flight: why its queued targets wait (`max_running_per_machine`).
pub(crate) fn found(core: &Main, record: Option<RunRecord>) -> AdminResponse {
    match record {
        Some(mut run) => {
            let waiting = crate::roles::main::shell::throttle::reasons(core, run.id);
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

/// Answer `call` with the stored record of `run` (db's is the truth: ended time, state).
pub(crate) fn send_run(core: &mut Main, call: CallId, run: RunId) {
    core.db_call(
        DbRequest::GetRun(run),
        answer_with::<calls::GetRun>(call, |core, record| found(core, record)),
    );
}
