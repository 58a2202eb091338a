//! Main's event loop: start-up (`run`), the schedule timer, the pump that runs after
//! every event (wake keys to the registry, queued runs started, timers re-armed), the
//! liveness check, stall reports and the ordered stop.

use std::time::{Duration, Instant};

use chrono::Utc;

use mio::event::Event;

use super::run as run_flow;
use super::{LoopHooks, Main, MainRole, Peer, STALL_THRESHOLD};
use crate::config;
use crate::evloop::Flow;
use crate::evloop::{Ctx, EventLoop};
use crate::ipc::Role;
use crate::ipc::rpc::{CallError, Packet};
use crate::roles::common::{RoleArgs, RoleError, attach_control, open_link};
use crate::roles::main::fleet::launcher;
use crate::roles::main::masters;
use crate::roles::main::rules::scheduler::Scheduler;
use crate::roles::main::rules::tokens::Secret;
use crate::roles::main::shell::firing;
use crate::roles::main::shell::firing::missed;
use crate::roles::main::shell::requests;
use crate::roles::main::shell::wrappers::sessions;
use crate::wire::db::DbNotice;
use crate::wire::link::{HubAnswer, HubRequest};
use crate::wire::records::now_ms;
use crate::workflow::Registry;
use crate::workflow::{WakeEvent, WakeKey};

/// Leave the loop once no Workflow is running, or when the grace period is over (runs in
/// flight then stay recorded as running; their wrappers carry on and are reattached on
/// the next start).
pub(super) fn stop_when_settled(role: &mut MainRole, ctx: &mut Ctx<MainRole>, deadline: Instant) {
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
pub(super) fn report_stalls(role: &mut MainRole, _ctx: &mut Ctx<MainRole>) {
    let core = &role.core;
    let pending = |key: &WakeKey| match key {
        WakeKey::Call(id) => core.links.awaits(*id),
        WakeKey::Event(WakeEvent::RunChanged(run)) => core.in_flight(*run),
        WakeKey::Event(WakeEvent::Fleet) => core.fleet.busy(),
        // Runs in flight end, and with them the wait for a place.
        WakeKey::Event(WakeEvent::Capacity) => core.runs_in_flight() != 0,
    };
    for stall in role
        .workflows
        .stalled(Instant::now(), STALL_THRESHOLD, pending)
    {
        log::warn!("stalled: {stall}");
    }
}

/// Set the timer for the earliest slot (no polling: the loop sleeps until then).
pub(super) fn arm_schedule(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if let Some(timer) = role.schedule_timer.take() {
        ctx.cancel(timer);
    }
    if role.core.flight.is_recovering() || role.core.ha.holding() {
        return; // armed when recovery is done, or the leader lease confirmed again
    }
    let core = &role.core;
    let slot = core.scheduler.earliest(
        &core.config.jobs,
        &core.launcher.leads(&core.config.saltpeter),
    );
    // Deferred slots and pause ends wake the loop too (`jobctl`).
    let Some(at) = slot.into_iter().chain(core.jobctl.next_wake()).min() else {
        return;
    };
    let wait = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    role.schedule_timer = Some(ctx.at(Instant::now() + wait, on_schedule));
}

pub(super) fn on_schedule(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    role.schedule_timer = None;
    let now = Utc::now();
    let core = &mut role.core;
    let leads = core.launcher.leads(&core.config.saltpeter);
    let due = core.scheduler.take_due(now, &core.config.jobs, 100, &leads);
    missed::fire_due(core, due, now);
    firing::tick(core, now);
    start_queued(role, ctx);
    arm_schedule(role, ctx);
}

/// Start the runs handlers queued, and resume Workflows on the wake keys emitted.
pub(super) fn pump(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    // Before the queued runs start: a start-up done or a lease confirmed again frees them.
    super::dispatch::drain(role, ctx);
    start_queued(role, ctx);
    let now = Instant::now();
    let mut rounds = 0;
    while (role.core.links.has_wakes() || !role.core.inbox.is_empty()) && rounds < 1000 {
        rounds += 1;
        // What the woken steps posted is handled in the same turn, and may wake others.
        super::dispatch::drain(role, ctx);
        let mut wakes = role.core.links.take_wakes();
        // A run's 10,000 targets changing in one turn wake it once, not 10,000 times:
        // a woken step looks at the whole state anyway.
        let mut seen = std::collections::HashSet::with_capacity(wakes.len());
        wakes.retain(|key| seen.insert(key.clone()));
        for key in wakes {
            role.workflows.wake(&key, &mut role.core, now);
        }
        start_queued_inner(role);
        // What the Workflows posted (a run changed, a run ended) is handed on before the
        // next round and before the end of the turn.
        super::dispatch::drain(role, ctx);
    }
    // End of turn: every launch the turn's steps queued is in, so a round goes whole.
    crate::roles::main::shell::rounds::flush(&mut role.core, now);
    for finished in role.workflows.drain_finished() {
        log::debug!("workflow {} ended: {:?}", finished.name, finished.outcome);
    }
    arm_workflow_timer(role, ctx);
    arm_liveness(role, ctx);
    arm_call_expiry(role, ctx);
    crate::roles::main::shell::views::end_of_turn(&mut role.core);
    role.core.links.flush_hub_outbox();
}

pub(super) fn start_queued(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    start_queued_inner(role);
    let _ = ctx;
}

pub(super) fn start_queued_inner(role: &mut MainRole) {
    if role.core.flight.is_recovering() || role.core.ha.holding() {
        return;
    }
    for run in role.core.flight.take_to_recover() {
        let workflow = run_flow::recovered_workflow(run);
        let id = role
            .workflows
            .start(workflow, &mut role.core, Instant::now());
        log::debug!("resumed a recovered run as {id}");
    }
    let queued = role.core.flight.take_to_start();
    for req in queued {
        if role.core.flight.is_stopping() {
            log::info!("not starting {}: shutting down", req.job.name);
            continue;
        }
        let workflow = run_flow::workflow(req);
        role.workflows
            .start(workflow, &mut role.core, Instant::now());
    }
}

/// Keep one timer at the registry's earliest deadline.
pub(super) fn arm_workflow_timer(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
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
pub(super) fn arm_liveness(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    if !role.core.flight.arm_liveness() {
        return;
    }
    ctx.after(Duration::from_secs(1), |role: &mut MainRole, ctx| {
        role.core.flight.liveness_fired();
        sessions::check_liveness(&mut role.core, Instant::now());
        pump(role, ctx);
    });
}

pub(crate) fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let now = Utc::now();
    let mut config = config::load_dir(&args.dirs.config, None, now)
        .map_err(|e| RoleError::BadStart(e.to_string()))?;
    // Nothing runs yet: the executor plugins check their jobs here, each within its
    // deadline (reloads ask blocking, `lifecycle/reload.rs`).
    config.run_plugin_checks(std::path::Path::new("/proc/self/exe"));
    crate::roles::main::lifecycle::reload::log_diagnostics(config.diagnostics.iter());
    let secret = Secret::load_or_create(&args.dirs.secret())
        .map_err(|e| RoleError::BadStart(e.to_string()))?;
    let wrapper_pin =
        crate::tls::material::load(&config.saltpeter.tls_settings(), &args.dirs.state)
            .map_err(|e| RoleError::BadStart(e.to_string()))?
            .map(|m| format!("#sha256={}", crate::tls::hex(&m.fingerprint)));
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
    crate::roles::main::lifecycle::watch::start(ev.ctx(), &args.dirs.config);
    ev.ctx().every(Duration::from_secs(30), report_stalls);
    ev.ctx()
        .every(Duration::from_secs(1), |role: &mut MainRole, ctx| {
            let out = role.core.notify.tick(now_ms());
            if !out.is_empty() {
                role.core.perform(out);
                pump(role, ctx);
            }
        });
    ev.ctx()
        .every(crate::roles::main::orphans::SWEEP, run_flow::orphans::sweep);
    ev.ctx()
        .every(Duration::from_secs(1), |role: &mut MainRole, ctx| {
            let core = &mut role.core;
            let out = core.delegation.expire(core.ha.server(), Instant::now());
            core.perform(out);
            // What the refusal budget held back, said once its window has ended.
            let out = core.sessions.tick(Instant::now());
            core.perform(out);
            crate::roles::main::shell::run::record::tick(&mut role.core, Instant::now());
            run_flow::orphans::tick(&mut role.core, Instant::now());
            pump(role, ctx);
        });
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut role = MainRole {
        core: Main {
            links: super::Links::new(control, hub, db, blocking),
            config,
            secret,
            flight: crate::roles::main::run::Flight::default(),
            sessions: Default::default(),
            scheduler,
            daemon: super::DaemonInfo::started(now.timestamp_millis()),
            launcher: crate::roles::main::fleet::Launcher::new(wrapper_pin),
            fleet: Default::default(),
            rounds: Default::default(),
            storage: Default::default(),
            liveness: Default::default(),
            actor: super::Actor::default(),
            views: Default::default(),
            maintenance: Default::default(),
            inbox: Default::default(),
            boot: Default::default(),
            reloads: Default::default(),
            notify: Default::default(),
            jobctl: Default::default(),
            ha: Default::default(),
            delegation: Default::default(),
        },
        workflows: Registry::new(),
        schedule_timer: None,
        workflow_timer: None,
        call_timer: None,
        hooks: LoopHooks { pump, arm_schedule },
    };
    // Nothing fires and no run starts until this server leads and start-up has loaded
    // what it needs; a lone daemon leads at once, and its start-up loads go out now.
    role.core.flight.begin_recovery();
    let sp = &role.core.config.saltpeter;
    let server = crate::roles::main::lifecycle::ha::server_name(sp.server_name.as_deref());
    let out = role.core.ha.start(sp.database_url.is_some(), server);
    role.core.perform(out);
    super::dispatch::drain(&mut role, ev.ctx());
    let out = role.core.views.start();
    role.core.perform(out);
    crate::roles::main::lifecycle::heap::trim_soon(ev.ctx());
    ev.run_with(&mut role, |role, _| role.core.links.flush())
        .map_err(RoleError::setup("event loop"))?;
    Ok(0)
}

pub(super) fn on_link(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    peer: Peer,
    event: &Event,
) -> Flow {
    let core = &mut role.core;
    let writable = event.is_writable();
    let result = match peer {
        Peer::Hub => core.links.receive_hub(writable).map(|msgs| {
            for msg in msgs {
                on_hub(role, msg);
            }
        }),
        Peer::Db => core.links.receive_db(writable).map(|msgs| {
            for msg in msgs {
                match msg {
                    Packet::Reply { id, result } => match core.links.finish_db_call(id) {
                        Some(wait) => core.db_answer(id, wait, result.map_err(CallError::Remote)),
                        None => run_flow::orphans::answered_late(core, id, result),
                    },
                    Packet::Cast(DbNotice::CommitLatency(h)) => {
                        core.views.metrics_mut().db_committed(h)
                    }
                    Packet::Cast(DbNotice::Lease(report)) => {
                        core.post(crate::roles::main::messages::Message::Lease(report))
                    }
                    Packet::Cast(DbNotice::Live(notice)) => {
                        crate::roles::main::shell::views::notice(core, notice)
                    }
                    Packet::Cast(DbNotice::SaltCalls(rows)) => {
                        let policy = masters::serve::Policy::of(
                            &core.config,
                            launcher::salt_settings(&core.config.saltpeter),
                        );
                        core.perform(masters::serve::serve(rows, core.ha.server(), &policy));
                    }
                    Packet::Cast(DbNotice::SaltReplies(rows)) => {
                        let out = core.delegation.replies(core.ha.server(), rows);
                        core.perform(out);
                    }
                    Packet::Cast(DbNotice::SaltPeers(peers)) => core.delegation.peers(peers),
                    Packet::Cast(DbNotice::MinionKeys(keys)) => core.delegation.keys(keys),
                    other => log::warn!("unexpected message from db: {other:?}"),
                }
            }
        }),
        Peer::Blocking => core.links.receive_blocking(writable).map(|msgs| {
            for msg in msgs {
                match msg {
                    Packet::Reply { id, result } => {
                        if core.links.finish_blocking_call(id) {
                            core.blocking_answered(id, result.map_err(CallError::Remote));
                        } else {
                            log::warn!("blocking answered call {id} after its deadline");
                        }
                    }
                    other => log::warn!("unexpected message from blocking: {other:?}"),
                }
            }
        }),
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
                    for (id, wait, err) in core.links.fail_db_calls() {
                        core.db_answer(id, wait, Err(err));
                    }
                }
                Peer::Blocking => {
                    let calls = core.links.fail_blocking_calls();
                    if core.flight.is_stopping() {
                        // An ordered stop ends blocking first: its unanswered launches and
                        // resolutions are handed over, not failed. Their runs stay as
                        // recorded and the next start recovers them (staged wrappers
                        // re-attach, unlaunched targets are launched); a stop never turns
                        // into the failure of a run that had not started.
                        if !calls.is_empty() {
                            log::info!(
                                "stopping: {} salt or launch call(s) left unanswered; their \
                                 runs are recovered at the next start",
                                calls.len()
                            );
                        }
                    } else {
                        for (id, (), err) in calls {
                            core.blocking_answered(id, Err(err));
                        }
                    }
                }
                Peer::Hub => {}
            }
            pump(role, ctx);
            crate::roles::common::link_failed(ctx, &e)
        }
    }
}

pub(super) fn on_hub(role: &mut MainRole, msg: Packet<HubRequest, HubAnswer>) {
    match msg {
        Packet::Call {
            id,
            req: HubRequest::Admin(req),
            ..
        } => requests::handle(&mut role.core, id, req),
        Packet::Call {
            id,
            req: HubRequest::AdminFrom { peer, req },
            ..
        } => requests::audit::handle_from(&mut role.core, id, peer, req),
        Packet::Call {
            id,
            req: HubRequest::AdminBy { who, req },
            ..
        } => requests::audit::handle_by(&mut role.core, id, who, req),
        Packet::Cast(HubRequest::AdminGone { calls }) => role.core.views.live().calls_gone(&calls),
        Packet::Call { id, req, .. } => sessions::handle_call(&mut role.core, id, req),
        Packet::Cast(HubRequest::UiWatch { job, watch }) => role.core.views.ui().watch(job, watch),
        Packet::Cast(req) => sessions::handle_cast(&mut role.core, req),
        Packet::Reply { id, .. } => log::warn!("hub answered call {id} that main never made"),
    }
}

/// Expire calls whose deadline passed (their waiters get `Timeout`).
pub(super) fn expire_calls(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let now = Instant::now();
    let core = &mut role.core;
    for (id, wait, err) in core.links.expire_db_calls(now) {
        log::error!("db call {id}: {err}");
        core.db_answer(id, wait, Err(err));
    }
    for (id, (), err) in core.links.expire_blocking_calls(now) {
        log::error!("blocking call {id}: {err}");
        core.blocking_answered(id, Err(err));
    }
    pump(role, ctx);
}

/// Keep one timer at the earliest deadline of the calls in flight (none when idle).
pub(super) fn arm_call_expiry(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let next = role.core.links.next_deadline();
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
