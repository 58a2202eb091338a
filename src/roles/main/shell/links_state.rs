//! Main's links and the calls in flight on them: what goes out to hub, db and blocking,
//! the call tables with their deadlines, the replies kept for Workflow steps, the wake
//! keys for the registry and the acks and credits gathered for the hub over a turn. A
//! call's continuation is handed the state it belongs to (`M`, main's `Main`), so this
//! file names none of it; what needs more than the links (answering a db call, spreading
//! a Salt call over servers) is `Main`'s (`shell/mod.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::ipc::rpc::{Call, CallError, CallId, Due, Packet, PendingCalls};
use crate::ipc::{ChannelError, Role};
use crate::roles::common::{ControlLink, Link};
use crate::roles::main::messages::{BlockingTell, Message};
use crate::wire::db::{DbReply, DbRequest, DbToMain, MainToDb};
use crate::wire::link::{
    BlockingReply, BlockingRequest, BlockingToMain, ConnId, HubAnswer, HubReply, HubRequest,
    MainToBlocking, MainToHub,
};
use crate::wire::records::now_ms;
use crate::wire::wrapper::ServerMsg;
use crate::workflow::WakeKey;

pub(crate) type HubLink = Link<Packet<MainToHub, HubReply>, Packet<HubRequest, HubAnswer>>;
pub(crate) type DbLink = Link<MainToDb, DbToMain>;
pub(crate) type BlockingLink = Link<MainToBlocking, BlockingToMain>;

/// Blocking call ids live in their own range so they never collide with db call ids in
/// the Workflow registry's wake keys.
const BLOCKING_CALL_BASE: u64 = 1 << 40;
/// How long main waits for a db call, unless the environment says otherwise.
const DB_TIMEOUT: Duration = Duration::from_secs(60);

/// How long main waits for a db call: [`DB_TIMEOUT`], or `SP_DB_TIMEOUT_S` from the
/// environment (for the tests that stall db past it; read once).
fn db_timeout() -> Duration {
    static TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        std::env::var("SP_DB_TIMEOUT_S")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(DB_TIMEOUT, Duration::from_secs)
    })
}

/// How long main waits for a blocking call (a Salt call or a launch).
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);

/// The links and what is in flight on them.
pub(crate) struct Links<M> {
    control: ControlLink,
    hub: HubLink,
    db: DbLink,
    blocking: BlockingLink,
    db_calls: PendingCalls<OnReply<M>>,
    blocking_calls: PendingCalls<()>,
    /// Replies for Workflow steps, taken by the step that waits on the call id.
    db_replies: HashMap<CallId, Result<DbReply, CallError>>,
    blocking_replies: HashMap<CallId, Result<BlockingReply, CallError>>,
    /// Blocking calls made by a part's command: the reply becomes a message.
    blocking_tells: HashMap<CallId, BlockingTell>,
    /// Wake keys emitted since the registry last saw them.
    wakes: Vec<WakeKey>,
    /// Acks and output credits for the hub, gathered over one turn of the loop.
    hub_outbox: HubOutbox,
}

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub(crate) struct OnReply<M>(Box<OnDbReply<M>>);

/// A part's continuation for a db reply.
type OnDbReply<M> = dyn FnOnce(&mut M, CallId, DbResult);

/// A db reply or why there is none.
pub(crate) type DbResult = Result<DbReply, CallError>;

impl<M> OnReply<M> {
    pub(crate) fn new(then: impl FnOnce(&mut M, CallId, DbResult) + 'static) -> Self {
        OnReply(Box::new(then))
    }

    /// Hand the reply to call `id` (or its failure) over.
    pub(crate) fn answer(self, state: &mut M, id: CallId, result: DbResult) {
        (self.0)(state, id, result)
    }
}

/// The calls that failed or expired together, with what waits for each.
type Failed<T> = Vec<(CallId, T, CallError)>;

impl<M> Links<M> {
    /// The links as start-up opened them, nothing in flight yet.
    pub(crate) fn new(
        control: ControlLink,
        hub: HubLink,
        db: DbLink,
        blocking: BlockingLink,
    ) -> Self {
        Links {
            control,
            hub,
            db,
            blocking,
            db_calls: PendingCalls::new(Role::Db),
            blocking_calls: PendingCalls::with_first_id(Role::Blocking, BLOCKING_CALL_BASE),
            db_replies: HashMap::new(),
            blocking_replies: HashMap::new(),
            blocking_tells: HashMap::new(),
            wakes: Vec::new(),
            hub_outbox: HubOutbox::default(),
        }
    }

    /// The control link to the supervisor.
    pub(crate) fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    /// Post a db call whose answer nothing needs before `due`: db may hold it until then
    /// to commit it with others (its deadline here is later by as much). When db cannot be
    /// reached (logged) the call is over and its continuation comes back, to be answered
    /// with the error.
    pub(crate) fn db_call(
        &mut self,
        req: DbRequest,
        wait: OnReply<M>,
        due: Due,
    ) -> (CallId, Option<OnReply<M>>) {
        let held = match due {
            Due::Soon => Duration::ZERO,
            Due::By(at) => Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)),
        };
        let id = self
            .db_calls
            .start(Instant::now(), db_timeout() + held, wait);
        if let Err(e) = self.db.post(&Packet::Call { id, req, due }) {
            log::error!("could not reach db: {e}");
            return (id, self.db_calls.finish(id));
        }
        (id, None)
    }

    /// db answered call `id`: what waits for it, unless the call ended before.
    pub(crate) fn finish_db_call(&mut self, id: CallId) -> Option<OnReply<M>> {
        self.db_calls.finish(id)
    }

    /// The link to db is lost: every db call in flight fails.
    pub(crate) fn fail_db_calls(&mut self) -> Failed<OnReply<M>> {
        self.db_calls.fail_all()
    }

    /// The db calls whose deadline passed by `now`.
    pub(crate) fn expire_db_calls(&mut self, now: Instant) -> Failed<OnReply<M>> {
        self.db_calls.expire(now)
    }

    /// Keep a db reply for the Workflow step waiting on call `id`, and wake it.
    pub(crate) fn keep_db_reply(&mut self, id: CallId, result: DbResult) {
        self.db_replies.insert(id, result);
        self.wake(WakeKey::Call(id));
    }

    /// The typed reply to a Workflow step's db call (`DbWait::step`), once it arrived.
    pub(crate) fn take_db_reply<C: Call<DbReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.db_replies.remove(&id).map(C::take)
    }

    /// A new blocking call in flight, with its deadline (posted by `post_blocking`, or
    /// spread over the servers' blocking).
    pub(crate) fn start_blocking_call(&mut self) -> CallId {
        self.blocking_calls
            .start(Instant::now(), LAUNCH_TIMEOUT, ())
    }

    /// Post blocking call `id` to this server's blocking; `false` when blocking cannot be
    /// reached (logged): the call is over, to be answered with the error.
    pub(crate) fn post_blocking(&mut self, id: CallId, req: BlockingRequest) -> bool {
        if let Err(e) = self.blocking.post(&Packet::Call {
            id,
            req,
            due: Due::Soon,
        }) {
            log::error!("could not reach blocking: {e}");
            self.blocking_calls.finish(id);
            return false;
        }
        true
    }

    /// Blocking call `id` is answered: whether it was still in flight (it is over now).
    pub(crate) fn finish_blocking_call(&mut self, id: CallId) -> bool {
        self.blocking_calls.finish(id).is_some()
    }

    /// The link to blocking is lost: every blocking call in flight fails.
    pub(crate) fn fail_blocking_calls(&mut self) -> Failed<()> {
        self.blocking_calls.fail_all()
    }

    /// The blocking calls whose deadline passed by `now`.
    pub(crate) fn expire_blocking_calls(&mut self, now: Instant) -> Failed<()> {
        self.blocking_calls.expire(now)
    }

    /// The typed reply to a blocking call, once it arrived.
    pub(crate) fn take_blocking_reply<C: Call<BlockingReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.blocking_replies.remove(&id).map(C::take)
    }

    /// A blocking reply (or why there is none) for call `id`: the message of the part that
    /// asked (`tell_blocking`), or else kept for its Workflow step, which is woken.
    pub(crate) fn blocking_reply(
        &mut self,
        id: CallId,
        result: Result<BlockingReply, CallError>,
    ) -> Option<Message> {
        match self.blocking_tells.remove(&id) {
            Some(tell) => Some(tell(result)),
            None => {
                self.blocking_replies.insert(id, result);
                self.wake(WakeKey::Call(id));
                None
            }
        }
    }

    /// A part waits on blocking call `id` with `tell`: its message now when the call was
    /// answered at once (blocking could not be reached), else once the reply comes.
    pub(crate) fn tell_blocking(&mut self, id: CallId, tell: BlockingTell) -> Option<Message> {
        match self.blocking_replies.remove(&id) {
            Some(result) => Some(tell(result)),
            None => {
                self.blocking_tells.insert(id, tell);
                None
            }
        }
    }

    /// Whether call `id` is in flight or its reply waits for a step.
    pub(crate) fn awaits(&self, id: CallId) -> bool {
        self.db_calls.get(id).is_some()
            || self.blocking_calls.get(id).is_some()
            || self.db_replies.contains_key(&id)
            || self.blocking_replies.contains_key(&id)
    }

    /// The earliest deadline of the calls in flight.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [
            self.db_calls.next_deadline(),
            self.blocking_calls.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A wake key for the registry.
    pub(crate) fn wake(&mut self, key: WakeKey) {
        self.wakes.push(key);
    }

    /// Whether wake keys wait for the registry.
    pub(crate) fn has_wakes(&self) -> bool {
        !self.wakes.is_empty()
    }

    /// The wake keys emitted since the last call.
    pub(crate) fn take_wakes(&mut self) -> Vec<WakeKey> {
        std::mem::take(&mut self.wakes)
    }

    /// What the hub sent (written out first what waits when the link is `writable`).
    pub(crate) fn receive_hub(
        &mut self,
        writable: bool,
    ) -> Result<Vec<Packet<HubRequest, HubAnswer>>, ChannelError> {
        if writable {
            let _ = self.hub.on_writable();
        }
        self.hub.receive()
    }

    /// What db sent (written out first what waits when the link is `writable`).
    pub(crate) fn receive_db(&mut self, writable: bool) -> Result<Vec<DbToMain>, ChannelError> {
        if writable {
            let _ = self.db.on_writable();
        }
        self.db.receive()
    }

    /// What blocking sent (written out first what waits when the link is `writable`).
    pub(crate) fn receive_blocking(
        &mut self,
        writable: bool,
    ) -> Result<Vec<BlockingToMain>, ChannelError> {
        if writable {
            let _ = self.blocking.on_writable();
        }
        self.blocking.receive()
    }

    pub(crate) fn tell_hub(&mut self, msg: MainToHub) {
        if let MainToHub::CloseWrapper { conn } = &msg {
            self.flush_ack(*conn);
        }
        self.send_hub(msg);
    }

    fn send_hub(&mut self, msg: MainToHub) {
        if let Err(e) = self.hub.post(&Packet::Cast(msg)) {
            log::error!("could not reach hub: {e}");
        }
    }

    /// A message to a wrapper. Acks wait for the end of the turn (`flush_hub_outbox`),
    /// where several for one wrapper become the highest; any other message to that
    /// wrapper sends its waiting ack first, so the order the wrapper sees is kept (an ack
    /// before the `done` it led to).
    pub(crate) fn tell_wrapper(&mut self, conn: ConnId, msg: ServerMsg) {
        if let ServerMsg::Ack { seq } = msg {
            self.hub_outbox.ack(conn, seq);
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
        if let Some(seq) = self.hub_outbox.take_ack(conn) {
            self.send_wrapper(conn, ServerMsg::Ack { seq });
        }
    }

    /// Output of `conn` costing `cost` (`wire::link::output_cost`) left main: committed,
    /// refused or dropped. The hub gets the credit at the end of the turn.
    pub(crate) fn credit_output(&mut self, conn: ConnId, cost: u64) {
        self.hub_outbox.credit(conn, cost);
    }

    /// Send the turn's acks (the highest per wrapper) and output credits (one message).
    pub(crate) fn flush_hub_outbox(&mut self) {
        for (conn, seq) in self.hub_outbox.take_acks() {
            self.send_wrapper(conn, ServerMsg::Ack { seq });
        }
        if let Some(credits) = self.hub_outbox.take_credits() {
            self.send_hub(MainToHub::OutputCredit(credits.into_iter().collect()));
        }
    }

    /// End of a loop turn: write what the turn posted to hub, db and blocking.
    pub(crate) fn flush(&mut self) {
        for (peer, result) in [
            ("hub", self.hub.on_writable()),
            ("db", self.db.on_writable()),
            ("blocking", self.blocking.on_writable()),
        ] {
            if let Err(e) = result {
                log::debug!("link to {peer}: {e}");
            }
        }
    }

    pub(crate) fn reply_hub(&mut self, id: CallId, reply: HubReply) {
        if let Err(e) = self.hub.post(&Packet::Reply {
            id,
            result: Ok(reply),
        }) {
            log::error!("could not answer hub: {e}");
        }
    }
}

/// What main tells the hub about wrapper output once per turn of its loop instead of
/// once per frame: db answers many frames of many targets at once (one commit), and
/// only the highest ack of each wrapper and the sum of the credits matter.
#[derive(Debug, Default)]
struct HubOutbox {
    /// The highest seq to ack per connection.
    acks: HashMap<ConnId, u64>,
    /// Output cost main no longer holds, per connection (`MainToHub::OutputCredit`).
    credits: HashMap<ConnId, u64>,
}

impl HubOutbox {
    /// Ack `seq` of `conn` at the end of the turn (or before its next message).
    fn ack(&mut self, conn: ConnId, seq: u64) {
        let acked = self.acks.entry(conn).or_insert(seq);
        *acked = (*acked).max(seq);
    }

    /// The ack waiting for `conn`, now sent.
    fn take_ack(&mut self, conn: ConnId) -> Option<u64> {
        self.acks.remove(&conn)
    }

    fn credit(&mut self, conn: ConnId, cost: u64) {
        *self.credits.entry(conn).or_insert(0) += cost;
    }

    /// Every ack waiting, now sent.
    fn take_acks(&mut self) -> HashMap<ConnId, u64> {
        std::mem::take(&mut self.acks)
    }

    /// The credits gathered, now sent; none when there are none.
    fn take_credits(&mut self) -> Option<HashMap<ConnId, u64>> {
        (!self.credits.is_empty()).then(|| std::mem::take(&mut self.credits))
    }
}
