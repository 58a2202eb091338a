//! What main does with a db reply: the continuations a part hands a db call (`DbWait`).
//! A Workflow step's reply is kept for the step (`DbWait::step`), anything else runs the
//! part's own continuation; the links (`links_state.rs`) only look the reply up and hand
//! it over (`Main::db_answer`).
//!
//! Outgoing calls: `Main::db_call`, `Main::blocking_call` (typed replies taken back with
//! `Links::take_db_reply` / `Links::take_blocking_reply`); messages to the hub and the
//! wrappers: `Links::tell_hub`, `Links::tell_wrapper`, `Links::reply_hub`. Incoming:
//! `main_loop::on_link` reads every frame a peer has and dispatches it; expired calls fail
//! with `Timeout`.

use crate::ipc::rpc::{CallError, CallId};
use crate::roles::main::shell::{DbWait, Main, links_state};
use crate::wire::db::DbReply;

impl DbWait {
    /// The reply goes to `then`.
    pub(crate) fn then(
        then: impl FnOnce(&mut Main, CallId, Result<DbReply, CallError>) + 'static,
    ) -> Self {
        links_state::OnReply::new(then)
    }

    /// The reply goes to `answer` with `wait`, what the part keeps about the call.
    pub(crate) fn with<W: 'static>(
        wait: W,
        answer: fn(&mut Main, W, Result<DbReply, CallError>),
    ) -> Self {
        Self::then(move |core, _, result| answer(core, wait, result))
    }

    /// A Workflow step waits on this call id: the reply is kept for it (`take_db_reply`)
    /// and the step woken.
    pub(crate) fn step() -> Self {
        Self::then(|core, id, result| core.links.keep_db_reply(id, result))
    }

    /// A write nobody waits for; a failure is logged.
    /// While the database does not store, the trouble was logged once when it began.
    pub(crate) fn write(what: &'static str) -> Self {
        Self::then(move |core, _, result| {
            if let Err(e) = result {
                if core.storage.trouble().is_some() {
                    log::debug!("could not record {what}: {e}");
                } else {
                    log::error!("could not record {what}: {e}");
                }
            }
        })
    }
}
