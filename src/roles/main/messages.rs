//! What main's parts say to the loop ([`Message`]) and ask the shell to do ([`Cmd`]).
//!
//! A part (maintenance, job control, notifications, the fleet, ...) keeps its state in
//! private fields and changes it only in its own methods, the way a run's targets do
//! (`rules/target/`). A method returns what should happen next as an [`Out`]: a db call,
//! an answer to an admin call, an event to record, a message to another part. The shell
//! performs them (`shell/perform.rs`); no part calls db or writes another part's fields.
//!
//! A message is drained by the loop in one match (`dispatch.rs`): that match is the whole
//! list of what main reacts to between a part and the next, a run's end listeners
//! included.

use crate::ipc::CallId;
use crate::ipc::rpc::{CallError, Due};
use crate::wire::admin::AdminResponse;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::{BlockingReply, BlockingRequest};
use crate::wire::records::RunId;

/// A db reply or why there is none.
pub(crate) type DbResult = Result<DbReply, CallError>;

/// What the loop hands from one part to the next (`dispatch.rs` has the one match). This
/// file names no part: the parts name it.
pub(crate) enum Message {
    /// db saved the run-time maintenance settings of a change asked by admin call `call`
    /// (or could not): the answer to it (`maintenance/`).
    MaintenanceSaved {
        call: CallId,
        note: Option<String>,
        result: DbResult,
    },
    /// db's answer to the load of the minions' wrapper builds (`fleet/`).
    FleetLoaded { result: DbResult },
    /// Blocking published this build's wrapper for the minions and hashed it, or could
    /// not (`fleet/`).
    WrapperHashed { result: BlockingResult },
    /// A deployment of the wrapper at `path` to `minions` ended (`fleet/`).
    WrappersDeployed {
        path: String,
        minions: Vec<String>,
        result: BlockingResult,
    },
    /// The fleet changed: the runs waiting for it (`WakeEvent::Fleet`) look again.
    FleetChanged,
    /// `saltpeterctl wrapper deploy` (admin call `call`): its target, to deploy the wrapper
    /// at `path` to, is resolved, or could not be (`fleet/on_demand.rs`).
    WrapperTargetResolved {
        call: CallId,
        target: String,
        path: String,
        result: BlockingResult,
    },
    /// `saltpeterctl wrapper deploy` (admin call `call`): the deployment to the live
    /// minions ended; `lines` are what the resolution had to say (`fleet/on_demand.rs`).
    WrapperDeployedOnDemand {
        call: CallId,
        path: String,
        lines: Vec<String>,
        result: BlockingResult,
    },
    /// Start-up is done: the runs in flight are restored and the start-up hold is lifted
    /// (`lifecycle/boot.rs`).
    StartupDone,
    /// A reloaded configuration is in effect (`reload/`).
    ConfigReloaded,
}

/// What a part asks the shell to do.
pub(crate) enum Cmd {
    /// A db call; its reply goes where `then` says.
    Db {
        req: DbRequest,
        then: Then,
        due: Due,
    },
    /// The answer to an admin call.
    Answer(CallId, AdminResponse),
    /// An event for the history (`saltpeterctl events`), by the actor of the request
    /// being handled.
    Event(Event),
    /// A message for the loop to hand on.
    Post(Message),
    /// A call to blocking; its reply (or why there is none) becomes a message. `local`:
    /// this server's own blocking, never spread over the masters of other servers.
    Blocking {
        req: BlockingRequest,
        local: bool,
        tell: BlockingTell,
    },
}

/// A blocking reply or why there is none.
pub(crate) type BlockingResult = Result<BlockingReply, CallError>;

/// What a blocking reply becomes.
pub(crate) type BlockingTell = Box<dyn FnOnce(BlockingResult) -> Message>;

/// An event to record.
pub(crate) struct Event {
    pub kind: &'static str,
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub machine: Option<String>,
    pub message: String,
}

/// Where a db reply goes.
pub(crate) enum Then {
    /// A write nobody waits for: a failure is logged, naming what it was.
    Write(&'static str),
    /// The reply becomes a message to the part that asked.
    Tell(Box<dyn FnOnce(DbResult) -> Message>),
}

impl Then {
    /// The reply, made into a message by `to`.
    pub(crate) fn tell(to: impl FnOnce(DbResult) -> Message + 'static) -> Self {
        Then::Tell(Box::new(to))
    }
}

/// What one of a part's methods asks for, in order.
#[derive(Default)]
#[must_use = "what a part asks for is done only once the shell performs it"]
pub(crate) struct Out(Vec<Cmd>);

impl Out {
    pub(crate) fn new() -> Out {
        Out::default()
    }

    /// A db call answered as `then` says.
    pub(crate) fn db(&mut self, req: DbRequest, then: Then) {
        self.0.push(Cmd::Db {
            req,
            then,
            due: Due::Soon,
        });
    }

    /// A db call that db may hold until `due` to commit it with others.
    pub(crate) fn db_due(&mut self, req: DbRequest, then: Then, due: Due) {
        self.0.push(Cmd::Db { req, then, due });
    }

    /// A call to blocking (spread over the servers' masters when several share the
    /// database), its reply made into a message by `tell`.
    pub(crate) fn blocking(
        &mut self,
        req: BlockingRequest,
        tell: impl FnOnce(BlockingResult) -> Message + 'static,
    ) {
        self.0.push(Cmd::Blocking {
            req,
            local: false,
            tell: Box::new(tell),
        });
    }

    /// A call to this server's own blocking, its reply made into a message by `tell`.
    pub(crate) fn local_blocking(
        &mut self,
        req: BlockingRequest,
        tell: impl FnOnce(BlockingResult) -> Message + 'static,
    ) {
        self.0.push(Cmd::Blocking {
            req,
            local: true,
            tell: Box::new(tell),
        });
    }

    /// Answer the admin call `call`.
    pub(crate) fn answer(&mut self, call: CallId, resp: AdminResponse) {
        self.0.push(Cmd::Answer(call, resp));
    }

    /// Record an event.
    pub(crate) fn event(&mut self, event: Event) {
        self.0.push(Cmd::Event(event));
    }

    /// Hand `msg` to the loop.
    pub(crate) fn post(&mut self, msg: Message) {
        self.0.push(Cmd::Post(msg));
    }

    /// Add what `other` asks for after this.
    pub(crate) fn extend(&mut self, other: Out) {
        self.0.extend(other.0);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whatever it asks for, in order (the shell).
    pub(crate) fn into_cmds(self) -> Vec<Cmd> {
        self.0
    }

    #[cfg(test)]
    /// The commands, for the parts' tests.
    pub(crate) fn cmds(&self) -> &[Cmd] {
        &self.0
    }
}

impl From<Cmd> for Out {
    fn from(cmd: Cmd) -> Out {
        Out(vec![cmd])
    }
}
