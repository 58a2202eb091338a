//! Main's state, below every part that changes it: the process state (`Main`) with each
//! part's share, the loop's state (`MainRole`), the links' (`links`). It names none of
//! main's behaviour.

pub(super) mod active;
pub(super) mod links;
pub(crate) mod liveness;
pub(super) mod run;
pub(crate) mod storage;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::config::LoadedConfig;
use crate::evloop::Ctx;
use crate::evloop::timers::TimerId;
use crate::ipc::rpc::{CallError, CallId};
use crate::roles::main::fleet::{Fleet, Launcher};
use crate::roles::main::jobctl::JobCtl;
use crate::roles::main::maintenance::Maintenance;
use crate::roles::main::notify::Notifier;
use crate::roles::main::orphans::Orphans;
use crate::roles::main::rounds::Rounds;
use crate::roles::main::rules::scheduler::Scheduler;
use crate::roles::main::rules::target::Target;
use crate::roles::main::rules::tokens::Secret;
use crate::roles::main::views::Views;
use crate::wire::db::DbReply;
use crate::wire::link::ProcessInfo;
use crate::wire::records::RunId;
use crate::workflow::{Registry, WakeEvent, WakeKey};
use active::ActiveRun;
use run::{RecoveredRun, RunRequest};

pub(crate) use links::HubOutbox;
pub(crate) use run::JobRef;

/// The links as main keeps them.
pub(super) type Links = links::Links<Main>;

/// What to do with a db reply (or its failure): a continuation of the part that made the
/// call. Timeouts and a lost link call it with the error.
pub(super) type DbWait = links::OnReply<Main>;

/// Blocking call ids live in their own range so they never collide with db call ids in
/// the Workflow registry's wake keys.
pub(super) const BLOCKING_CALL_BASE: u64 = 1 << 40;
pub(super) const DB_TIMEOUT: Duration = Duration::from_secs(60);

/// How long main waits for a db call: [`DB_TIMEOUT`], or `SP_DB_TIMEOUT_S` from the
/// environment (for the tests that stall db past it; read once).
pub(super) fn db_timeout() -> Duration {
    static TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        std::env::var("SP_DB_TIMEOUT_S")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(DB_TIMEOUT, Duration::from_secs)
    })
}
pub(super) const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long shutdown waits for running Workflows.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// A Workflow waiting this long on nothing live is reported.
pub(super) const STALL_THRESHOLD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
pub(super) enum Peer {
    Hub,
    Db,
    Blocking,
}

/// Process state handed to handlers and to Workflow steps.
pub(crate) struct Main {
    /// The links to supervisor, hub, db and blocking, and the calls in flight on them.
    pub links: Links,
    pub config: LoadedConfig,
    pub secret: Secret,
    /// Runs in flight.
    pub flight: Flight,
    /// Wrapper connections and the target each serves; refused hellos (`sessions/`).
    pub(super) sessions: crate::roles::main::sessions::Sessions,
    pub(super) scheduler: Scheduler,
    /// This daemon: its processes, start time and ports.
    pub daemon: DaemonInfo,
    /// The wrapper URL and the pre-staging lead (`fleet/launcher.rs`).
    pub launcher: Launcher,
    /// Which wrapper build each minion has; deployments in flight (`fleet/`).
    pub fleet: Fleet,
    /// Salt launches coalesced per round (`rounds/`).
    pub(super) rounds: Rounds,
    /// Whether the database stores, and what waits for it to store again.
    pub storage: storage::Storage,
    /// When a wrapper's silence may be judged (stalls of main or the hub do not count).
    pub liveness: liveness::Liveness,
    /// Who is behind the request being handled, for audit events.
    pub actor: Actor,
    /// What operators watch: streaming admin calls, the dashboard's views, `/metrics`, a
    /// standby's mirror of the leader's runs.
    pub(super) views: Views,
    /// Maintenance set with `saltpeterctl maintenance` (persisted in db).
    pub(super) maintenance: Maintenance,
    /// Messages for the loop (`messages.rs`), drained in one match (`dispatch.rs`).
    pub(super) inbox: std::collections::VecDeque<crate::roles::main::messages::Message>,
    /// What start-up has loaded from db so far (`lifecycle/boot.rs`).
    pub(super) boot: crate::roles::main::lifecycle::Boot,
    /// Configuration reloads in flight and asked for (`lifecycle/reload.rs`).
    pub(super) reloads: crate::roles::main::lifecycle::Reloads,
    /// Notifications decided, queued and in flight.
    pub(super) notify: Notifier,
    /// Paused and skipping jobs, slots deferred by maintenance windows.
    pub(super) jobctl: JobCtl,
    /// Leader or standby among the servers sharing the database (`lifecycle/ha.rs`).
    pub(super) ha: crate::roles::main::lifecycle::Ha,
    /// Salt calls spread over the servers' masters (several masters, one database).
    pub(super) delegation: crate::roles::main::masters::Delegation,
}

/// Runs in flight, as main keeps them.
#[derive(Default)]
pub(crate) struct Flight {
    runs: BTreeMap<RunId, ActiveRun>,
    /// Runs queued or being recorded, per job (the overlap rule; recorded runs are in
    /// `runs`).
    pub(super) busy_jobs: HashMap<String, usize>,
    /// Runs to start, queued by handlers that cannot reach the registry.
    pub(super) to_start: Vec<RunRequest>,
    /// Recovered runs whose Workflows are to start.
    pub(super) to_recover: Vec<RecoveredRun>,
    /// Runs in flight are being loaded: no hello is vetted, no run started.
    pub recovering: bool,
    /// The recovery answer, handed to the loop (it needs the registry).
    pub(super) recovery_reply: Option<Result<DbReply, CallError>>,
    /// New runs are not started once shutdown began.
    pub stopping: bool,
    /// The liveness check is armed (only while targets are picked up).
    pub(super) liveness_armed: bool,
    /// Runs in flight in the database that nobody here drives (`orphans/`).
    pub orphans: Orphans,
}

/// This daemon as operators see it.
#[derive(Default)]
pub(crate) struct DaemonInfo {
    pub(super) processes: Vec<ProcessInfo>,
    pub(super) started_at: i64,
    pub wrapper_port: u16,
    /// The HTTP API's port (0: not served).
    pub api_port: u16,
}

/// Who is behind the request being handled: an admin socket peer's uid, or an API
/// identity (`api:NAME`).
#[derive(Default)]
pub(crate) struct Actor {
    pub uid: Option<u32>,
    pub name: Option<String>,
}

/// The loop state: the process state and the Workflow registry side by side.
pub(super) struct MainRole {
    pub(super) core: Main,
    pub(super) workflows: Registry<Main>,
    pub(super) schedule_timer: Option<TimerId>,
    pub(super) workflow_timer: Option<(TimerId, Instant)>,
    /// Fires at the earliest call deadline.
    pub(super) call_timer: Option<(TimerId, Instant)>,
    /// What the loop does for the parts (installed by `main_loop`, above them).
    pub(super) hooks: LoopHooks,
}

/// A role handler of the loop.
pub(super) type RoleFn = fn(&mut MainRole, &mut Ctx<MainRole>);

/// What the loop does for the parts: a part that changed state outside a turn's event
/// pumps (wakes Workflows, starts queued runs), and one that changed what is due
/// re-arms the schedule timer.
pub(super) struct LoopHooks {
    pub pump: RoleFn,
    pub arm_schedule: RoleFn,
}

impl MainRole {
    /// Hand what changed to the Workflows and start what is queued (`main_loop::pump`).
    pub(super) fn pump(&mut self, ctx: &mut Ctx<MainRole>) {
        (self.hooks.pump)(self, ctx)
    }

    /// Arm the schedule timer at the earliest slot (`main_loop::arm_schedule`).
    pub(super) fn arm_schedule(&mut self, ctx: &mut Ctx<MainRole>) {
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
        self.flight.runs.get(&run)
    }

    pub(crate) fn run_mut(&mut self, run: RunId) -> Option<&mut ActiveRun> {
        self.flight.runs.get_mut(&run)
    }

    /// The runs in flight, in run id order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = &ActiveRun> {
        self.flight.runs.values()
    }

    /// Whether `run` is in flight here.
    pub(crate) fn in_flight(&self, run: RunId) -> bool {
        self.flight.runs.contains_key(&run)
    }

    /// How many runs are in flight here.
    pub(crate) fn runs_in_flight(&self) -> usize {
        self.flight.runs.len()
    }

    /// A recorded run is in flight from now on.
    pub(crate) fn insert_run(&mut self, active: ActiveRun) {
        self.flight.runs.insert(active.id, active);
    }

    /// A run ends: it is no longer in flight.
    pub(crate) fn remove_run(&mut self, run: RunId) -> Option<ActiveRun> {
        self.storage.run_gone(run);
        self.flight.runs.remove(&run)
    }

    /// A target of a run in flight.
    pub(crate) fn target(&self, run: RunId, machine: &str) -> Option<&Target> {
        self.flight
            .runs
            .get(&run)
            .and_then(|r| r.targets.get(machine))
    }

    pub(crate) fn target_mut(&mut self, run: RunId, machine: &str) -> Option<&mut Target> {
        self.flight
            .runs
            .get_mut(&run)
            .and_then(|r| r.targets.get_mut(machine))
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
        links::OnReply(Box::new(then))
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
