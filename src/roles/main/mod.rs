//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Outline:
//! 1. Start-up: load the configuration and the server secret, connect the links, plan the
//!    schedule, say `Ready`.
//! 2. The schedule timer fires at the earliest slot; each due slot becomes a run Workflow
//!    (`run`), or a recorded skip (overlap, missed).
//! 3. Wrapper sessions (`sessions`) arrive from the hub; main vets hellos, keeps the
//!    liveness clock, forwards output to db and acks only what db committed.
//! 4. Admin requests (`admin`) read and change the same state.
//!
//! Everything that changes a run emits a wake key; after each event the loop hands the
//! keys to the Workflow registry, which resumes the steps waiting on them. The registry
//! lives beside the state (`MainRole`), so steps get `&mut Main` without shared cells.

mod admin;
mod admin_more;
mod api;
mod boot;
mod chains;
mod deploy;
mod effects;
mod history;
mod jobctl;
mod joblog;
mod live;
mod maintenance;
mod metrics;
mod missed;
mod notify;
mod reload;
mod retry;
mod run;
mod run_rules;
#[cfg(test)]
mod run_rules_tests;
mod runs;
mod scheduler;
mod sessions;
mod target;
#[cfg(test)]
mod target_tests;
pub mod tokens;
mod ui;
mod windows;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use mio::event::Event;

use super::{ControlLink, Controlled, Link, RoleArgs, RoleError, attach_control, open_link};
use crate::config::{self, LoadedConfig};
use crate::evloop::timers::TimerId;
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::Role;
use crate::ipc::rpc::{Call, CallError, CallId, Packet, PendingCalls};
use crate::wire::db::{DbNotice, DbReply, DbRequest, DbToMain, MainToDb};
use crate::wire::link::{
    BlockingReply, BlockingRequest, BlockingToMain, ConnId, ControlDown, HubAnswer, HubReply,
    HubRequest, MainToBlocking, MainToHub, ProcessInfo,
};
use crate::wire::records::RunId;
use crate::wire::wrapper::ServerMsg;
use crate::workflow::{Registry, WakeEvent, WakeKey};
use runs::ActiveRun;
use scheduler::Scheduler;
use tokens::Secret;

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
/// How often the configuration directory is scanned for changes (a `stat` per file): a
/// change is in effect within this plus the reload time, inside the 2 s promised.
const CONFIG_SCAN: Duration = Duration::from_secs(1);

/// What to do with a db reply.
#[derive(Debug, Clone)]
pub enum DbWait {
    /// A Workflow step waits on this call id.
    Step,
    /// An admin request of the hub's call id.
    Admin(CallId, admin::Pending),
    /// Output stored: ack it to the wrapper.
    Output { run: RunId, machine: String },
    /// A target's final state is recorded.
    TargetFinished { run: RunId, machine: String },
    /// A write nobody waits for; failures are logged.
    Write(&'static str),
    /// The runs in flight, loaded at start-up.
    Recovery,
    /// Retention applied to a job.
    Retention(String),
    /// A finished run looked up for a wrapper that comes back after being lost.
    Reconcile(CallId, Box<crate::wire::link::WrapperHello>),
    /// An admin request of `admin_more` or a follower of `live`.
    AdminMore(admin_more::Wait),
    /// The dashboard's live view (`ui`).
    Ui(ui::UiWait),
    /// An HTTP API request of the hub's call id (`api`).
    Api(CallId, api::ApiWait),
    /// One of the loads start-up waits for.
    Boot(boot::Load),
    /// Notifications (`notify`).
    Notify(notify::Wait),
    /// The job control state is saved; with the admin call to answer (`jobctl`).
    JobCtl(Option<CallId>, Option<String>),
}

#[derive(Debug, Clone, Copy)]
enum Peer {
    Hub,
    Db,
    Blocking,
}

/// Process state handed to handlers and to Workflow steps.
pub struct Main {
    control: ControlLink,
    hub: HubLink,
    db: DbLink,
    blocking: BlockingLink,
    db_calls: PendingCalls<DbWait>,
    blocking_calls: PendingCalls<()>,
    /// Replies for Workflow steps, taken by the step that waits on the call id.
    pub db_replies: HashMap<CallId, Result<DbReply, CallError>>,
    pub blocking_replies: HashMap<CallId, Result<BlockingReply, CallError>>,
    /// Wake keys emitted since the registry last saw them.
    wakes: Vec<WakeKey>,
    pub config: LoadedConfig,
    pub secret: Secret,
    pub runs: BTreeMap<RunId, ActiveRun>,
    pub sessions: HashMap<ConnId, (RunId, String)>,
    scheduler: Scheduler,
    processes: Vec<ProcessInfo>,
    started_at: i64,
    pub wrapper_port: u16,
    /// New runs are not started once shutdown began.
    pub stopping: bool,
    /// Runs to start, queued by handlers that cannot reach the registry.
    to_start: Vec<run::RunRequest>,
    /// Workflows of recovered runs, to start.
    to_recover: Vec<crate::workflow::Workflow<run::RunEnv, Main>>,
    /// Runs in flight are being loaded: no hello is vetted, no run started.
    pub recovering: bool,
    /// The recovery answer, handed to the loop (it needs the registry).
    recovery_reply: Option<Result<DbReply, CallError>>,
    /// Runs queued or being recorded, per job (the overlap rule; recorded runs are in
    /// `runs`).
    busy_jobs: HashMap<String, usize>,
    /// Minions known to have the wrapper: (path, hash) deployed there.
    pub deployed: HashMap<String, (String, String)>,
    /// Hash of this build's wrapper, once a deployment reported it.
    pub wrapper_hash: Option<String>,
    /// Measured salt launch latency (the pre-staging lead follows it).
    launch_latency: Duration,
    /// Why the database cannot store (a full disk or its cap); new runs are refused
    /// until output is stored again (wrappers keep resending it).
    pub db_trouble: Option<String>,
    /// When the database last refused a write.
    db_trouble_since: Instant,
    liveness_armed: bool,
    /// The uid of the operator whose admin request is being handled (audit events).
    pub actor: Option<u32>,
    /// Admin calls that stream: output followers and run watchers.
    pub live: live::Live,
    /// The dashboard's live view and `/metrics`.
    pub ui: ui::UiState,
    /// The HTTP API's port (0: not served).
    pub api_port: u16,
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
    /// Reasons of chained runs about to be recorded.
    chains: chains::Chains,
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
    fn wake(&mut self, key: WakeKey) {
        self.wakes.push(key);
    }

    /// A target of a run in flight.
    pub fn target(&self, run: RunId, machine: &str) -> Option<&target::Target> {
        self.runs.get(&run).and_then(|r| r.targets.get(machine))
    }

    pub fn target_mut(&mut self, run: RunId, machine: &str) -> Option<&mut target::Target> {
        self.runs
            .get_mut(&run)
            .and_then(|r| r.targets.get_mut(machine))
    }

    /// The wake event of everything that changes a run.
    pub fn run_event(run: RunId) -> WakeEvent {
        WakeEvent::RunChanged(run)
    }

    pub fn wake_run(&mut self, run: RunId) {
        self.wake(WakeKey::Event(Main::run_event(run)));
        live::run_changed(self, run);
        ui::run_changed(self, run);
    }

    pub fn db_call(&mut self, req: DbRequest, wait: DbWait) -> CallId {
        let id = self.db_calls.start(Instant::now(), DB_TIMEOUT, wait);
        if let Err(e) = self.db.send(&Packet::Call { id, req }) {
            log::error!("could not reach db: {e}");
            if let Some(wait) = self.db_calls.finish(id) {
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
        self.db_replies.remove(&id).map(C::take)
    }

    /// The typed reply to a blocking call, once it arrived.
    pub fn take_blocking_reply<C: Call<BlockingReply>>(
        &mut self,
        id: CallId,
    ) -> Option<Result<C::Reply, CallError>> {
        self.blocking_replies.remove(&id).map(C::take)
    }

    pub fn blocking_call(&mut self, req: BlockingRequest) -> CallId {
        let id = self
            .blocking_calls
            .start(Instant::now(), LAUNCH_TIMEOUT, ());
        if let Err(e) = self.blocking.send(&Packet::Call { id, req }) {
            log::error!("could not reach blocking: {e}");
            self.blocking_calls.finish(id);
            self.blocking_replies
                .insert(id, Err(CallError::PeerGone(Role::Blocking)));
            self.wake(WakeKey::Call(id));
        }
        id
    }

    pub fn to_hub(&mut self, msg: MainToHub) {
        if let Err(e) = self.hub.send(&Packet::Cast(msg)) {
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
        if let Err(e) = self.hub.send(&Packet::Reply {
            id,
            result: Ok(reply),
        }) {
            log::error!("could not answer hub: {e}");
        }
    }

    /// Route a db reply (or its failure) to whoever waits for it.
    fn db_answer(&mut self, id: CallId, wait: DbWait, result: Result<DbReply, CallError>) {
        match &result {
            Err(CallError::Remote(crate::ipc::rpc::RemoteError::DiskFull(why))) => {
                if self.db_trouble.is_none() {
                    log::error!(
                        "the database cannot store more ({why}); no new run starts until it can"
                    );
                }
                self.db_trouble = Some(why.clone());
                self.db_trouble_since = Instant::now();
            }
            // Output, the bulk of what is written, stored again well after the last
            // failure: the trouble is over.
            Ok(DbReply::OutputStored { .. })
                if self.db_trouble.is_some()
                    && self.db_trouble_since.elapsed() > DB_TROUBLE_CLEARS_AFTER =>
            {
                self.db_trouble = None;
                log::info!("the database stores again; runs start again");
            }
            _ => {}
        }
        match wait {
            DbWait::Step => {
                self.db_replies.insert(id, result);
                self.wake(WakeKey::Call(id));
            }
            DbWait::Admin(call, pending) => admin::answer(self, call, pending, result),
            DbWait::Output { run, machine } => {
                let stored = result.is_ok();
                sessions::output_stored(self, run, &machine, result);
                if stored {
                    live::output_arrived(self, run, &machine);
                }
            }
            DbWait::TargetFinished { run, machine } => {
                sessions::target_recorded(self, run, &machine, result)
            }
            DbWait::Write(what) => {
                if let Err(e) = result {
                    log::error!("could not record {what}: {e}");
                }
            }
            DbWait::Recovery => self.recovery_reply = Some(result),
            DbWait::Retention(job) => self.pruned(&job, result),
            DbWait::Reconcile(call, hello) => sessions::reconcile(self, call, *hello, result),
            DbWait::AdminMore(wait) => admin_more::answer(self, wait, result),
            DbWait::Ui(wait) => ui::db_answer(self, wait, result),
            DbWait::Api(call, wait) => api::answer(self, call, wait, result),
            DbWait::Boot(load) => boot::answer(self, load, result),
            DbWait::Notify(wait) => notify::db_answer(self, wait, result),
            DbWait::JobCtl(call, note) => jobctl::saved(self, call, note, result),
        }
    }

    /// URL the wrappers of `job` connect to.
    pub fn wrapper_url(&self, job: &config::Job) -> String {
        let host = job
            .server_host
            .clone()
            .or_else(|| self.config.saltpeter.default_saltpeter_server_host.clone())
            .unwrap_or_else(|| match job.executor {
                config::Executor::Local => "127.0.0.1".to_string(),
                config::Executor::Salt => nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "localhost".to_string()),
            });
        // A host given with its port (a proxy or NAT in front of the daemon) is used as is.
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok())
            && host.matches(':').count() == 1;
        let authority = if has_port {
            host
        } else {
            format!("{host}:{}", self.wrapper_port)
        };
        format!("ws://{authority}{}", crate::wire::wrapper::WRAPPER_PATH)
    }

    /// How far ahead of its slot a run of `job` is launched: salt runs are pre-staged by
    /// twice the measured launch latency plus a second, within `prestage_cap`.
    pub fn prestage_lead(&self, job: &config::Job) -> chrono::Duration {
        self.prestage_lead_of(job.executor)
    }

    fn prestage_lead_of(&self, executor: config::Executor) -> chrono::Duration {
        let cap = Duration::from_secs(self.config.saltpeter.prestage_cap_s);
        if executor != config::Executor::Salt || cap.is_zero() {
            return chrono::Duration::zero();
        }
        let lead = (self.launch_latency * 2 + Duration::from_secs(1)).min(cap);
        chrono::Duration::from_std(lead).unwrap_or_else(|_| chrono::Duration::zero())
    }

    /// The leads of every job, for the scheduler (they depend only on the executor).
    pub fn leads(&self) -> scheduler::Leads {
        scheduler::Leads {
            salt: self.prestage_lead_of(config::Executor::Salt),
        }
    }

    /// Fold one measured launch (salt call to launched) into the latency estimate.
    pub fn record_launch_latency(&mut self, sample: Duration) {
        // Up at once (a late start is what pre-staging is there to prevent), down slowly.
        self.launch_latency = if sample > self.launch_latency {
            sample
        } else {
            (self.launch_latency * 3 + sample) / 4
        };
    }

    /// How blocking calls salt, from the current `saltpeter_config`.
    pub fn salt_settings(&self) -> crate::wire::link::SaltSettings {
        let sp = &self.config.saltpeter;
        crate::wire::link::SaltSettings {
            salt_bin: sp
                .salt_bin
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "salt".to_string()),
            config_dir: Some(sp.salt_config_dir.to_string_lossy().into_owned()),
            timeout_s: sp.ping_timeout_s,
            concurrency: sp.launch_concurrency,
        }
    }

    /// The wrapper binary for `job` on its targets.
    pub fn wrapper_path(&self, job: &config::Job) -> String {
        if let Some(path) = &job.wrapper_path {
            return path.clone();
        }
        if job.executor == config::Executor::Local
            && let Ok(exe) = std::env::current_exe()
            && let Some(dir) = exe.parent()
        {
            let sibling: PathBuf = dir.join("saltpeter-wrapper");
            if sibling.exists() {
                return sibling.to_string_lossy().into_owned();
            }
        }
        "/usr/local/bin/saltpeter-wrapper".to_string()
    }
}

impl Controlled for MainRole {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.core.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        match msg {
            ControlDown::Shutdown => {
                log::info!(
                    "shutting down; {} runs in flight continue on their targets",
                    self.core.runs.len()
                );
                self.core.stopping = true;
                let deadline = Instant::now() + SHUTDOWN_GRACE;
                stop_when_settled(self, ctx, deadline);
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
                self.core.started_at = started_at;
                self.core.processes = processes;
                self.core.wrapper_port = wrapper_port;
                self.core.api_port = api_port;
            }
        }
    }
}

/// Leave the loop once no Workflow is running, or when the grace period is over (runs in
/// flight then stay recorded as running; their wrappers carry on and are reattached on
/// the next start).
fn stop_when_settled(role: &mut MainRole, ctx: &mut Ctx<MainRole>, deadline: Instant) {
    if role.workflows.shutdown_complete(Instant::now(), deadline) {
        ctx.stop();
    } else {
        ctx.after(
            Duration::from_millis(100),
            move |role: &mut MainRole, ctx| stop_when_settled(role, ctx, deadline),
        );
    }
}

/// Report Workflows that wait on something nothing will deliver.
fn report_stalls(role: &mut MainRole, _ctx: &mut Ctx<MainRole>) {
    let core = &role.core;
    let pending = |key: &WakeKey| match key {
        WakeKey::Call(id) => {
            core.db_calls.get(*id).is_some()
                || core.blocking_calls.get(*id).is_some()
                || core.db_replies.contains_key(id)
                || core.blocking_replies.contains_key(id)
        }
        WakeKey::Event(WakeEvent::RunChanged(run)) => core.runs.contains_key(run),
        WakeKey::Timer(_) => true,
    };
    for stall in role
        .workflows
        .stalled(Instant::now(), STALL_THRESHOLD, pending)
    {
        log::warn!("stalled: {stall}");
    }
}

/// Set the timer for the earliest slot (no polling: the loop sleeps until then).
fn arm_schedule(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if let Some(timer) = role.schedule_timer.take() {
        ctx.cancel(timer);
    }
    if role.core.recovering {
        return; // armed when recovery is done
    }
    let core = &role.core;
    let slot = core.scheduler.earliest(&core.config.jobs, core.leads());
    // Deferred slots and pause ends wake the loop too (`jobctl`).
    let Some(at) = slot.into_iter().chain(core.jobctl.next_wake()).min() else {
        return;
    };
    let wait = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    role.schedule_timer = Some(ctx.at(Instant::now() + wait, on_schedule));
}

fn on_schedule(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    role.schedule_timer = None;
    let now = Utc::now();
    let core = &mut role.core;
    let leads = core.leads();
    let due = core.scheduler.take_due(now, &core.config.jobs, 100, leads);
    missed::fire_due(core, due, now);
    jobctl::tick(core, now);
    start_queued(role, ctx);
    arm_schedule(role, ctx);
}

/// Start the runs handlers queued, and resume Workflows on the wake keys emitted.
fn pump(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    reload::poll(role, ctx);
    notify::poll(&mut role.core);
    if let Some(reply) = role.core.recovery_reply.take() {
        run::recovery::recovered(role, ctx, reply);
    }
    boot::finish_when_ready(role, ctx);
    start_queued(role, ctx);
    let now = Instant::now();
    let mut rounds = 0;
    while !role.core.wakes.is_empty() && rounds < 1000 {
        rounds += 1;
        let wakes = std::mem::take(&mut role.core.wakes);
        for key in wakes {
            role.workflows.wake(&key, &mut role.core, now);
        }
        start_queued_inner(role);
    }
    for finished in role.workflows.drain_finished() {
        log::debug!("workflow {} ended: {:?}", finished.name, finished.outcome);
    }
    arm_workflow_timer(role, ctx);
    arm_liveness(role, ctx);
    arm_call_expiry(role, ctx);
    ui::flush(&mut role.core);
}

/// Keep one timer at the earliest deadline of the calls in flight (none when idle).
fn arm_call_expiry(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let next = [
        role.core.db_calls.next_deadline(),
        role.core.blocking_calls.next_deadline(),
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

fn start_queued(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    start_queued_inner(role);
    let _ = ctx;
}

fn start_queued_inner(role: &mut MainRole) {
    if role.core.recovering {
        return;
    }
    for workflow in std::mem::take(&mut role.core.to_recover) {
        let id = role
            .workflows
            .start(workflow, &mut role.core, Instant::now());
        log::debug!("resumed a recovered run as {id}");
    }
    let queued = std::mem::take(&mut role.core.to_start);
    for req in queued {
        if role.core.stopping {
            log::info!("not starting {}: shutting down", req.job.name);
            continue;
        }
        let workflow = run::workflow(req);
        role.workflows
            .start(workflow, &mut role.core, Instant::now());
    }
}

/// Keep one timer at the registry's earliest deadline.
fn arm_workflow_timer(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let next = role.workflows.next_deadline();
    match (role.workflow_timer, next) {
        (Some((_, at)), Some(next)) if at == next => {}
        (current, next) => {
            if let Some((timer, _)) = current {
                ctx.cancel(timer);
            }
            role.workflow_timer = next.map(|at| {
                let timer = ctx.at(at, |role: &mut MainRole, ctx| {
                    role.workflow_timer = None;
                    role.workflows.due_timers(&mut role.core, Instant::now());
                    pump(role, ctx);
                });
                (timer, at)
            });
        }
    }
}

/// While runs are in flight, check wrapper liveness every second.
fn arm_liveness(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if role.core.runs.is_empty() || role.core.liveness_armed {
        return;
    }
    role.core.liveness_armed = true;
    ctx.after(Duration::from_secs(1), |role: &mut MainRole, ctx| {
        role.core.liveness_armed = false;
        sessions::check_liveness(&mut role.core, Instant::now());
        pump(role, ctx);
    });
}

fn on_link(role: &mut MainRole, ctx: &mut Ctx<MainRole>, peer: Peer, event: &Event) -> Flow {
    let core = &mut role.core;
    let writable = event.is_writable();
    let result = match peer {
        Peer::Hub => {
            if writable {
                let _ = core.hub.on_writable();
            }
            core.hub.receive().map(|msgs| {
                for msg in msgs {
                    on_hub(role, ctx, msg);
                }
            })
        }
        Peer::Db => {
            if writable {
                let _ = core.db.on_writable();
            }
            core.db.receive().map(|msgs| {
                for msg in msgs {
                    match msg {
                        Packet::Reply { id, result } => match core.db_calls.finish(id) {
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
                let _ = core.blocking.on_writable();
            }
            core.blocking.receive().map(|msgs| {
                for msg in msgs {
                    match msg {
                        Packet::Reply { id, result } => {
                            if core.blocking_calls.finish(id).is_some() {
                                core.blocking_replies
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
                    for (id, wait, err) in core.db_calls.fail_all() {
                        core.db_answer(id, wait, Err(err));
                    }
                }
                Peer::Blocking => {
                    for (id, (), err) in core.blocking_calls.fail_all() {
                        core.blocking_replies.insert(id, Err(err));
                        core.wake(WakeKey::Call(id));
                    }
                }
                Peer::Hub => {}
            }
            pump(role, ctx);
            super::link_failed(ctx, &e)
        }
    }
}

fn on_hub(role: &mut MainRole, ctx: &mut Ctx<MainRole>, msg: Packet<HubRequest, HubAnswer>) {
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
fn expire_calls(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let now = Instant::now();
    let core = &mut role.core;
    for (id, wait, err) in core.db_calls.expire(now) {
        log::error!("db call {id}: {err}");
        core.db_answer(id, wait, Err(err));
    }
    for (id, (), err) in core.blocking_calls.expire(now) {
        log::error!("blocking call {id}: {err}");
        core.blocking_replies.insert(id, Err(err));
        core.wake(WakeKey::Call(id));
    }
    pump(role, ctx);
}

pub fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let now = Utc::now();
    let config = config::load_dir(&args.dirs.config, None, now)
        .map_err(|e| RoleError::BadStart(e.to_string()))?;
    for d in &config.diagnostics {
        log::warn!("{d}");
    }
    let secret = Secret::load_or_create(&args.dirs.secret())
        .map_err(|e| RoleError::BadStart(e.to_string()))?;
    let mut ev: EventLoop<MainRole> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let s = args.take_stream("hub")?;
    let (hub, _) = open_link(ev.ctx(), s, Role::Main, Role::Hub, Peer::Hub, on_link)?;
    let s = args.take_stream("db")?;
    let (db, _) = open_link(ev.ctx(), s, Role::Main, Role::Db, Peer::Db, on_link)?;
    let s = args.take_stream("blocking")?;
    let (blocking, _) = open_link(
        ev.ctx(),
        s,
        Role::Main,
        Role::Blocking,
        Peer::Blocking,
        on_link,
    )?;
    let mut scheduler = Scheduler::default();
    scheduler.plan(config.valid_jobs(), now);
    ev.ctx().every(CONFIG_SCAN, reload::watch_config);
    ev.ctx().every(Duration::from_secs(30), report_stalls);
    ev.ctx().every(Duration::from_secs(1), notify::tick);
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut role = MainRole {
        core: Main {
            control,
            hub,
            db,
            blocking,
            db_calls: PendingCalls::new(Role::Db),
            blocking_calls: PendingCalls::with_first_id(Role::Blocking, BLOCKING_CALL_BASE),
            db_replies: HashMap::new(),
            blocking_replies: HashMap::new(),
            wakes: Vec::new(),
            config,
            secret,
            runs: BTreeMap::new(),
            sessions: HashMap::new(),
            scheduler,
            processes: Vec::new(),
            started_at: now.timestamp_millis(),
            wrapper_port: 0,
            stopping: false,
            to_start: Vec::new(),
            to_recover: Vec::new(),
            recovering: false,
            recovery_reply: None,
            busy_jobs: HashMap::new(),
            deployed: HashMap::new(),
            wrapper_hash: None,
            launch_latency: Duration::from_secs(2),
            db_trouble: None,
            db_trouble_since: Instant::now(),
            liveness_armed: false,
            actor: None,
            live: live::Live::default(),
            ui: ui::UiState::default(),
            api_port: 0,
            runtime_maintenance: maintenance::RuntimeMaintenance::default(),
            boot: boot::Boot::default(),
            reloads: reload::Reloads::default(),
            notify: notify::Notifier::default(),
            jobctl: jobctl::JobCtl::default(),
            chains: chains::Chains::default(),
        },
        workflows: Registry::new(),
        schedule_timer: None,
        workflow_timer: None,
        call_timer: None,
    };
    boot::start(&mut role.core);
    run::recovery::start(&mut role.core);
    ui::start(&mut role.core);
    notify::start(&mut role.core);
    ev.run(&mut role).map_err(RoleError::setup("event loop"))?;
    Ok(0)
}

/// Shared handle to a job definition inside runs.
pub type JobRef = Arc<config::Job>;
