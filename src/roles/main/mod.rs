//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Outline:
//! 1. Start-up: load the configuration and the server secret, connect the links, plan the
//!    schedule, say `Ready`.
//! 2. The schedule timer fires at the earliest slot; each due slot becomes a run Workflow
//!    (`run`), or a recorded skip (overlap, missed).
//! 3. Wrapper sessions (`sessions`) arrive from the hub; main vets hellos, keeps the
//!    liveness clock, forwards output to db and acks only what db committed.
//! 4. Requests (`requests/`, one file per topic) from the admin socket, the HTTP API and
//!    `/ws` read and change the same state.
//!
//! Everything that changes a run emits a wake key; after each event the loop hands the
//! keys to the Workflow registry, which resumes the steps waiting on them. The registry
//! lives beside the state (`MainRole`), so steps get `&mut Main` without shared cells.

mod api_audit;
mod boot;
mod chains;
mod config_watch;
mod delivery_view;
mod deploy;
mod effects;
mod fleet;
mod ha;
mod heap;
mod history;
mod job_metrics;
mod jobctl;
mod joblog;
mod launcher;
mod links;
mod main_loop;
mod metrics;
mod mirror;
mod missed;
mod notify;
mod reload;
mod requests;

mod run;
mod run_rules;
#[cfg(test)]
mod run_rules_tests;
mod runs;
mod scheduler;
mod sessions;
mod suspend;
mod target;
mod throttle;
pub mod tokens;
mod ui;
mod welcome;
mod windows;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::{ControlLink, Controlled, Link};
use crate::config::{self, LoadedConfig};
use crate::evloop::Ctx;
use crate::evloop::timers::TimerId;
use crate::ipc::rpc::{CallError, CallId, Packet};
use crate::wire::db::{DbReply, DbToMain, MainToDb};
use crate::wire::link::{
    BlockingToMain, ConnId, ControlDown, HubAnswer, HubReply, HubRequest, MainToBlocking,
    MainToHub, ProcessInfo,
};
use crate::wire::records::{RunId, RunState};
use crate::workflow::{Registry, WakeEvent, WakeKey};
// Short paths for the rest of main: the live streams and the maintenance settings are
// kept with the requests that use them.
use requests::{live, maintenance};
use runs::ActiveRun;
use scheduler::Scheduler;
use tokens::Secret;

pub use links::DbWait;
pub use main_loop::run;
use main_loop::{arm_schedule, pump, stop_when_settled};

type HubLink = Link<Packet<MainToHub, HubReply>, Packet<HubRequest, HubAnswer>>;
type DbLink = Link<MainToDb, DbToMain>;
type BlockingLink = Link<MainToBlocking, BlockingToMain>;

/// Blocking call ids live in their own range so they never collide with db call ids in
/// the Workflow registry's wake keys.
const BLOCKING_CALL_BASE: u64 = 1 << 40;
const DB_TIMEOUT: Duration = Duration::from_secs(60);
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);
/// The database counts as storing again after this long without a refused write.
const DB_TROUBLE_CLEARS_AFTER: Duration = Duration::from_secs(10);
/// How long shutdown waits for running Workflows.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// A Workflow waiting this long on nothing live is reported.
const STALL_THRESHOLD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
enum Peer {
    Hub,
    Db,
    Blocking,
}

/// Process state handed to handlers and to Workflow steps.
pub struct Main {
    /// The links to supervisor, hub, db and blocking, and the calls in flight on them.
    pub links: links::Links,
    pub config: LoadedConfig,
    pub secret: Secret,
    /// Runs in flight and wrapper sessions.
    pub flight: Flight,
    scheduler: Scheduler,
    /// This daemon: its processes, start time and ports.
    pub daemon: DaemonInfo,
    /// The wrapper URL and the pre-staging lead.
    pub launcher: launcher::Launcher,
    /// Which wrapper build each minion has; deployments in flight.
    pub fleet: fleet::Fleet,
    /// Salt launches coalesced per round.
    pub rounds: run::rounds::Rounds,
    /// Whether the database stores.
    pub storage: Storage,
    /// Who is behind the request being handled, for audit events.
    pub actor: Actor,
    /// What operators watch: streaming admin calls, the dashboard's views and `/metrics`.
    pub views: Views,
    /// Maintenance set with `saltpeterctl maintenance` (persisted in db).
    pub runtime_maintenance: maintenance::RuntimeMaintenance,
    /// What start-up has loaded from db so far.
    boot: boot::Boot,
    /// Configuration reloads in flight and asked for.
    reloads: reload::Reloads,
    /// Notifications decided, queued and in flight.
    notify: notify::Notifier,
    /// Paused and skipping jobs, slots deferred by maintenance windows.
    pub jobctl: jobctl::JobCtl,
    /// Leader or standby among the servers sharing the database.
    pub ha: ha::Ha,
}

/// Runs in flight, as main keeps them, and the wrapper sessions bound to them.
#[derive(Default)]
pub struct Flight {
    pub runs: BTreeMap<RunId, ActiveRun>,
    /// Wrapper connections and the target each serves.
    pub sessions: HashMap<ConnId, (RunId, String)>,
    /// Refused hellos logged and recorded per peer address (a rate limit).
    pub refusals: welcome::Refusals,
    /// Runs queued or being recorded, per job (the overlap rule; recorded runs are in
    /// `runs`).
    busy_jobs: HashMap<String, usize>,
    /// Runs to start, queued by handlers that cannot reach the registry.
    to_start: Vec<run::RunRequest>,
    /// Workflows of recovered runs, to start.
    to_recover: Vec<crate::workflow::Workflow<run::RunEnv, Main>>,
    /// Runs in flight are being loaded: no hello is vetted, no run started.
    pub recovering: bool,
    /// The recovery answer, handed to the loop (it needs the registry).
    recovery_reply: Option<Result<DbReply, CallError>>,
    /// New runs are not started once shutdown began.
    pub stopping: bool,
    /// The liveness check is armed (only while targets are picked up).
    liveness_armed: bool,
    /// Runs in flight in the database that nobody here drives (`run::orphans`).
    pub orphans: run::orphans::Orphans,
}

/// This daemon as operators see it.
#[derive(Default)]
pub struct DaemonInfo {
    processes: Vec<ProcessInfo>,
    started_at: i64,
    pub wrapper_port: u16,
    /// The HTTP API's port (0: not served).
    pub api_port: u16,
}

/// Whether the database stores.
pub struct Storage {
    /// Why the database cannot store (a full disk or its cap); new runs are refused
    /// until output is stored again (wrappers keep resending it).
    pub db_trouble: Option<String>,
    /// When the database last refused a write.
    db_trouble_since: Instant,
}

/// Who is behind the request being handled: an admin socket peer's uid, or an API
/// identity (`api:NAME`).
#[derive(Default)]
pub struct Actor {
    pub uid: Option<u32>,
    pub name: Option<String>,
}

/// What operators watch.
#[derive(Default)]
pub struct Views {
    /// Admin calls that stream: output followers and run watchers.
    pub live: live::Live,
    /// The dashboard's live view and `/metrics`.
    pub ui: ui::UiState,
    /// On a standby: the leader's runs in flight, for the same views.
    pub mirror: mirror::Mirror,
}

/// The loop state: the process state and the Workflow registry side by side.
pub struct MainRole {
    core: Main,
    workflows: Registry<Main>,
    schedule_timer: Option<TimerId>,
    workflow_timer: Option<(TimerId, Instant)>,
    /// Fires at the earliest call deadline.
    call_timer: Option<(TimerId, Instant)>,
}

impl Main {
    /// A run ended and its end is recorded: whoever waits for it or follows it is told,
    /// and the jobs chained to it start. (The run Workflow calls this; the parts it
    /// notifies sit above it.)
    pub fn run_ended(&mut self, active: &ActiveRun, state: RunState) {
        for call in &active.waiters {
            // The stored record is the truth (ended time, state): read it back.
            requests::send_run(self, *call, active.id);
        }
        live::run_ended(self, active.id);
        chains::run_ended(self, &active.job.name, active.id, state);
    }

    /// A target of a run in flight.
    pub fn target(&self, run: RunId, machine: &str) -> Option<&target::Target> {
        self.flight
            .runs
            .get(&run)
            .and_then(|r| r.targets.get(machine))
    }

    pub fn target_mut(&mut self, run: RunId, machine: &str) -> Option<&mut target::Target> {
        self.flight
            .runs
            .get_mut(&run)
            .and_then(|r| r.targets.get_mut(machine))
    }

    /// Wake the Workflows waiting for a place (`throttle.rs`), when a cap is set.
    pub fn wake_capacity(&mut self) {
        let s = &self.config.saltpeter;
        if s.max_running_per_machine.is_set() || s.max_runs_in_flight.is_some() {
            self.wake(WakeKey::Event(WakeEvent::Capacity));
        }
    }

    /// The wake event of everything that changes a run.
    pub fn run_event(run: RunId) -> WakeEvent {
        WakeEvent::RunChanged(run)
    }

    pub fn wake_run(&mut self, run: RunId) {
        self.wake(WakeKey::Event(Main::run_event(run)));
        // A target of it may have ended: runs waiting for a place look again.
        self.wake_capacity();
        live::run_changed(self, run);
        ui::run_changed(self, run);
    }
}

impl Controlled for MainRole {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.core.links.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        match msg {
            ControlDown::Shutdown => {
                log::info!(
                    "shutting down; {} runs in flight continue on their targets",
                    self.core.flight.runs.len()
                );
                self.core.flight.stopping = true;
                let deadline = Instant::now() + SHUTDOWN_GRACE;
                stop_when_settled(self, ctx, deadline);
            }
            ControlDown::Stopping => {
                log::info!("an ordered stop began: nothing new is launched");
                self.core.flight.stopping = true;
                pump(self, ctx);
            }
            ControlDown::Reload => {
                reload::request(&mut self.core, None);
                pump(self, ctx);
            }
            ControlDown::Processes {
                started_at,
                processes,
                wrapper_port,
                api_port,
            } => {
                self.core.daemon.started_at = started_at;
                self.core.daemon.processes = processes;
                self.core.daemon.wrapper_port = wrapper_port;
                self.core.daemon.api_port = api_port;
            }
        }
    }
}

/// Shared handle to a job definition inside runs.
pub type JobRef = Arc<config::Job>;
