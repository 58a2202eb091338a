//! The run Workflow (docs/architecture.md, Event loop and Workflows) and the firing of slots.
//!
//! Steps: `resolve_targets` (maintenance hosts out, `number_of_targets`, batches) ->
//! `record_run` (unique per job and slot: a slot never runs twice) -> per batch
//! `launch_batch` -> `await_launch` -> `collect_batch` (pickup deadline; exits, losses
//! and kills arrive as run events) -> `next_batch` -> always `finalize` (final state
//! recorded, waiters answered). Target outcomes are written by `finish_target`, the one
//! place a target becomes `finished`.

pub mod batches;
mod capacity;
mod fire;
pub mod orphans;
use batches::{await_launch, collect_all, collect_batch, launch_batch, next_batch};
pub use fire::fire_as;
mod pickup;
pub mod prestage;
pub mod recovery;
pub mod retry;
pub mod rounds;
pub mod targets;
pub mod unreachable;

use std::time::Instant;

use chrono::Utc;

use super::effects::{finish_target, now_ms};
use super::run_rules;
use super::runs::ActiveRun;
use super::target::Target;
use super::windows;
use super::{DbWait, JobRef, Main};
use crate::config::Job;
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::db::{NewRun, RunUpdate};
use crate::wire::link::HubReply;
use crate::wire::records::{Millis, RunId, RunState, TargetReason, TargetState, Trigger};
use crate::workflow::{Step, StepCtx, Wake, Workflow};

/// A run to start.
pub struct RunRequest {
    pub job: JobRef,
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    /// The admin call (`saltpeterctl run`) to answer with the run id once recorded.
    pub admin_call: Option<CallId>,
    /// Launched ahead of its slot: wrappers wait for `go`, decided at the slot.
    pub prestaged: bool,
    /// Why a run that is not scheduled was started (a chain), recorded with it.
    pub reason: Option<String>,
}

pub struct RunEnv {
    pub(super) req: RunRequest,
    pub(super) run: Option<RunId>,
    /// Live targets found by resolution (before maintenance and `number_of_targets`).
    pub(super) live: Vec<String>,
    /// Matched but silent: recorded as unreachable (255) with the reason.
    pub(super) unreachable: Vec<(String, String)>,
    /// Why no target could be resolved at all (salt failed, nothing matched).
    pub(super) unresolved: Option<(RunState, String)>,
    pub(super) batches: Vec<Vec<String>>,
    pub(super) maintenance: Vec<String>,
    pub(super) batch: usize,
    pub(super) call: Option<CallId>,
    pub(super) pickup_deadline: Option<Instant>,
    launch_started: Option<Instant>,
    /// A batch's wrappers, held until db has committed their `launching` state (the
    /// call id of that barrier): a server that dies in between must not leave them
    /// `pending` for the next leader to launch a second time (`launch_batch`).
    launch_held: Option<(CallId, Vec<crate::wire::link::LaunchTarget>)>,
    /// Targets of the current batch waiting for their next attempt (`retry.rs`).
    pub(super) retry_at: std::collections::BTreeMap<String, Instant>,
    /// Salt's word on minions that did not return the launch (used if their wrapper
    /// never calls back before the pick-up deadline).
    pub(super) silent: std::collections::BTreeMap<String, String>,
    /// The targets came from the master's match, not a ping: a minion silent at the
    /// launch is unreachable.
    pub(super) resolved_from_cache: bool,
    /// The ping of minions waited for (`unreachable.rs`), and when the next one is due.
    pub(super) probe: Option<CallId>,
    pub(super) next_probe: Option<Instant>,
    /// The run's start was recorded (a later launch does not move it).
    pub(super) start_recorded: bool,
    /// The launch round (its slot) this pre-staged salt run belongs to until its launch
    /// is queued (`rounds.rs`).
    pub(super) round: Option<crate::wire::records::Millis>,
    /// Its launch waits in its round or for the round's answer.
    pub(super) launch_queued: bool,
    /// Since when the batch waits for its minions' wrapper deployment (`fleet.rs`).
    pub(super) deploy_since: Option<Instant>,
    /// The ping of targets whose wrappers never called back by the pick-up deadline: its
    /// call and those targets (255 only if the minion does not answer either).
    pub(super) pickup_probe: Option<(CallId, Vec<String>)>,
    /// Counted in `Main::busy_jobs` until recorded.
    counted: bool,
    /// Since when the run waits for a place under `max_runs_in_flight` (`capacity.rs`).
    capacity_since: Option<Instant>,
}

pub type Sc<'a> = StepCtx<'a, RunEnv, Main>;

impl RunEnv {
    /// The pick-up deadline moves to `at`, never earlier than it stands (after a restart
    /// it starts at the wrappers' reconnect grace).
    pub(super) fn extend_pickup(&mut self, at: Instant) {
        self.pickup_deadline = Some(self.pickup_deadline.map_or(at, |d| d.max(at)));
    }
}

pub fn workflow(req: RunRequest) -> Workflow<RunEnv, Main> {
    let name = format!("run of {}", req.job.name);
    let prestaged = req.prestaged;
    Workflow::new(
        name,
        RunEnv {
            req,
            run: None,
            live: Vec::new(),
            unreachable: Vec::new(),
            unresolved: None,
            batches: Vec::new(),
            maintenance: Vec::new(),
            batch: 0,
            call: None,
            pickup_deadline: None,
            launch_started: None,
            launch_held: None,
            retry_at: Default::default(),
            silent: Default::default(),
            resolved_from_cache: false,
            probe: None,
            next_probe: None,
            start_recorded: false,
            round: None,
            launch_queued: false,
            deploy_since: None,
            pickup_probe: None,
            counted: !prestaged,
            capacity_since: None,
        },
    )
    .step("resolve_targets", targets::resolve_targets)
    .step("plan_batches", plan_batches)
    .step("record_run", record_run)
    .step("await_capacity", capacity::await_capacity)
    .step("deploy_wrappers", targets::deploy_wrappers)
    .step("launch_batch", launch_batch)
    .step("await_launch", await_launch)
    .step("await_slot", prestage::await_slot)
    .step("collect_batch", collect_batch)
    .step("next_batch", next_batch)
    .step("collect_all", collect_all)
    .always("finalize", finalize)
}

/// The Workflow of a run recovered after a restart: its open targets form one batch
/// (those never launched are launched now), then the usual collection and finalization.
/// `reconnect_until`: the wrappers launched before the restart have until then to
/// reconnect (their backoff) before the pick-up deadline can judge them.
pub fn recovered_workflow(
    req: RunRequest,
    run: RunId,
    open: Vec<String>,
    reconnect_until: Instant,
) -> Workflow<RunEnv, Main> {
    let name = format!("recovered run of {}", req.job.name);
    Workflow::new(
        name,
        RunEnv {
            req,
            run: Some(run),
            live: Vec::new(),
            unreachable: Vec::new(),
            unresolved: None,
            batches: vec![open],
            maintenance: Vec::new(),
            batch: 0,
            call: None,
            pickup_deadline: Some(reconnect_until),
            launch_started: None,
            launch_held: None,
            retry_at: Default::default(),
            silent: Default::default(),
            resolved_from_cache: false,
            probe: None,
            next_probe: None,
            start_recorded: true,
            round: None,
            launch_queued: false,
            deploy_since: None,
            pickup_probe: None,
            counted: false,
            capacity_since: None,
        },
    )
    .step("await_capacity", capacity::await_capacity)
    .step("deploy_wrappers", targets::deploy_wrappers)
    .step("launch_batch", launch_batch)
    .step("await_launch", await_launch)
    .step("await_slot", prestage::await_slot)
    .step("collect_batch", collect_batch)
    .step("collect_all", collect_all)
    .always("finalize", finalize)
}

/// Maintenance machines out, `number_of_targets` picked, batches cut.
fn plan_batches(env: &mut RunEnv, core: &mut Main, _: &mut Sc) -> Step {
    // Machines in a maintenance window: a `defer` one makes the run wait for its end.
    if let Some(wake) = machine_defer(core, &env.req.job, &env.live) {
        return Step::Wait(wake);
    }
    let job = &env.req.job;
    let machines = std::mem::take(&mut env.live);
    let (skipped, runnable): (Vec<String>, Vec<String>) = machines
        .into_iter()
        .partition(|m| core.in_maintenance(m) || machine_skipped(core, job, m));
    env.batches = run_rules::cut_batches(runnable, job.number_of_targets, job.batch_size, |m| {
        use rand::seq::SliceRandom;
        m.shuffle(&mut rand::rng());
    });
    env.maintenance = skipped;
    Step::Next
}

fn take_db_reply<C: Call<DbReply>>(
    core: &mut Main,
    call: Option<CallId>,
) -> Option<Result<C::Reply, String>> {
    let id = call?;
    core.take_db_reply::<C>(id)
        .map(|r| r.map_err(|e| e.to_string()))
}

fn answer_admin(core: &mut Main, env: &mut RunEnv, resp: AdminResponse) {
    if let Some(call) = env.req.admin_call.take() {
        core.reply_hub(call, HubReply::Admin(resp));
    }
}

fn record_run(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    if env.call.is_none() {
        let runnable: Vec<String> = env.batches.iter().flatten().cloned().collect();
        let mut targets = batches::planned_targets(&env.batches);
        targets.extend(
            env.maintenance
                .iter()
                .map(|m| (m.clone(), TargetState::SkippedMaintenance)),
        );
        targets.extend(
            env.unreachable
                .iter()
                .map(|(m, _)| (m.clone(), TargetState::Pending)),
        );
        let (state, reason) = if let Some((state, why)) = &env.unresolved {
            (*state, Some(why.clone()))
        } else if runnable.is_empty() && env.unreachable.is_empty() {
            let why = if env.maintenance.is_empty() {
                "no targets"
            } else {
                "no target left: all are in maintenance"
            };
            (RunState::Skipped, Some(why.to_string()))
        } else {
            // A pre-staged run waits for its slot: `queued` until `go` (`prestage.rs`).
            let state = if env.req.prestaged {
                RunState::Queued
            } else {
                RunState::Dispatching
            };
            (state, env.req.reason.clone())
        };
        let id = core.db_call(
            DbRequest::CreateRun(NewRun {
                job: env.req.job.name.clone(),
                slot: env.req.slot,
                trigger: env.req.trigger,
                state,
                reason,
                targets,
                now: now_ms(),
            }),
            DbWait::step(),
        );
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    }
    let Some(reply) = take_db_reply::<calls::CreateRun>(core, env.call) else {
        return Step::Wait(Wake::Call(env.call.unwrap_or_default()));
    };
    env.call = None;
    // Recorded (or not): from now on the run itself, if any, shows the job busy.
    release_job(core, env);
    match reply {
        Ok(Some(id)) => {
            env.run = Some(id);
            let mut targets = std::collections::BTreeMap::new();
            for (i, batch) in env.batches.iter().enumerate() {
                for m in batch {
                    targets.insert(m.clone(), Target::new(i));
                }
            }
            for m in &env.maintenance {
                targets.insert(m.clone(), Target::in_maintenance());
            }
            for (m, _) in &env.unreachable {
                targets.insert(m.clone(), Target::new(0));
            }
            core.flight.runs.insert(
                id,
                ActiveRun {
                    id,
                    job: env.req.job.clone(),
                    slot: env.req.slot,
                    trigger: env.req.trigger,
                    targets,
                    kill_requested: false,
                    prestaged: env.req.prestaged,
                    go_at: None,
                    launching: None,
                    workflow: Some(s.id()),
                    waiters: Vec::new(),
                    recorded_at: now_ms(),
                    awaiting_capacity: false,
                },
            );
            super::ui::run_changed(core, id);
            log::info!(
                "run {id} of {} ({}) recorded with {} targets",
                env.req.job.name,
                env.req.trigger,
                env.batches.iter().map(Vec::len).sum::<usize>()
            );
            answer_admin(core, env, AdminResponse::Started { run: id });
            super::joblog::run_started(core, &env.req.job, id);
            core.event(
                "run_started",
                Some(&env.req.job.name),
                Some(id),
                None,
                format!("{} run", env.req.trigger),
            );
            let unreachable = std::mem::take(&mut env.unreachable);
            unreachable::record_unreachable(core, id, &env.req.job, unreachable);
            let unreachable_only = core
                .flight
                .runs
                .get(&id)
                .is_some_and(|r| r.targets.values().any(|t| t.is_decided() || t.is_waiting()));
            if env.batches.is_empty() && !unreachable_only {
                return Step::Done;
            }
            // With only unreachable targets the empty batch passes through and
            // `collect_all` waits for their records.
            Step::Next
        }
        Ok(None) => {
            log::warn!(
                "{}: slot {:?} was already recorded; it does not run twice",
                env.req.job.name,
                env.req.slot
            );
            answer_admin(
                core,
                env,
                AdminResponse::Failure(AdminFailure::Invalid("slot already recorded".into())),
            );
            Step::Done
        }
        Err(e) => {
            answer_admin(
                core,
                env,
                AdminResponse::Failure(AdminFailure::Internal(format!(
                    "could not record the run: {e}"
                ))),
            );
            Step::fail(format!("could not record the run: {e}"))
        }
    }
}

fn finalize(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    if let Some(slot) = env.round.take() {
        core.rounds.leave(slot);
    }
    let Some(run) = env.run else {
        release_job(core, env);
        let why = match s.outcome() {
            crate::workflow::Outcome::Done => "the run was not started".to_string(),
            other => format!("{other:?}"),
        };
        answer_admin(
            core,
            env,
            AdminResponse::Failure(AdminFailure::Internal(why)),
        );
        return Step::Next;
    };
    if env.call.is_none() {
        let Some(active) = core.flight.runs.get(&run) else {
            release_job(core, env);
            return Step::Next;
        };
        let state = match &env.unresolved {
            Some((state, _)) => *state,
            None => active.final_state(),
        };
        // Why a run that did not run ended so (refused at its slot: overlap,
        // maintenance, a kill before it) is recorded with it.
        let reason = match s.outcome() {
            crate::workflow::Outcome::Done => env.unresolved.as_ref().map(|(_, why)| why.clone()),
            other => Some(format!("{other:?}")),
        };
        let id = core.db_call(
            DbRequest::UpdateRun {
                run,
                update: RunUpdate {
                    state: Some(state),
                    reason,
                    ended: Some(now_ms()),
                    ..Default::default()
                },
            },
            DbWait::step(),
        );
        env.call = Some(id);
        return Step::Wait(Wake::Call(id));
    }
    let Some(reply) = take_db_reply::<calls::UpdateRun>(core, env.call) else {
        return Step::Wait(Wake::Call(env.call.unwrap_or_default()));
    };
    env.call = None;
    if let Err(e) = reply {
        log::error!("run {run}: could not record its end: {e}");
    }
    release_job(core, env);
    core.wake_capacity();
    if let Some(active) = core.flight.runs.remove(&run) {
        let state = match &env.unresolved {
            Some((state, _)) => *state,
            None => active.final_state(),
        };
        super::ui::run_finished(core, &active, state);
        let why = env.unresolved.as_ref().map(|(_, why)| why.clone());
        super::notify::run_ended(core, &active, state, why);
        super::joblog::run_ended(core, &active);
        core.flight.sessions.retain(|_, (r, _)| *r != run);
        log::info!("run {run} of {} ended", active.job.name);
        core.apply_retention(&active.job.name);
        core.run_ended(&active, state);
    }
    Step::Next
}

/// A target's wrapper could not be deployed or launched: recorded as an event with its
/// cause, and the target ends 254 — unless a wrapper picked it up meanwhile (a target is
/// never failed while its wrapper is connected).
pub(super) fn launch_failed(core: &mut Main, job: &str, run: RunId, machine: &str, why: String) {
    if core
        .target(run, machine)
        .is_none_or(|t| !t.awaiting_pickup())
    {
        return;
    }
    core.event("launch_failed", Some(job), Some(run), Some(machine), why);
    finish_target(core, run, machine, TargetReason::WrapperFailed, Some(254));
}

/// A target whose minion did not return and did not answer a ping either: unreachable
/// (255) with Salt's word — unless its wrapper picked it up meanwhile.
pub(super) fn unreachable(core: &mut Main, job: &str, run: RunId, machine: &str, why: String) {
    if core
        .target(run, machine)
        .is_none_or(|t| !t.awaiting_pickup())
    {
        return;
    }
    log::warn!("run {run}: {machine} is unreachable: {why}");
    core.event(
        "target_unreachable",
        Some(job),
        Some(run),
        Some(machine),
        why,
    );
    finish_target(core, run, machine, TargetReason::Unreachable, Some(255));
}

/// The run no longer counts as queued for the overlap rule (once per run).
fn release_job(core: &mut Main, env: &mut RunEnv) {
    if !std::mem::take(&mut env.counted) {
        return;
    }
    let job = env.req.job.name.as_str();
    if let Some(n) = core.flight.busy_jobs.get_mut(job) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            core.flight.busy_jobs.remove(job);
        }
    }
}

/// A machine of a run about to be planned is in an open `defer` machine window: the run
/// waits for the latest such window's end (its plan step runs again then).
fn machine_defer(core: &Main, job: &Job, machines: &[String]) -> Option<crate::workflow::Wake> {
    let now = Utc::now();
    let windows = &core.config.maintenance.windows;
    let end = machines
        .iter()
        .filter_map(|m| windows::machine_window(windows, &job.group, m, now))
        .filter(|(w, _)| w.policy == crate::config::windows::WindowPolicy::Defer)
        .map(|(_, end)| end)
        .max()?;
    log::info!(
        "{}: a target is in a maintenance window until {end}; the run waits for its end",
        job.name
    );
    let wait = (end - now).to_std().unwrap_or_default();
    Some(crate::workflow::Wake::At(std::time::Instant::now() + wait))
}

/// `machine` is in an open `skip` machine window for `job`: it is left out of the run.
fn machine_skipped(core: &Main, job: &Job, machine: &str) -> bool {
    let windows = &core.config.maintenance.windows;
    match windows::machine_window(windows, &job.group, machine, Utc::now()) {
        Some((w, _)) if w.policy == crate::config::windows::WindowPolicy::Skip => {
            log::info!(
                "{}: {machine} is in maintenance window {}",
                job.name,
                w.name
            );
            true
        }
        _ => false,
    }
}
