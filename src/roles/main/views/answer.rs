//! The bounds and shapes every answer keeps: the largest output slice, a failed db call as
//! the requester sees it, the start of a live view. (How an answer leaves main is
//! `shell/requests/answer.rs`; the configuration errors an answer carries are bounded once
//! per load, `config::ErrorDigest`.)

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError, RemoteError};
use crate::roles::main::messages::{DbResult, Out};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{OutputBytes, calls};
use crate::wire::ui::LiveBase;

/// Largest output slice one answer carries (the admin frame limit is 16 MiB).
pub(crate) const MAX_SLICE: u64 = 8 << 20;

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
