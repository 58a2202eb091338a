//! Requests about stored output: a slice of one target's output (`saltpeterctl output`,
//! `/api/v1/.../output`), and where a target's live output starts for the hub's `/ws`
//! views (later frames reach the hub as the wrapper frames it relays, or, for a run the
//! leader drives on a standby, as `MainToHub::UiStoredOutput`, `mirror.rs`).

use crate::ipc::CallId;
use crate::roles::main::state::Main;
use crate::roles::main::views::answer::{LIVE_BASE_BYTES, MAX_SLICE, answer_with, live_read};
use crate::wire::admin::{AdminResponse, OutputRange, OutputSlice};
use crate::wire::db::DbRequest;
use crate::wire::db::calls;
use crate::wire::db::{OutputBytes, OutputQuery};
use crate::wire::records::RunId;

pub(crate) fn read(core: &mut Main, call: CallId, run: RunId, machine: String, range: OutputRange) {
    let query = OutputQuery {
        stream: range.stream,
        from: range.from,
        tail: range.tail,
        max_bytes: Some(range.max_bytes.unwrap_or(MAX_SLICE).min(MAX_SLICE)),
    };
    core.db_call(
        DbRequest::Output {
            run,
            machine,
            query,
        },
        answer_with::<calls::Output>(call, |_, out| slice(out)),
    );
}

/// db's answer to `read`.
pub(crate) fn slice(out: OutputBytes) -> AdminResponse {
    AdminResponse::OutputSlice(OutputSlice {
        data: out.data,
        omitted_bytes: out.omitted_bytes,
        omitted_at: out.omitted_at,
        total_bytes: out.total_bytes,
        next_from: out.next_from,
    })
}

pub(crate) fn live_base(core: &mut Main, call: CallId, run: RunId, machine: String) {
    let query = OutputQuery {
        tail: Some(LIVE_BASE_BYTES),
        ..OutputQuery::default()
    };
    let wait = match crate::roles::main::views::mirror::base_wait(core, call, run, &machine) {
        // A run the leader drives, on a standby: fed from the database.
        Some(wait) => wait,
        None => {
            // Everything passed on so far is in what db reads now: the link to db keeps
            // the order, and frames go to db as they arrive.
            let upto_seq = crate::roles::main::views::ui::seen_seq(core, run, &machine);
            answer_with::<calls::Output>(call, move |_, out| live_read(out, upto_seq))
        }
    };
    core.db_call(
        DbRequest::Output {
            run,
            machine,
            query,
        },
        wait,
    );
}
