//! Main's shell: the one place that holds `Main` (a struct of the parts, its fields
//! private to this folder) and acts on the world for the parts. The parts (`fleet/`,
//! `maintenance/`, `notify/`, `run/`, `views/`, ...) keep their own state and return what
//! should happen (`messages::Out`); what is here performs it:
//! - the loop (`main_loop`) and its one match over the parts' messages (`dispatch`);
//! - `Main` itself: the commands a part returns (`Main::perform`), the db and blocking
//!   calls and their answers, events; the links to hub, db and blocking and the calls in
//!   flight on them are the links' own (`links_state`; `links`: the db continuations);
//! - the run Workflow (`run/`): the steps that drive a run's targets (`run/target/`, the
//!   pure core) through db, blocking and the wrappers;
//! - the admin requests (`requests/`, one file per topic), the wrapper sessions
//!   (`wrappers/`), the firing of slots and chains (`firing/`);
//! - what several parts are read for together: capacity (`throttle`), the job log
//!   (`joblog`), retention (`history`), what the views are handed (`views`), the launch
//!   rounds (`rounds`).
//!
//! No part names this folder: every arrow points from here to a part.

mod actor;
mod control;
mod daemon_info;
pub(crate) mod dispatch;
pub(crate) mod firing;
pub(crate) mod history;
pub(crate) mod joblog;
pub(crate) mod links;
pub(crate) mod links_state;
pub(crate) mod main_loop;
pub(crate) mod requests;
pub(crate) mod rounds;
pub(crate) mod run;
pub(crate) mod throttle;
pub(crate) mod views;
pub(crate) mod wrappers;

use std::time::{Duration, Instant};

use chrono::Utc;

use crate::config::LoadedConfig;
use crate::evloop::Ctx;
use crate::evloop::timers::TimerId;
use crate::ipc::Role;
use crate::ipc::rpc::{CallError, CallId, Due, RemoteError};
use crate::logsafe::cut;
use crate::roles::main::fleet::{Fleet, Launcher};
use crate::roles::main::jobctl::JobCtl;
use crate::roles::main::maintenance::Maintenance;
use crate::roles::main::messages::{Cmd, FinishedRun, Message, Out, Then};
use crate::roles::main::notify::Notifier;
use crate::roles::main::rounds::Rounds;
use crate::roles::main::rules::scheduler::Scheduler;
use crate::roles::main::rules::tokens::Secret;
use crate::roles::main::run::Flight;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::request::{RecoveredRun, RunRequest};
use crate::roles::main::run::rules;
use crate::roles::main::run::target::Target;
use crate::roles::main::views::Views;
use crate::wire::db::{DbReply, DbRequest, NewEvent};
use crate::wire::link::{BlockingReply, BlockingRequest, HubReply};
use crate::wire::records::{RunId, RunState, now_ms};
use crate::workflow::{Registry, WakeEvent, WakeKey};

pub(crate) use crate::roles::main::run::request::JobRef;
pub(crate) use actor::Actor;
pub(crate) use daemon_info::DaemonInfo;

/// The links as main keeps them.
pub(crate) type Links = links_state::Links<Main>;

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub(crate) type DbWait = links_state::OnReply<Main>;

/// How many characters of a job name or machine id an event row holds.
pub(crate) const EVENT_NAME_MAX: usize = crate::logsafe::NAME_MAX;
/// How many characters of a message an event row holds.
pub(crate) const EVENT_MESSAGE_MAX: usize = 4096;
/// How long shutdown waits for running Workflows.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// A Workflow waiting this long on nothing live is reported.
pub(crate) const STALL_THRESHOLD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
pub(crate) enum Peer {
    Hub,
    Db,
    Blocking,
}

/// Process state handed to handlers and to Workflow steps.
pub(crate) struct Main {
    /// The links to supervisor, hub, db and blocking, and the calls in flight on them.
    links: Links,
    config: LoadedConfig,
    secret: Secret,
    /// Runs in flight.
    flight: Flight,
    /// Wrapper connections and the target each serves; refused hellos (`sessions/`).
    sessions: crate::roles::main::sessions::Sessions,
    scheduler: Scheduler,
    /// This daemon: its processes, start time and ports.
    daemon: DaemonInfo,
    /// The wrapper URL and the pre-staging lead (`fleet/launcher.rs`).
    launcher: Launcher,
    /// Which wrapper build each minion has; deployments in flight (`fleet/`).
    fleet: Fleet,
    /// Salt launches coalesced per round (`rounds/`).
    rounds: Rounds,
    /// Whether the database stores, and what waits for it to store again.
    storage: crate::roles::main::health::storage::Storage,
    /// When a wrapper's silence may be judged (stalls of main or the hub do not count).
    liveness: crate::roles::main::health::liveness::Liveness,
    /// Who is behind the request being handled, for audit events.
    actor: Actor,
    /// What operators watch: streaming admin calls, the dashboard's views, `/metrics`, a
    /// standby's mirror of the leader's runs.
    views: Views,
    /// Maintenance set with `saltpeterctl maintenance` (persisted in db).
    maintenance: Maintenance,
    /// Messages for the loop (`messages.rs`), drained in one match (`dispatch.rs`).
    inbox: std::collections::VecDeque<crate::roles::main::messages::Message>,
    /// What start-up has loaded from db so far (`lifecycle/boot.rs`).
    boot: crate::roles::main::lifecycle::Boot,
    /// Configuration reloads in flight and asked for (`lifecycle/reload.rs`).
    reloads: crate::roles::main::lifecycle::Reloads,
    /// Notifications decided, queued and in flight.
    notify: Notifier,
    /// Paused and skipping jobs, slots deferred by maintenance windows.
    jobctl: JobCtl,
    /// Leader or standby among the servers sharing the database (`lifecycle/ha.rs`).
    ha: crate::roles::main::lifecycle::Ha,
    /// Salt calls spread over the servers' masters (several masters, one database).
    delegation: crate::roles::main::masters::Delegation,
}

/// The loop state: the process state and the Workflow registry side by side.
pub(crate) struct MainRole {
    core: Main,
    workflows: Registry<Main>,
    schedule_timer: Option<TimerId>,
    workflow_timer: Option<(TimerId, Instant)>,
    /// Fires at the earliest call deadline.
    call_timer: Option<(TimerId, Instant)>,
    /// What the loop does for the parts (installed by `main_loop`, above them).
    hooks: LoopHooks,
}

/// A role handler of the loop.
pub(crate) type RoleFn = fn(&mut MainRole, &mut Ctx<MainRole>);

/// What the loop does for the parts: a part that changed state outside a turn's event
/// pumps (wakes Workflows, starts queued runs), and one that changed what is due
/// re-arms the schedule timer.
pub(crate) struct LoopHooks {
    pump: RoleFn,
    arm_schedule: RoleFn,
}

impl MainRole {
    /// Hand what changed to the Workflows and start what is queued (`main_loop::pump`).
    pub(crate) fn pump(&mut self, ctx: &mut Ctx<MainRole>) {
        (self.hooks.pump)(self, ctx)
    }

    /// Arm the schedule timer at the earliest slot (`main_loop::arm_schedule`).
    pub(crate) fn arm_schedule(&mut self, ctx: &mut Ctx<MainRole>) {
        (self.hooks.arm_schedule)(self, ctx)
    }
}

impl Main {
    /// Global maintenance is on (from the files or at run time): no new runs start.
    pub(crate) fn global_maintenance(&self) -> bool {
        self.maintenance.global(&self.config.maintenance)
    }

    /// `machine` is in maintenance (from the files or at run time).
    pub(crate) fn in_maintenance(&self, machine: &str) -> bool {
        self.maintenance.holds(&self.config.maintenance, machine)
    }

    pub(crate) fn wake(&mut self, key: WakeKey) {
        self.links.wake(key);
    }

    /// A run in flight.
    pub(crate) fn run(&self, run: RunId) -> Option<&ActiveRun> {
        self.flight.get(run)
    }

    pub(crate) fn run_mut(&mut self, run: RunId) -> Option<&mut ActiveRun> {
        self.flight.get_mut(run)
    }

    /// The runs in flight, in run id order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = &ActiveRun> {
        self.flight.iter()
    }

    /// Whether `run` is in flight here.
    pub(crate) fn in_flight(&self, run: RunId) -> bool {
        self.flight.get(run).is_some()
    }

    /// How many runs are in flight here.
    pub(crate) fn runs_in_flight(&self) -> usize {
        self.flight.len()
    }

    /// A recorded run is in flight from now on.
    pub(crate) fn insert_run(&mut self, active: ActiveRun) {
        self.flight.insert(active);
    }

    /// A run ends: it is no longer in flight.
    pub(crate) fn remove_run(&mut self, run: RunId) -> Option<ActiveRun> {
        self.storage.run_gone(run);
        self.flight.remove(run)
    }

    /// A target of a run in flight.
    pub(crate) fn target(&self, run: RunId, machine: &str) -> Option<&Target> {
        self.flight.get(run).and_then(|r| r.target(machine))
    }

    pub(crate) fn target_mut(&mut self, run: RunId, machine: &str) -> Option<&mut Target> {
        self.flight.get_mut(run).and_then(|r| r.target_mut(machine))
    }

    /// Wake the Workflows waiting for a place (`throttle.rs`), when a cap is set.
    pub(crate) fn wake_capacity(&mut self) {
        let s = &self.config.saltpeter;
        if s.max_running_per_machine.is_set() || s.max_runs_in_flight.is_some() {
            self.wake(WakeKey::Event(WakeEvent::Capacity));
        }
    }

    /// The wake event of everything that changes a run.
    pub(crate) fn run_event(run: RunId) -> WakeEvent {
        WakeEvent::RunChanged(run)
    }

    /// A run ended and its end is recorded: its end listeners hear of it (the dispatch,
    /// `Message::RunEnded`: the jobs chained to it start, its waiters are answered, its
    /// followers and watchers told, the views count it). (The run Workflow calls this.)
    pub(crate) fn run_ended(&mut self, active: &ActiveRun, state: RunState) {
        self.post(Message::RunEnded(FinishedRun {
            run: active.id(),
            job: active.job().name.clone(),
            state,
            slot: active.slot(),
            trigger: active.trigger(),
            targets: active.targets().iter().map(|(m, t)| t.record(m)).collect(),
            waiters: active.waiters().to_vec(),
        }));
    }

    pub(crate) fn wake_run(&mut self, run: RunId) {
        self.wake(WakeKey::Event(Main::run_event(run)));
        // A target of it may have ended: runs waiting for a place look again.
        self.wake_capacity();
        // The views look again (`Message::RunChanged`).
        self.post(Message::RunChanged(run));
    }
    /// Do what a part asked for, in order: db calls with their replies turned into
    /// messages, answers to admin calls, events, messages for the loop and for the hub.
    pub(crate) fn perform(&mut self, out: Out) {
        for cmd in out.into_cmds() {
            match cmd {
                Cmd::Db { req, then, due } => {
                    let wait = match then {
                        Then::Write(what) => DbWait::write(what),
                        Then::Tell(to) => DbWait::then(move |core, _, result| {
                            core.post(to(result));
                        }),
                    };
                    self.db_call_due(req, wait, due);
                }
                Cmd::Answer(call, resp) => self.links.reply_hub(call, HubReply::Admin(resp)),
                Cmd::Event(e) => self.event(
                    e.kind,
                    e.job.as_deref(),
                    e.run,
                    e.machine.as_deref(),
                    e.message,
                ),
                Cmd::Post(msg) => self.post(msg),
                Cmd::Blocking { req, local, tell } => {
                    let id = if local {
                        self.local_blocking_call(req)
                    } else {
                        self.blocking_call(req)
                    };
                    // Answered at once when blocking could not be reached: the reply
                    // waits in the links and goes to `tell` now.
                    if let Some(msg) = self.links.tell_blocking(id, tell) {
                        self.post(msg);
                    }
                }
                Cmd::Hub(msg) => self.links.tell_hub(msg),
            }
        }
    }

    /// A message for the loop, drained after the event being handled (`dispatch.rs`).
    pub(crate) fn post(&mut self, msg: Message) {
        self.inbox.push_back(msg);
    }

    pub(crate) fn db_call(&mut self, req: DbRequest, wait: DbWait) -> CallId {
        self.db_call_due(req, wait, Due::Soon)
    }

    /// A db call whose answer nothing needs before `due` (`Links::db_call`); answered at
    /// once with the error when db cannot be reached.
    pub(crate) fn db_call_due(&mut self, req: DbRequest, wait: DbWait, due: Due) -> CallId {
        let (id, unsent) = self.links.db_call(req, wait, due);
        if let Some(wait) = unsent {
            self.db_answer(id, wait, Err(CallError::PeerGone(Role::Db)));
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
                    self.flight.orphans_mut().storage_back(Instant::now());
                    let again = format!(
                        "the database stores again after {:.1} s ({})",
                        back.lasted.as_secs_f64(),
                        back.why
                    );
                    log::info!("{again}");
                    self.event("storage_recovered", None, None, None, again);
                }
            }
            _ => {}
        }
        wait.answer(self, id, result);
    }

    /// A call to blocking, or, with several masters on one database, to the blocking of
    /// the servers whose masters reach its minions (`masters`): one reply under `id`
    /// either way.
    pub(crate) fn blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self.links.start_blocking_call();
        let ping_timeout_s = self.config.saltpeter.ping_timeout_s;
        match self
            .delegation
            .route(id, &req, self.ha.server(), self.ha.shared(), ping_timeout_s)
        {
            None => self.post_blocking(id, req),
            Some(spread) => self.perform(spread),
        }
        id
    }

    /// A call to this server's own blocking, never spread over other servers.
    pub(crate) fn local_blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self.links.start_blocking_call();
        self.post_blocking(id, req);
        id
    }

    fn post_blocking(&mut self, id: CallId, req: BlockingRequest) {
        if !self.links.post_blocking(id, req) {
            self.blocking_answered(id, Err(CallError::PeerGone(Role::Blocking)));
        }
    }

    /// A blocking reply (or why there is none) for call `id`, for its caller: a message
    /// when a part asked (`Cmd::Blocking`; the parts of a Salt call spread over several
    /// servers, and the calls made for another server, among them), else kept for its
    /// Workflow step and woken. A call spread over servers that ends this way (its
    /// deadline, blocking lost) drops its parts.
    pub(crate) fn blocking_answered(
        &mut self,
        id: CallId,
        result: Result<BlockingReply, CallError>,
    ) {
        self.delegation.ended(id, &result);
        if let Some(msg) = self.links.blocking_reply(id, result) {
            self.post(msg);
        }
    }

    /// The merged answer of the Salt call `call` spread over several servers, once every
    /// part answered: to its caller as any blocking reply, unless it ended meanwhile.
    pub(crate) fn blocking_merged(
        &mut self,
        call: CallId,
        result: Result<BlockingReply, CallError>,
    ) {
        if self.links.finish_blocking_call(call)
            && let Some(msg) = self.links.blocking_reply(call, result)
        {
            self.post(msg);
        }
    }

    /// Record an event in the audit trail. Its strings are bounded ([`EVENT_NAME_MAX`],
    /// [`EVENT_MESSAGE_MAX`]): a machine id or message can come from a peer, and a row
    /// stays until it ages out.
    pub(crate) fn event(
        &mut self,
        kind: &str,
        job: Option<&str>,
        run: Option<RunId>,
        machine: Option<&str>,
        message: String,
    ) {
        self.db_call(
            DbRequest::RecordEvent(NewEvent {
                at: Utc::now().timestamp_millis(),
                kind: kind.to_string(),
                job: job.map(|j| cut(j, EVENT_NAME_MAX)),
                run,
                machine: machine.map(|m| cut(m, EVENT_NAME_MAX)),
                message: cut(
                    &match self.actor.name() {
                        Some(who) => format!("{message} (by {who})"),
                        None => message,
                    },
                    EVENT_MESSAGE_MAX,
                ),
                uid: self.actor.uid(),
            }),
            DbWait::write("an event"),
        );
    }

    /// How soon db must store a write of `run` that nothing waits for
    /// ([`ActiveRun::write_due`](crate::roles::main::run::active::ActiveRun::write_due)).
    pub(crate) fn write_due(&self, run: RunId) -> Due {
        self.run(run).map_or(Due::Soon, |r| r.write_due(now_ms()))
    }

    /// Whether a run of `job` is in flight or about to start.
    pub(crate) fn job_busy(&self, job: &str) -> bool {
        self.job_busy_besides(job, None)
    }

    /// Whether a run of `job` other than `except` is going (the overlap rule): one in
    /// flight that is not a pre-staged run still waiting for its slot, or one queued or
    /// being recorded.
    pub(crate) fn job_busy_besides(&self, job: &str, except: Option<RunId>) -> bool {
        let runs = self
            .runs()
            .filter(|r| r.job().name == job)
            .map(|r| rules::RunView {
                id: r.id(),
                prestaged: r.is_prestaged(),
                go_sent: r.go_sent(),
            });
        rules::job_busy(self.flight.busy_count(job), runs, except)
    }

    /// Queue a run; until it is recorded it counts as busy for the overlap rule (a
    /// pre-staged run counts only once it has gone, see `job_busy_besides`).
    pub(crate) fn queue_run(&mut self, req: RunRequest) {
        self.flight.queue_start(req);
    }

    /// Resume the Workflow of a recovered run.
    fn recover_run(&mut self, req: RunRequest, run: u64, batches: Vec<Vec<String>>) {
        let grace = std::time::Duration::from_secs(self.config.saltpeter.recovery_grace_s);
        let reconnect_until = Instant::now() + grace;
        self.flight.queue_recovery(RecoveredRun {
            req,
            id: run,
            batches,
            reconnect_until,
        });
    }
}
