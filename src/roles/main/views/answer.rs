//! The bounds and shapes every answer keeps: the largest output slice, the configuration
//! errors an answer carries, a failed db call as the requester sees it, the start of a live
//! view. (How an answer leaves main is `shell/requests/answer.rs`.)

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError, RemoteError};
use crate::roles::main::messages::{DbResult, Out};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{OutputBytes, calls};
use crate::wire::ui::LiveBase;

/// Largest output slice one answer carries (the admin frame limit is 16 MiB).
pub(crate) const MAX_SLICE: u64 = 8 << 20;

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

/// A failed db call as the requester sees it.
pub(crate) fn db_failure(err: CallError) -> AdminFailure {
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

/// db's read of where a target's live view starts, for a run of this server's: the
/// answer to `call`, every frame up to `upto_seq` in it.
pub(crate) fn live_base_read(call: CallId, upto_seq: u64, result: DbResult) -> Out {
    let resp = match calls::Output::take(result) {
        Ok(bytes) => live_read(bytes, upto_seq),
        Err(e) => AdminResponse::Failure(db_failure(e)),
    };
    let mut out = Out::new();
    out.answer(call, resp);
    out
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
