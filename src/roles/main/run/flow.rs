//! The run Workflow's shape (`workflow`, `recovered_workflow`) and the steps that plan,
//! record and finalize a run; the other steps are in the files beside this one.

use std::time::Instant;

use chrono::Utc;

use super::batches::{self, await_launch, collect_all, collect_batch, launch_batch, next_batch};
use super::{capacity, prestage, targets, unreachable};
use crate::config::Job;
use crate::ipc::rpc::Call;
use crate::roles::main::maintenance::windows;
use crate::roles::main::rules::run_rules;
use crate::roles::main::rules::target::Target;
use crate::roles::main::run::effects::now_ms;
use crate::roles::main::state::Sc;
use crate::roles::main::state::active::ActiveRun;
use crate::roles::main::state::run::{RunEnd, RunEnv, RunRequest};
use crate::roles::main::state::{DbWait, Main};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbReply, DbRequest, calls};
use crate::wire::db::{NewRun, RunUpdate};
use crate::wire::link::HubReply;
use crate::wire::records::{RunId, RunState, TargetState};
use crate::workflow::{Step, Wake, Workflow};

pub(crate) fn workflow(req: RunRequest) -> Workflow<RunEnv, Main> {
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
            end: None,
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

/// The Workflow of a run recovered after a restart: its open targets launched before it
/// form the first batch, the others are cut by `batch_size` again
/// (`run_rules::recovered_batches`), then the usual collection and finalization.
/// `reconnect_until`: the wrappers launched before the restart have until then to
/// reconnect (their backoff) before the pick-up deadline can judge them.
pub(super) fn recovered_workflow(
    req: RunRequest,
    run: RunId,
    batches: Vec<Vec<String>>,
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
            batches,
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
            end: None,
        },
    )
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

/// A step's one db call, sent: the step waits for its answer (`db_answer`).
fn ask_db(core: &mut Main, env: &mut RunEnv, req: DbRequest) -> Step {
    let id = core.db_call(req, DbWait::step());
    env.call = Some(id);
    Step::Wait(Wake::Call(id))
}

/// The answer to the step's db call (`ask_db`), or the wait for it while it is on its way.
fn db_answer<C: Call<DbReply>>(
    core: &mut Main,
    env: &mut RunEnv,
) -> Result<Result<C::Reply, String>, Step> {
    let id = env.call.unwrap_or_default();
    match core.take_db_reply::<C>(id) {
        Some(reply) => {
            env.call = None;
            Ok(reply.map_err(|e| e.to_string()))
        }
        None => Err(Step::Wait(Wake::Call(id))),
    }
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
        let req = DbRequest::CreateRun(NewRun {
            job: env.req.job.name.clone(),
            slot: env.req.slot,
            trigger: env.req.trigger,
            state,
            reason,
            targets,
            now: now_ms(),
        });
        return ask_db(core, env, req);
    }
    let reply = match db_answer::<calls::CreateRun>(core, env) {
        Ok(reply) => reply,
        Err(wait) => return wait,
    };
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
            let mut active = ActiveRun::new(
                id,
                env.req.job.clone(),
                env.req.slot,
                env.req.trigger,
                env.req.prestaged,
                now_ms(),
            );
            active.targets = targets;
            active.workflow = Some(s.id());
            core.insert_run(active);
            core.post(crate::roles::main::messages::Message::RunChanged(id));
            log::info!(
                "run {id} of {} ({}) recorded with {} targets",
                env.req.job.name,
                env.req.trigger,
                env.batches.iter().map(Vec::len).sum::<usize>()
            );
            answer_admin(core, env, AdminResponse::Started { run: id });
            crate::roles::main::shell::joblog::run_started(core, &env.req.job, id);
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
                .run(id)
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
            super::record::run_not_recorded(
                core,
                &env.req.job.name,
                env.req.slot,
                env.req.trigger,
                &e,
            );
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
        let Some(active) = core.run(run) else {
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
        // The end as first decided, written again as it was while the write fails.
        let ended = env.end.get_or_insert(RunEnd {
            at: now_ms(),
            failures: 0,
        });
        let req = DbRequest::UpdateRun {
            run,
            update: RunUpdate {
                state: Some(state),
                reason,
                ended: Some(ended.at),
                ..Default::default()
            },
        };
        return ask_db(core, env, req);
    }
    let reply = match db_answer::<calls::UpdateRun>(core, env) {
        Ok(reply) => reply,
        Err(wait) => return wait,
    };
    if let Err(e) = reply {
        // Final only once stored: the run stays in flight (its waiters wait) and its end
        // is written again, ever later up to 10 s apart, until it is.
        let end = env.end.get_or_insert(RunEnd {
            at: now_ms(),
            failures: 0,
        });
        end.failures += 1;
        if end.failures == 1 {
            log::error!("run {run}: its end is not stored yet ({e}); trying again");
        } else {
            log::debug!("run {run}: its end is not stored yet ({e})");
        }
        return Step::Wait(Wake::At(Instant::now() + end.retry_in()));
    }
    release_job(core, env);
    core.wake_capacity();
    if let Some(active) = core.remove_run(run) {
        let state = match &env.unresolved {
            Some((state, _)) => *state,
            None => active.final_state(),
        };
        let why = env.unresolved.as_ref().map(|(_, why)| why.clone());
        crate::roles::main::shell::notify::run_ended(core, &active, state, why);
        crate::roles::main::shell::joblog::run_ended(core, &active);
        core.flight.sessions.retain(|_, (r, _)| *r != run);
        log::info!("run {run} of {} ended", active.job.name);
        core.apply_retention(&active.job.name);
        core.run_ended(&active, state);
    }
    Step::Next
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
