//! Main's links: the control link to the supervisor and the data links to hub, db and
//! blocking, the calls in flight on them (each with a deadline) and the replies that
//! Workflow steps have not taken yet; the wake keys handlers emit for the registry.
//!
//! Outgoing: `db_call`, `blocking_call` (typed replies taken back with `take_db_reply` /
//! `take_blocking_reply`), `to_hub`, `to_wrapper`, `reply_hub`. Incoming: `on_link` reads
//! every frame a peer has and dispatches it; expired calls fail with `Timeout`.

use std::collections::HashMap;
use std::time::Instant;

use mio::event::Event;

use super::*;
use crate::evloop::{Ctx, Flow};
use crate::ipc::rpc::{Call, CallError, CallId, Packet, PendingCalls};
use crate::wire::db::{DbNotice, DbReply, DbRequest};
use crate::wire::link::{
    BlockingReply, BlockingRequest, ConnId, HubAnswer, HubReply, HubRequest, MainToHub,
};
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

pub fn on_link(role: &mut MainRole, ctx: &mut Ctx<MainRole>, peer: Peer, event: &Event) -> Flow {
    let core = &mut role.core;
    let writable = event.is_writable();
    let result = match peer {
        Peer::Hub => {
            if writable {
                let _ = core.links.hub.on_writable();
            }
            core.links.hub.receive().map(|msgs| {
                for msg in msgs {
                    on_hub(role, ctx, msg);
                }
            })
        }
        Peer::Db => {
            if writable {
                let _ = core.links.db.on_writable();
            }
            core.links.db.receive().map(|msgs| {
                for msg in msgs {
                    match msg {
                        Packet::Reply { id, result } => match core.links.db_calls.finish(id) {
                            Some(wait) => {
                                core.db_answer(id, wait, result.map_err(CallError::Remote))
                            }
                            None => log::warn!("db answered call {id} after its deadline"),
                        },
                        Packet::Cast(DbNotice::CommitLatency(h)) => {
                            core.ui.metrics.db_commit = Some(h)
                        }
                        other => log::warn!("unexpected message from db: {other:?}"),
                    }
                }
            })
        }
        Peer::Blocking => {
            if writable {
                let _ = core.links.blocking.on_writable();
            }
            core.links.blocking.receive().map(|msgs| {
                for msg in msgs {
                    match msg {
                        Packet::Reply { id, result } => {
                            if core.links.blocking_calls.finish(id).is_some() {
                                core.links
                                    .blocking_replies
                                    .insert(id, result.map_err(CallError::Remote));
                                core.wake(WakeKey::Call(id));
                            } else {
                                log::warn!("blocking answered call {id} after its deadline");
                            }
                        }
                        other => log::warn!("unexpected message from blocking: {other:?}"),
                    }
                }
            })
        }
    };
    match result {
        Ok(()) => {
            pump(role, ctx);
            Flow::Continue
        }
        Err(e) => {
            let core = &mut role.core;
            match peer {
                Peer::Db => {
                    for (id, wait, err) in core.links.db_calls.fail_all() {
                        core.db_answer(id, wait, Err(err));
                    }
                }
                Peer::Blocking => {
                    for (id, (), err) in core.links.blocking_calls.fail_all() {
                        core.links.blocking_replies.insert(id, Err(err));
                        core.wake(WakeKey::Call(id));
                    }
                }
                Peer::Hub => {}
            }
            pump(role, ctx);
            crate::roles::link_failed(ctx, &e)
        }
    }
}

pub fn on_hub(role: &mut MainRole, ctx: &mut Ctx<MainRole>, msg: Packet<HubRequest, HubAnswer>) {
    match msg {
        Packet::Call {
            id,
            req: HubRequest::Admin(req),
        } => admin::handle(role, ctx, id, req),
        Packet::Call {
            id,
            req: HubRequest::AdminFrom { peer, req },
        } => admin_more::handle_from(role, ctx, id, peer, req),
        Packet::Cast(HubRequest::AdminGone { calls }) => live::calls_gone(&mut role.core, &calls),
        Packet::Call { id, req } => sessions::handle_call(&mut role.core, id, req),
        Packet::Cast(HubRequest::UiWatch { job, watch }) => ui::watch(&mut role.core, job, watch),
        Packet::Cast(req) => sessions::handle_cast(&mut role.core, req),
        Packet::Reply { id, .. } => log::warn!("hub answered call {id} that main never made"),
    }
}

/// Expire calls whose deadline passed (their waiters get `Timeout`).
pub fn expire_calls(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let now = Instant::now();
    let core = &mut role.core;
    for (id, wait, err) in core.links.db_calls.expire(now) {
        log::error!("db call {id}: {err}");
        core.db_answer(id, wait, Err(err));
    }
    for (id, (), err) in core.links.blocking_calls.expire(now) {
        log::error!("blocking call {id}: {err}");
        core.links.blocking_replies.insert(id, Err(err));
        core.wake(WakeKey::Call(id));
    }
    pump(role, ctx);
}

/// Keep one timer at the earliest deadline of the calls in flight (none when idle).
pub fn arm_call_expiry(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let next = [
        role.core.links.db_calls.next_deadline(),
        role.core.links.blocking_calls.next_deadline(),
    ]
    .into_iter()
    .flatten()
    .min();
    match (role.call_timer, next) {
        (Some((_, at)), Some(next)) if at <= next => {}
        (current, next) => {
            if let Some((timer, _)) = current {
                ctx.cancel(timer);
            }
            role.call_timer = next.map(|at| {
                let timer = ctx.at(at, |role: &mut MainRole, ctx| {
                    role.call_timer = None;
                    expire_calls(role, ctx);
                });
                (timer, at)
            });
        }
    }
}
