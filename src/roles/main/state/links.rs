//! Main's links and the calls in flight on them (`links.rs` sends and receives).

use std::collections::HashMap;

use super::{BlockingLink, DbLink, HubLink, Main};
use crate::ipc::rpc::{CallError, CallId, PendingCalls};
use crate::roles::common::ControlLink;
use crate::wire::db::DbReply;
use crate::wire::link::{BlockingReply, ConnId};
use crate::workflow::WakeKey;

/// The links and what is in flight on them.
pub struct Links {
    pub control: ControlLink,
    pub hub: HubLink,
    pub db: DbLink,
    pub blocking: BlockingLink,
    pub db_calls: PendingCalls<DbWait>,
    pub blocking_calls: PendingCalls<()>,
    /// Replies for Workflow steps, taken by the step that waits on the call id.
    pub db_replies: HashMap<CallId, Result<DbReply, CallError>>,
    pub blocking_replies: HashMap<CallId, Result<BlockingReply, CallError>>,
    /// Wake keys emitted since the registry last saw them.
    pub wakes: Vec<WakeKey>,
    /// Acks and output credits for the hub, gathered over one turn of the loop.
    pub hub_outbox: HubOutbox,
}

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub struct DbWait(pub Box<OnDbReply>);

/// A part's continuation for a db reply.
pub type OnDbReply = dyn FnOnce(&mut Main, CallId, DbResult);

/// A db reply or why there is none.
pub type DbResult = Result<DbReply, CallError>;

impl DbWait {
    /// The reply goes to `then`.
    pub fn then(
        then: impl FnOnce(&mut Main, CallId, Result<DbReply, CallError>) + 'static,
    ) -> Self {
        DbWait(Box::new(then))
    }

    /// The reply goes to `answer` with `wait`, what the part keeps about the call.
    pub fn with<W: 'static>(wait: W, answer: fn(&mut Main, W, Result<DbReply, CallError>)) -> Self {
        Self::then(move |core, _, result| answer(core, wait, result))
    }

    /// A Workflow step waits on this call id: the reply is kept for it (`take_db_reply`)
    /// and the step woken.
    pub fn step() -> Self {
        Self::then(|core, id, result| {
            core.links.db_replies.insert(id, result);
            core.wake(WakeKey::Call(id));
        })
    }

    /// A write nobody waits for; a failure is logged.
    pub fn write(what: &'static str) -> Self {
        Self::then(move |_, _, result| {
            if let Err(e) = result {
                log::error!("could not record {what}: {e}");
            }
        })
    }
}

/// What main tells the hub about wrapper output once per turn of its loop instead of
/// once per frame: db answers many frames of many targets at once (one commit), and
/// only the highest ack of each wrapper and the sum of the credits matter.
#[derive(Debug, Default)]
pub struct HubOutbox {
    /// The highest seq to ack per connection.
    pub acks: HashMap<ConnId, u64>,
    /// Output cost main no longer holds, per connection (`MainToHub::OutputCredit`).
    pub credits: HashMap<ConnId, u64>,
}
