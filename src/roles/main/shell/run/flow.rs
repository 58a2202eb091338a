//! The run Workflow's shape (`workflow`, `recovered_workflow`) and the steps that plan,
//! record and finalize a run; the other steps are in the files beside this one.

use std::time::Instant;

use chrono::Utc;

use super::batches::{await_launch, collect_all, collect_batch, launch_batch, next_batch};
use super::env::{RunEnd, RunEnv, Sc, not_planned, not_recorded};
use super::{capacity, prestage, targets, unreachable};
use crate::config::Job;
use crate::roles::main::maintenance::windows;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::request::{RecoveredRun, RunRequest};
use crate::roles::main::run::rules;
use crate::roles::main::shell::run::effects::now_ms;
use crate::roles::main::shell::{Main, history};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbRequest, RunUpdate, calls};
use crate::wire::link::HubReply;
use crate::workflow::{Step, Wake, Workflow};

pub(crate) fn workflow(req: RunRequest) -> Workflow<RunEnv, Main> {
    let name = format!("run of {}", req.job.name);
    let planned = Workflow::new(name, RunEnv::plan(req))
        .step("resolve_targets", targets::resolve_targets)
        .step("plan_batches", plan_batches)
        .step("record_run", record_run);
    recorded_steps(planned)
}

/// The Workflow of a run recovered after a restart: its open targets launched before it
/// form the first batch, the others are cut by `batch_size` again
/// (`rules::recovered_batches`), then the usual collection and finalization.
/// `reconnect_until`: the wrappers launched before the restart have until then to
/// reconnect (their backoff) before the pick-up deadline can judge them.
pub(crate) fn recovered_workflow(run: RecoveredRun) -> Workflow<RunEnv, Main> {
    let RecoveredRun {
        req,
        id,
        batches,
        reconnect_until,
    } = run;
    let name = format!("recovered run of {}", req.job.name);
    recorded_steps(Workflow::new(
        name,
        RunEnv::recovered(req, id, batches, reconnect_until),
    ))
}

/// The steps of a recorded run, new or recovered: a place, the batches launched and
/// collected, then always `finalize`.
fn recorded_steps(w: Workflow<RunEnv, Main>) -> Workflow<RunEnv, Main> {
    w.step("await_capacity", capacity::await_capacity)
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
fn plan_batches(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, plan)) = env.planned() else {
        return not_planned(s);
    };
    // Machines in a maintenance window: a `defer` one makes the run wait for its end.
    if let Some(wake) = machine_defer(core, &req.job, &plan.live) {
        return Step::Wait(wake);
    }
    let job = &req.job;
    let machines = std::mem::take(&mut plan.live);
    let (skipped, runnable): (Vec<String>, Vec<String>) = machines
        .into_iter()
        .partition(|m| core.in_maintenance(m) || machine_skipped(core, job, m));
    plan.batches = rules::cut_batches(runnable, job.number_of_targets, job.batch_size, |m| {
        use rand::seq::SliceRandom;
        m.shuffle(&mut rand::rng());
    });
    plan.maintenance = skipped;
    Step::Next
}

fn answer_admin(core: &mut Main, env: &mut RunEnv, resp: AdminResponse) {
    if let Some(call) = env.req.admin_call.take() {
        core.links.reply_hub(call, HubReply::Admin(resp));
    }
}

fn record_run(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let asked = env.db::<calls::CreateRun>(core, |env, _| match env.planned() {
        Some((req, plan)) => Ok(DbRequest::CreateRun(plan.new_run(req, now_ms()))),
        None => Err(not_planned(s)),
    });
    let reply = match asked {
        Ok(reply) => reply,
        Err(step) => return step,
    };
    // Recorded (or not): from now on the run itself, if any, shows the job busy.
    release_job(core, env);
    match reply {
        Ok(Some(id)) => {
            let targets = match env.planned() {
                Some((_, plan)) => plan.targets(),
                None => return not_planned(s),
            };
            let Some(unreachable) = env.record(id) else {
                return not_planned(s);
            };
            let Some((req, run)) = env.recorded() else {
                return not_recorded(s);
            };
            let active = ActiveRun::new(
                id,
                req.job.clone(),
                req.slot,
                req.trigger,
                req.prestaged,
                now_ms(),
            )
            .with_targets(targets);
            core.insert_run(active);
            core.post(crate::roles::main::messages::Message::RunChanged(id));
            log::info!(
                "run {id} of {} ({}) recorded with {} targets",
                req.job.name,
                req.trigger,
                run.batches.iter().map(Vec::len).sum::<usize>()
            );
            let no_batch = run.batches.is_empty();
            let job = req.job.clone();
            answer_admin(core, env, AdminResponse::Started { run: id });
            crate::roles::main::shell::joblog::run_started(core, &job, id);
            core.event(
                "run_started",
                Some(&job.name),
                Some(id),
                None,
                format!("{} run", env.req.trigger),
            );
            unreachable::record_unreachable(core, id, &job, unreachable);
            let unreachable_only = core.run(id).is_some_and(|r| {
                r.targets()
                    .values()
                    .any(|t| t.is_decided() || t.is_waiting())
            });
            if no_batch && !unreachable_only {
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
                &e.to_string(),
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
    if let Some(slot) = env.leave_round() {
        core.rounds.leave(slot);
    }
    let Some(run) = env.recorded().map(|(_, run)| run.id()) else {
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
    // A recorded run no longer counts as queued (`record_run` released it).
    let asked = env.db::<calls::UpdateRun>(core, |env, core| {
        let Some((_, rec)) = env.recorded() else {
            return Err(not_recorded(s));
        };
        let Some(active) = core.run(run) else {
            return Err(Step::Next);
        };
        let state = match &rec.unresolved {
            Some((state, _)) => *state,
            None => active.final_state(),
        };
        // Why a run that did not run ended so (refused at its slot: overlap,
        // maintenance, a kill before it) is recorded with it.
        let reason = match s.outcome() {
            crate::workflow::Outcome::Done => rec.unresolved.as_ref().map(|(_, why)| why.clone()),
            other => Some(format!("{other:?}")),
        };
        // The end as first decided, written again as it was while the write fails.
        let ended = rec.end.get_or_insert(RunEnd {
            at: now_ms(),
            failures: 0,
        });
        Ok(DbRequest::UpdateRun {
            run,
            update: RunUpdate {
                state: Some(state),
                reason,
                ended: Some(ended.at),
                ..Default::default()
            },
        })
    });
    let reply = match asked {
        Ok(reply) => reply,
        Err(step) => return step,
    };
    let Some((_, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    if let Err(e) = reply {
        // Final only once stored: the run stays in flight (its waiters wait) and its end
        // is written again, ever later up to 10 s apart, until it is.
        let end = rec.end.get_or_insert(RunEnd {
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
    core.wake_capacity();
    if let Some(active) = core.remove_run(run) {
        let state = match &rec.unresolved {
            Some((state, _)) => *state,
            None => active.final_state(),
        };
        let why = rec.unresolved.as_ref().map(|(_, why)| why.clone());
        let end = crate::roles::main::notify::FinishedRun {
            job: active.job(),
            run,
            slot: active.slot(),
            trigger: active.trigger().as_str(),
            state,
            reason: why,
            targets: active.targets().iter().map(|(m, t)| t.record(m)).collect(),
        };
        let out = core.notify.run_ended(&core.config.saltpeter, end, now_ms());
        core.perform(out);
        crate::roles::main::shell::joblog::run_ended(core, &active);
        core.sessions.run_ended(run);
        log::info!("run {run} of {} ended", active.job().name);
        history::apply_retention(core, &active.job().name);
        core.run_ended(&active, state);
    }
    Step::Next
}

/// The run no longer counts as queued for the overlap rule (once per run).
fn release_job(core: &mut Main, env: &mut RunEnv) {
    if !env.uncount() {
        return;
    }
    core.flight.release_job(&env.req.job.name);
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
