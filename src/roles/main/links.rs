//! Main's links: the control link to the supervisor and the data links to hub, db and
//! blocking, the calls in flight on them (each with a deadline) and the replies that
//! Workflow steps have not taken yet; the wake keys handlers emit for the registry.
//!
//! Outgoing: `db_call`, `blocking_call` (typed replies taken back with `take_db_reply` /
//! `take_blocking_reply`), `to_hub`, `to_wrapper`, `reply_hub`. Incoming: `on_link` reads
//! every frame a peer has and dispatches it; expired calls fail with `Timeout`.

use std::collections::HashMap;
use std::time::Instant;

use super::{BlockingLink, DB_TIMEOUT, DbLink, DbWait, HubLink, LAUNCH_TIMEOUT, Main};
use crate::ipc::Role;
use crate::ipc::rpc::{Call, CallError, CallId, Packet, PendingCalls};
use crate::roles::ControlLink;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::{BlockingReply, BlockingRequest, ConnId, HubReply, MainToHub};
use crate::wire::wrapper::ServerMsg;
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
}

impl Main {
    pub fn wake(&mut self, key: WakeKey) {
        self.links.wakes.push(key);
    }

    pub fn db_call(&mut self, req: DbRequest, wait: DbWait) -> CallId {
        let id = self.links.db_calls.start(Instant::now(), DB_TIMEOUT, wait);
        if let Err(e) = self.links.db.send(&Packet::Call { id, req }) {
            log::error!("could not reach db: {e}");
            if let Some(wait) = self.links.db_calls.finish(id) {
                self.db_answer(id, wait, Err(CallError::PeerGone(Role::Db)));
            }
        }
        id
    }

    /// The typed reply to a Workflow step's db call (`DbWait::Step`), once it arrived.
    pub fn take_db_reply<C: Call<DbReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.links.db_replies.remove(&id).map(C::take)
    }

    /// The typed reply to a blocking call, once it arrived.
    pub fn take_blocking_reply<C: Call<BlockingReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.links.blocking_replies.remove(&id).map(C::take)
    }

    pub fn blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self
            .links
            .blocking_calls
            .start(Instant::now(), LAUNCH_TIMEOUT, ());
        if let Err(e) = self.links.blocking.send(&Packet::Call { id, req }) {
            log::error!("could not reach blocking: {e}");
            self.links.blocking_calls.finish(id);
            self.links
                .blocking_replies
                .insert(id, Err(CallError::PeerGone(Role::Blocking)));
            self.wake(WakeKey::Call(id));
        }
        id
    }

    pub fn to_hub(&mut self, msg: MainToHub) {
        if let Err(e) = self.links.hub.send(&Packet::Cast(msg)) {
            log::error!("could not reach hub: {e}");
        }
    }

    pub fn to_wrapper(&mut self, conn: ConnId, msg: ServerMsg) {
        self.to_hub(MainToHub::ToWrapper {
            conn,
            msg: crate::wire::link::AsJson(msg),
        });
    }

    pub fn reply_hub(&mut self, id: CallId, reply: HubReply) {
        if let Err(e) = self.links.hub.send(&Packet::Reply {
            id,
            result: Ok(reply),
        }) {
            log::error!("could not answer hub: {e}");
        }
    }
}
