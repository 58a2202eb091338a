//! How a request's answer leaves main: `respond` (or `failure`), as one `AdminResponse`
//! shape per question that the caller renders; `answer_with`, the db call of a request
//! whose reply the topic shapes into that answer; the bounds every answer keeps; the
//! answers other parts give too (a run record, the start of a live view).

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError, RemoteError};
use crate::roles::main::state::DbWait;
use crate::roles::main::state::Main;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbReply, DbRequest, OutputBytes, calls};
use crate::wire::link::HubReply;
use crate::wire::records::{RunId, RunRecord};
use crate::wire::ui::LiveBase;

/// Largest output slice one answer carries (the admin frame limit is 16 MiB).
pub(crate) const MAX_SLICE: u64 = 8 << 20;

/// The one way an answer leaves main.
pub(crate) fn respond(core: &mut Main, call: CallId, resp: AdminResponse) {
    core.reply_hub(call, HubReply::Admin(resp));
}

pub(crate) fn failure(core: &mut Main, call: CallId, f: AdminFailure) {
    respond(core, call, AdminResponse::Failure(f));
}

/// Configuration errors an answer carries (status: in all; a job: its own).
pub(crate) const ANSWER_ERRORS_MAX: usize = 100;
/// Characters of one configuration error an answer carries.
const ANSWER_ERROR_CHARS: usize = 1024;

/// The first [`ANSWER_ERRORS_MAX`] of `errors`, each cut to a bound, then one line that
/// counts the rest: a directory with 200,000 errors must not make an answer outgrow the
/// link's frame (`saltpeterctl config check` lists them all).
pub(crate) fn bounded_errors(errors: impl Iterator<Item = String>) -> Vec<String> {
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

/// A failed db call as the requester sees it.
fn db_failure(err: CallError) -> AdminFailure {
    match err {
        CallError::Remote(RemoteError::NotFound(what)) => AdminFailure::NotFound(what),
        e => AdminFailure::Internal(e.to_string()),
    }
}

/// Bytes of stored output a live view starts with (the newest ones).
pub(crate) const LIVE_BASE_BYTES: u64 = 1 << 20;

/// db's answer to `live_base`.
pub(crate) fn live_read(out: OutputBytes, upto_seq: u64) -> AdminResponse {
    AdminResponse::LiveOutput(LiveBase {
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
