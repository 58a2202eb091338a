//! Main's shell: the one place that holds `Main` (a struct of the parts, its fields
//! private to this folder) and acts on the world for the parts. The parts (`fleet/`,
//! `maintenance/`, `notify/`, `run/`, `views/`, ...) keep their own state and return what
//! should happen (`messages::Out`); what is here performs it:
//! - the loop (`main_loop`) and its one match over the parts' messages (`dispatch`);
//! - the commands a part returns (`perform`), the links to hub, db and blocking and the
//!   calls in flight on them (`links`, `links_state`);
//! - the run Workflow (`run/`): the steps that drive a run's targets (`run/target/`, the
//!   pure core) through db, blocking and the wrappers;
//! - the admin requests (`requests/`, one file per topic), the wrapper sessions
//!   (`wrappers/`), the firing of slots and chains (`firing/`);
//! - what several parts are read for together: launch settings (`launcher`), capacity
//!   (`throttle`), the job log (`joblog`), retention and events (`history`), what the
//!   views are handed (`views`), the launch rounds (`rounds`).
//!
//! No part names this folder: every arrow points from here to a part.

mod actor;
mod control;
mod daemon_info;
pub(crate) mod dispatch;
pub(crate) mod firing;
pub(crate) mod history;
pub(crate) mod joblog;
pub(crate) mod launcher;
pub(crate) mod links;
pub(crate) mod links_state;
pub(crate) mod main_loop;
pub(crate) mod perform;
pub(crate) mod requests;
pub(crate) mod rounds;
pub(crate) mod run;
pub(crate) mod throttle;
pub(crate) mod views;
pub(crate) mod wrappers;

use std::time::{Duration, Instant};

use crate::config::LoadedConfig;
use crate::evloop::Ctx;
use crate::evloop::timers::TimerId;
use crate::ipc::rpc::{CallError, CallId};
use crate::roles::main::fleet::{Fleet, Launcher};
use crate::roles::main::jobctl::JobCtl;
use crate::roles::main::maintenance::Maintenance;
use crate::roles::main::messages::{FinishedRun, Message};
use crate::roles::main::notify::Notifier;
use crate::roles::main::rounds::Rounds;
use crate::roles::main::rules::scheduler::Scheduler;
use crate::roles::main::rules::tokens::Secret;
use crate::roles::main::run::Flight;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::target::Target;
use crate::roles::main::views::Views;
use crate::wire::db::DbReply;
use crate::wire::records::{RunId, RunState};
use crate::workflow::{Registry, WakeEvent, WakeKey};

pub(crate) use crate::roles::main::run::request::JobRef;
pub(crate) use actor::Actor;
pub(crate) use daemon_info::DaemonInfo;
pub(crate) use links_state::HubOutbox;

/// The links as main keeps them.
pub(crate) type Links = links_state::Links<Main>;

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub(crate) type DbWait = links_state::OnReply<Main>;

/// Blocking call ids live in their own range so they never collide with db call ids in
/// the Workflow registry's wake keys.
pub(crate) const BLOCKING_CALL_BASE: u64 = 1 << 40;
pub(crate) const DB_TIMEOUT: Duration = Duration::from_secs(60);

/// How long main waits for a db call: [`DB_TIMEOUT`], or `SP_DB_TIMEOUT_S` from the
/// environment (for the tests that stall db past it; read once).
pub(crate) fn db_timeout() -> Duration {
    static TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        std::env::var("SP_DB_TIMEOUT_S")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(DB_TIMEOUT, Duration::from_secs)
    })
}
pub(crate) const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);
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
    pub(crate) core: Main,
    pub(crate) workflows: Registry<Main>,
    pub(crate) schedule_timer: Option<TimerId>,
    pub(crate) workflow_timer: Option<(TimerId, Instant)>,
    /// Fires at the earliest call deadline.
    pub(crate) call_timer: Option<(TimerId, Instant)>,
    /// What the loop does for the parts (installed by `main_loop`, above them).
    pub(crate) hooks: LoopHooks,
}

/// A role handler of the loop.
pub(crate) type RoleFn = fn(&mut MainRole, &mut Ctx<MainRole>);

/// What the loop does for the parts: a part that changed state outside a turn's event
/// pumps (wakes Workflows, starts queued runs), and one that changed what is due
/// re-arms the schedule timer.
pub(crate) struct LoopHooks {
    pub pump: RoleFn,
    pub arm_schedule: RoleFn,
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
        self.links.wakes.push(key);
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
}

impl DbWait {
    /// The reply goes to `then`.
    pub(crate) fn then(
        then: impl FnOnce(&mut Main, CallId, Result<DbReply, CallError>) + 'static,
    ) -> Self {
        links_state::OnReply(Box::new(then))
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
        Self::then(|core, id, result| {
            core.links.db_replies.insert(id, result);
            core.wake(WakeKey::Call(id));
        })
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

impl Main {
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
}
