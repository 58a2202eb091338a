//! Main's links: the control link to the supervisor and the data links to hub, db and
//! blocking, the calls in flight on them (each with a deadline) and the replies that
//! Workflow steps have not taken yet; the wake keys handlers emit for the registry.
//!
//! Outgoing: `db_call`, `blocking_call` (typed replies taken back with `take_db_reply` /
//! `take_blocking_reply`), `tell_hub`, `tell_wrapper`, `reply_hub`. Incoming: `on_link` reads
//! every frame a peer has and dispatches it; expired calls fail with `Timeout`.
//!
//! A db call carries what to do with its reply (`DbWait`), made by the part that calls:
//! a Workflow step's reply is kept for the step (`DbWait::step`), anything else runs the
//! part's own continuation. Here the reply is only looked up and handed over.

use std::time::Instant;

use crate::ipc::Role;
use crate::ipc::rpc::{Call, CallError, CallId, Due, Packet, RemoteError};
use crate::roles::main::state::{DbWait, LAUNCH_TIMEOUT, Main, db_timeout};
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::{BlockingReply, BlockingRequest, ConnId, HubReply, MainToHub};
use crate::wire::records::now_ms;
use crate::wire::wrapper::ServerMsg;
use crate::workflow::WakeKey;

impl Main {
    pub(crate) fn db_call(&mut self, req: DbRequest, wait: DbWait) -> CallId {
        self.db_call_due(req, wait, Due::Soon)
    }

    /// A db call whose answer nothing needs before `due`: db may hold it until then to
    /// commit it with others (its deadline here is later by as much).
    pub(crate) fn db_call_due(&mut self, req: DbRequest, wait: DbWait, due: Due) -> CallId {
        let held = match due {
            Due::Soon => std::time::Duration::ZERO,
            Due::By(at) => {
                std::time::Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0))
            }
        };
        let id = self
            .links
            .db_calls
            .start(Instant::now(), db_timeout() + held, wait);
        if let Err(e) = self.links.db.post(&Packet::Call { id, req, due }) {
            log::error!("could not reach db: {e}");
            if let Some(wait) = self.links.db_calls.finish(id) {
                self.db_answer(id, wait, Err(CallError::PeerGone(Role::Db)));
            }
        }
        id
    }

    /// Hand a db reply (or its failure) to whoever waits for it, noting on the way
    /// whether the database stores.
    pub(crate) fn db_answer(
        &mut self,
        id: CallId,
        wait: DbWait,
        result: Result<DbReply, CallError>,
    ) {
        match &result {
            // Storage trouble: the database did not store (a full disk, a database out of
            // reach, a call db did not answer in time). Not a missing row or a bad value.
            Err(
                e @ (CallError::Remote(RemoteError::DiskFull(_) | RemoteError::Failed(_))
                | CallError::Timeout(..)),
            ) => {
                let why = e.to_string();
                if self.storage.write_failed(&why, Instant::now()) {
                    log::error!(
                        "the database does not store ({why}); outcomes wait with their \
                         wrappers and slots are recorded once it stores again"
                    );
                    self.event("storage_trouble", None, None, None, why);
                }
            }
            Ok(
                DbReply::OutputStored { .. }
                | DbReply::Done
                | DbReply::RunCreated(_)
                | DbReply::OutcomeKept(_),
            ) => {
                if let Some(back) = self.storage.write_stored(Instant::now()) {
                    self.flight.orphans.storage_back(Instant::now());
                    log::info!(
                        "the database stores again after {:.1} s ({})",
                        back.lasted.as_secs_f64(),
                        back.why
                    );
                    self.event(
                        "storage_recovered",
                        None,
                        None,
                        None,
                        format!(
                            "the database stores again after {:.1} s ({})",
                            back.lasted.as_secs_f64(),
                            back.why
                        ),
                    );
                }
            }
            _ => {}
        }
        (wait.0)(self, id, result);
    }

    /// The typed reply to a Workflow step's db call (`DbWait::step`), once it arrived.
    pub(crate) fn take_db_reply<C: Call<DbReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.links.db_replies.remove(&id).map(C::take)
    }

    /// The typed reply to a blocking call, once it arrived.
    pub(crate) fn take_blocking_reply<C: Call<BlockingReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.links.blocking_replies.remove(&id).map(C::take)
    }

    /// A call to blocking, or, with several masters on one database, to the blocking of
    /// the servers whose masters reach its minions (`delegate`): one reply under `id`
    /// either way.
    pub(crate) fn blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self
            .links
            .blocking_calls
            .start(Instant::now(), LAUNCH_TIMEOUT, ());
        if let Some(req) = crate::roles::main::shell::delegate::route(self, id, req) {
            self.post_blocking(id, req);
        }
        id
    }

    /// A call to this server's own blocking, never spread over other servers.
    pub(crate) fn local_blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self
            .links
            .blocking_calls
            .start(Instant::now(), LAUNCH_TIMEOUT, ());
        self.post_blocking(id, req);
        id
    }

    fn post_blocking(&mut self, id: CallId, req: BlockingRequest) {
        if let Err(e) = self.links.blocking.post(&Packet::Call {
            id,
            req,
            due: Due::Soon,
        }) {
            log::error!("could not reach blocking: {e}");
            self.links.blocking_calls.finish(id);
            self.blocking_answered(id, Err(CallError::PeerGone(Role::Blocking)));
        }
    }

    /// A blocking reply (or why there is none) for call `id`: to the Salt calls of
    /// several servers if it is one of theirs, else kept for its caller and woken.
    pub(crate) fn blocking_answered(
        &mut self,
        id: CallId,
        result: Result<BlockingReply, CallError>,
    ) {
        if let Some(result) = crate::roles::main::shell::delegate::answered(self, id, result) {
            self.links.blocking_replies.insert(id, result);
            self.wake(WakeKey::Call(id));
        }
    }

    pub(crate) fn tell_hub(&mut self, msg: MainToHub) {
        if let MainToHub::CloseWrapper { conn } = &msg {
            self.flush_ack(*conn);
        }
        self.send_hub(msg);
    }

    fn send_hub(&mut self, msg: MainToHub) {
        if let Err(e) = self.links.hub.post(&Packet::Cast(msg)) {
            log::error!("could not reach hub: {e}");
        }
    }

    /// A message to a wrapper. Acks wait for the end of the turn (`flush_hub_outbox`),
    /// where several for one wrapper become the highest; any other message to that
    /// wrapper sends its waiting ack first, so the order the wrapper sees is kept (an ack
    /// before the `done` it led to).
    pub(crate) fn tell_wrapper(&mut self, conn: ConnId, msg: ServerMsg) {
        if let ServerMsg::Ack { seq } = msg {
            let acked = self.links.hub_outbox.acks.entry(conn).or_insert(seq);
            *acked = (*acked).max(seq);
            return;
        }
        self.flush_ack(conn);
        self.send_wrapper(conn, msg);
    }

    /// The same message to many wrappers: one link message per few thousand (the hub
    /// encodes it once), not one per wrapper.
    pub(crate) fn tell_wrappers(&mut self, conns: Vec<ConnId>, msg: ServerMsg) {
        const PER_MESSAGE: usize = 4096;
        for &conn in &conns {
            self.flush_ack(conn);
        }
        for chunk in conns.chunks(PER_MESSAGE) {
            self.send_hub(MainToHub::ToWrappers {
                conns: chunk.to_vec(),
                msg: crate::wire::link::AsJson(msg.clone()),
            });
        }
    }

    fn send_wrapper(&mut self, conn: ConnId, msg: ServerMsg) {
        self.send_hub(MainToHub::ToWrapper {
            conn,
            msg: crate::wire::link::AsJson(msg),
        });
    }

    fn flush_ack(&mut self, conn: ConnId) {
        if let Some(seq) = self.links.hub_outbox.acks.remove(&conn) {
            self.send_wrapper(conn, ServerMsg::Ack { seq });
        }
    }

    /// Output of `conn` costing `cost` (`wire::link::output_cost`) left main: committed,
    /// refused or dropped. The hub gets the credit at the end of the turn.
    pub(crate) fn credit_output(&mut self, conn: ConnId, cost: u64) {
        *self.links.hub_outbox.credits.entry(conn).or_insert(0) += cost;
    }

    /// Send the turn's acks (the highest per wrapper) and output credits (one message).
    pub(crate) fn flush_hub_outbox(&mut self) {
        let acks = std::mem::take(&mut self.links.hub_outbox.acks);
        for (conn, seq) in acks {
            self.send_wrapper(conn, ServerMsg::Ack { seq });
        }
        if !self.links.hub_outbox.credits.is_empty() {
            let credits = std::mem::take(&mut self.links.hub_outbox.credits);
            self.send_hub(MainToHub::OutputCredit(credits.into_iter().collect()));
        }
    }

    /// End of a loop turn: write what the turn posted to hub, db and blocking.
    pub(crate) fn flush_links(&mut self) {
        for (peer, result) in [
            ("hub", self.links.hub.on_writable()),
            ("db", self.links.db.on_writable()),
            ("blocking", self.links.blocking.on_writable()),
        ] {
            if let Err(e) = result {
                log::debug!("link to {peer}: {e}");
            }
        }
    }

    pub(crate) fn reply_hub(&mut self, id: CallId, reply: HubReply) {
        if let Err(e) = self.links.hub.post(&Packet::Reply {
            id,
            result: Ok(reply),
        }) {
            log::error!("could not answer hub: {e}");
        }
    }
}
