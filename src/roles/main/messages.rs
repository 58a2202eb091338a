//! What main's parts say to the loop ([`Message`]) and ask the shell to do ([`Cmd`]).
//!
//! A part (maintenance, job control, notifications, the fleet, ...) keeps its state in
//! private fields and changes it only in its own methods, the way a run's targets do
//! (`run/target/`). A method returns what should happen next as an [`Out`]: a db call,
//! an answer to an admin call, an event to record, a message to another part. The shell
//! performs them (`Main::perform`, `shell/mod.rs`); no part calls db or writes another
//! part's fields.
//!
//! A message is drained by the loop in one match (`shell/dispatch.rs`): that match is the
//! whole list of what main reacts to between a part and the next, a run's end listeners
//! included.

use crate::config::notify::{NotifyOn, NotifyRule};
use crate::ipc::CallId;
use crate::ipc::rpc::{CallError, Due};
use crate::notify::Notice;
use crate::wire::admin::AdminResponse;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::{BlockingReply, BlockingRequest, MainToHub};
use crate::wire::records::{Millis, RunId, RunState, TargetRecord, Trigger};

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
    /// db answered one of start-up's loads, or could not (`lifecycle/boot.rs`).
    StartupLoaded { load: StartupLoad, result: DbResult },
    /// Start-up's failed loads are due to be asked again (`lifecycle/boot.rs`).
    StartupRetry,
    /// Start-up has all it needs: settle the slots missed since `last_slots` (each job's
    /// newest recorded slot), lift the start-up hold, arm the schedule, then handle the
    /// admin requests parked meanwhile (`lifecycle/boot.rs`).
    StartupDone {
        last_slots: std::collections::BTreeMap<String, crate::wire::records::Millis>,
        parked: Vec<Parked>,
    },
    /// This server leads from now on: start-up's loads, the runs in flight, the
    /// notifications (`lifecycle/ha.rs`).
    Adopt,
    /// db reported the leader lease (`DbNotice::Lease`).
    Lease(crate::wire::db::LeaseReport),
    /// The newest lease report of the turn is to be acted on (`lifecycle/ha.rs`).
    LeaseApply,
    /// Another server took the leader lease while this one led: its daemon stops
    /// (`lifecycle/ha.rs`).
    LeaseLost,
    /// What may fire, or when, changed: the schedule timer is armed again.
    ScheduleChanged,
    /// blocking read the configuration files for the reload asked for at `started`, or
    /// could not (`lifecycle/reload.rs`).
    ConfigRead {
        started: std::time::Instant,
        result: BlockingResult,
    },
    /// An executor plugin's `check_config` of the configuration being loaded answered
    /// (`lifecycle/reload.rs`).
    PluginChecked {
        plugin: String,
        result: BlockingResult,
    },
    /// An executor plugin's out-of-band `kill` of run `run`'s wrappers answered.
    PluginKilled { run: RunId, result: BlockingResult },
    /// `msg`, posted at `at`: a part's timer.
    Later {
        at: std::time::Instant,
        msg: Box<Message>,
    },
    /// db read the newest run of every job, at start: the notifier's memory of each
    /// job's last final state, for `recovery` rules (`notify/`).
    NotifyLastRuns { result: DbResult },
    /// db read the output tails of a run whose end fires notification rules: its
    /// messages can be rendered and queued (`notify/`).
    NotifyTailsRead {
        decided: Box<Decided>,
        result: DbResult,
    },
    /// db queued notification messages in the outbox (or could not) (`notify/`).
    NotifyQueued { result: DbResult },
    /// db leased the outbox's due messages to main (or could not) (`notify/`).
    DeliveriesDue { result: DbResult },
    /// blocking tried to send a message of the outbox: what the receiver said, or why
    /// the attempt failed (`notify/`).
    DeliveryAnswered {
        attempt: Attempt,
        result: BlockingResult,
    },
    /// db listed the outbox for `saltpeterctl deliveries` (admin call `call`; `notify/`).
    DeliveriesListed { call: CallId, result: DbResult },
    /// db wrote (or could not) the `salt_calls` row of part `index` of the Salt call
    /// `call` spread over several servers; its answer is due within `wait` (`masters/`).
    SaltCallSent {
        call: CallId,
        index: usize,
        wait: std::time::Duration,
        result: DbResult,
    },
    /// This server's own blocking answered its part `index` of the Salt call `call`
    /// spread over several servers (`masters/`).
    SaltPartAnswered {
        call: CallId,
        index: usize,
        result: BlockingResult,
    },
    /// Every part of the Salt call `call` spread over several servers answered: the
    /// merged answer, for its caller as any blocking reply (`masters/`).
    SaltCallMerged {
        call: CallId,
        result: BlockingResult,
    },
    /// This server's blocking answered the Salt call it made for server `from`
    /// (`salt_calls` row `row`): the answer goes back into the row (`masters/serve.rs`).
    SaltCallServed {
        row: i64,
        from: String,
        result: BlockingResult,
    },
    /// db saved the job control state (or could not); with `call`, the admin call whose
    /// change it was, to answer with `note` (`jobctl/`).
    JobCtlSaved {
        call: Option<CallId>,
        note: Option<String>,
        result: DbResult,
    },
    /// Something about run `run` changed (recorded, a target started, settled or was
    /// suspended, it waits for a place): the views look again (`run --wait` watchers hear
    /// which targets moved; the dashboard shows it at the end of the turn).
    RunChanged(RunId),
    /// A run ended and its end is stored: the run's end listeners.
    RunEnded(FinishedRun),
    /// db's newest run of the job an output follower (admin call `call`) follows.
    FollowLatest { call: CallId, result: DbResult },
    /// db's record of the run an output follower follows: its targets.
    FollowRun { call: CallId, result: DbResult },
    /// db's read of one target's output for an output follower.
    FollowRead {
        call: CallId,
        machine: String,
        result: DbResult,
    },
    /// db's record of a followed run that ended: the follower's final answer.
    FollowEnd { call: CallId, result: DbResult },
    /// db's read of where a target's live view starts (`/ws`), for a run of this
    /// server's: the answer to `call`, every frame up to `upto_seq` in it.
    LiveBase {
        call: CallId,
        upto_seq: u64,
        result: DbResult,
    },
    /// db's newest run of every job, read at start: the dashboard's last runs.
    LastRuns(DbResult),
    /// On a standby: db's runs in flight, read to resync the mirror of the leader's runs.
    MirrorInFlight(DbResult),
    /// On a standby: db's record of run `run`, driven by the leader.
    MirrorRun { run: RunId, result: DbResult },
    /// On a standby: db's read of a target's output for its `/ws` feed.
    MirrorFeed {
        run: RunId,
        machine: String,
        result: DbResult,
    },
    /// On a standby: db's read of where a target's `/ws` view starts, which starts its
    /// feed: the answer to `call`.
    MirrorBase {
        call: CallId,
        run: RunId,
        machine: String,
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
    /// A reloaded configuration is in effect (`lifecycle/reload.rs`).
    ConfigReloaded,
    /// Blocking answered the salt launch of `runs` published at `sent`, one round's
    /// publish, or could not (`rounds/`).
    LaunchAnswered {
        runs: Vec<RunId>,
        sent: std::time::Instant,
        result: BlockingResult,
    },
    /// db read the runs in flight for the orphan sweep, or could not (`orphans/`).
    OrphansRead { result: DbResult },
    /// db read the runs in flight at start-up or on becoming leader, or could not: they
    /// are rebuilt and their Workflows resumed (`shell/run/recovery.rs`).
    InFlightRead { result: DbResult },
}

/// A run's end or a skipped slot, and the notification rules that fire for it, waiting
/// for the run's output tails to be rendered into messages.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub notice: Notice,
    pub firing: Vec<(NotifyRule, NotifyOn)>,
    /// What makes its messages' keys unique: `run:<id>:<end>` or `slot:<job>:<slot>`.
    pub key: String,
}

/// A message of the outbox being sent, as main remembers it until blocking answers.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// Its row in db's `deliveries`.
    pub id: u64,
    /// Attempts before this one.
    pub attempts: u32,
    pub job: Option<String>,
    pub run: Option<RunId>,
    /// The rule's event (`failure`, `recovery`, ...), or `export` for a log export.
    pub event: String,
    /// The address, URL or export it goes to, as shown (a URL cut to its host:
    /// `Outgoing::destination_shown`).
    pub destination: String,
}

/// A run that ended, its end stored, as its end listeners hear of it.
pub(crate) struct FinishedRun {
    pub run: RunId,
    pub job: String,
    /// Its final state.
    pub state: RunState,
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    /// Its targets as they ended.
    pub targets: Vec<TargetRecord>,
    /// Admin calls (`run --wait`) answered with the stored record.
    pub waiters: Vec<CallId>,
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
    /// A message to the hub: a response streamed before an admin call's answer, the
    /// dashboard's views, stored output for a `/ws` view.
    Hub(MainToHub),
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

    /// Tell the hub `msg`.
    pub(crate) fn hub(&mut self, msg: MainToHub) {
        self.0.push(Cmd::Hub(msg));
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

/// One of the loads start-up waits for (`lifecycle/boot.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartupLoad {
    /// The run-time maintenance settings (`meta`).
    Maintenance,
    /// The newest recorded slot of every job.
    LastSlots,
    /// The job control state: paused and skipping jobs (`meta`).
    JobCtl,
}

/// An admin request kept until start-up is done, with who made it: the uid of the admin
/// socket's peer, or the API identity (`api:NAME`). Its audit names them once it is
/// handled, as it would have without the wait.
#[derive(Debug)]
pub(crate) struct Parked {
    pub call: CallId,
    pub req: crate::wire::admin::AdminRequest,
    pub uid: Option<u32>,
    pub name: Option<String>,
}
