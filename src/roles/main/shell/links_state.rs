//! Main's links and the calls in flight on them (`links.rs` sends and receives). A call's
//! continuation is handed the state it belongs to (`M`, main's `Main`: see `shell/mod.rs`),
//! so this file names none of it.

use std::collections::HashMap;

use crate::ipc::rpc::{CallError, CallId, Packet, PendingCalls};
use crate::roles::common::{ControlLink, Link};
use crate::wire::db::{DbReply, DbToMain, MainToDb};
use crate::wire::link::{
    BlockingReply, BlockingToMain, ConnId, HubAnswer, HubReply, HubRequest, MainToBlocking,
    MainToHub,
};
use crate::workflow::WakeKey;

pub(crate) type HubLink = Link<Packet<MainToHub, HubReply>, Packet<HubRequest, HubAnswer>>;
pub(crate) type DbLink = Link<MainToDb, DbToMain>;
pub(crate) type BlockingLink = Link<MainToBlocking, BlockingToMain>;

/// The links and what is in flight on them.
pub(crate) struct Links<M> {
    pub control: ControlLink,
    pub hub: HubLink,
    pub db: DbLink,
    pub blocking: BlockingLink,
    pub db_calls: PendingCalls<OnReply<M>>,
    pub blocking_calls: PendingCalls<()>,
    /// Replies for Workflow steps, taken by the step that waits on the call id.
    pub db_replies: HashMap<CallId, Result<DbReply, CallError>>,
    pub blocking_replies: HashMap<CallId, Result<BlockingReply, CallError>>,
    /// Blocking calls made by a part's command: the reply becomes a message.
    pub blocking_tells: HashMap<CallId, crate::roles::main::messages::BlockingTell>,
    /// Wake keys emitted since the registry last saw them.
    pub wakes: Vec<WakeKey>,
    /// Acks and output credits for the hub, gathered over one turn of the loop.
    pub hub_outbox: HubOutbox,
}

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub(crate) struct OnReply<M>(pub Box<OnDbReply<M>>);

/// A part's continuation for a db reply.
pub(crate) type OnDbReply<M> = dyn FnOnce(&mut M, CallId, DbResult);

/// A db reply or why there is none.
pub(crate) type DbResult = Result<DbReply, CallError>;

/// What main tells the hub about wrapper output once per turn of its loop instead of
/// once per frame: db answers many frames of many targets at once (one commit), and
/// only the highest ack of each wrapper and the sum of the credits matter.
#[derive(Debug, Default)]
pub(crate) struct HubOutbox {
    /// The highest seq to ack per connection.
    pub acks: HashMap<ConnId, u64>,
    /// Output cost main no longer holds, per connection (`MainToHub::OutputCredit`).
    pub credits: HashMap<ConnId, u64>,
}
