//! Requests about stored output: a slice of one target's output (`saltpeterctl output`,
//! `/api/v1/.../output`), and where a target's live output starts for the hub's `/ws`
//! views (later frames reach the hub as the wrapper frames it relays, or, for a run the
//! leader drives on a standby, as `MainToHub::UiStoredOutput`, `views/mirror/`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::answer_with;
use crate::roles::main::views::answer::MAX_SLICE;
use crate::wire::admin::{AdminResponse, OutputRange, OutputSlice};
use crate::wire::db::DbRequest;
use crate::wire::db::calls;
use crate::wire::db::{OutputBytes, OutputQuery};
use crate::wire::records::RunId;

pub(super) fn read(core: &mut Main, call: CallId, run: RunId, machine: String, range: OutputRange) {
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
pub(super) fn slice(out: OutputBytes) -> AdminResponse {
    AdminResponse::OutputSlice(OutputSlice {
        data: out.data,
        omitted_bytes: out.omitted_bytes,
        omitted_at: out.omitted_at,
        total_bytes: out.total_bytes,
        next_from: out.next_from,
    })
}

/// `LiveOutput`: where a target's live view starts (the views know whether the run is
/// the leader's, mirrored on a standby, or how far its output went to db here).
pub(super) fn live_base(core: &mut Main, call: CallId, run: RunId, machine: String) {
    let acked = core
        .run(run)
        .map(|active| active.target(&machine).map_or(0, |t| t.acked_seq()));
    let out = core.views.live_base(call, run, machine, acked);
    core.perform(out);
}
