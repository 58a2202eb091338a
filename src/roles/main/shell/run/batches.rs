//! The batch steps of a run: launch a batch's wrappers, wait for the launch, collect the
//! batch's outcomes (the pick-up deadline), go on to the next batch (or cancel the rest
//! after a kill).

use std::time::{Duration, Instant};

use super::env::{RecordedRun, RunEnv, Sc, not_recorded};
use crate::roles::main::fleet::launcher;
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::run::rules;
use crate::roles::main::shell::run::effects::now_ms;
use crate::roles::main::shell::run::effects::{finish_target, transition};
use crate::roles::main::shell::throttle;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::Redacted;
use crate::wire::db::{DbRequest, RunUpdate, TargetUpdate, calls};
use crate::wire::link::{BlockingRequest, LaunchTarget, MinionOutcome, blocking_calls};
use crate::wire::records::{RunId, RunState, TargetReason};
use crate::workflow::{Step, Wake, WakeEvent};

pub(crate) fn launch_batch(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let committed = match env.db::<calls::GetMeta>(core, plan_launch) {
        Ok(committed) => committed,
        Err(step) => return step,
    };
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    if let Err(e) = committed {
        // Launched all the same, as before the barrier existed: the targets are
        // `launching` in this server's memory and their wrappers are awaited.
        log::warn!(
            "run {}: launching without a confirmed record ({e})",
            rec.id()
        );
    }
    let launch = std::mem::take(&mut rec.held);
    send_launch(req, rec, core, launch)
}

/// The batch's targets go `launching` (or stay out: in maintenance now, held back by a
/// cap); what is to launch is held until db has committed that (the launch barrier's
/// request), or handed on at once when there is nothing to hold (the step's return).
fn plan_launch(env: &mut RunEnv, core: &mut Main) -> Result<DbRequest, Step> {
    let Some((req, rec)) = env.recorded() else {
        return Err(Step::fail("launch before the run was recorded"));
    };
    let run = rec.id();
    let job = req.job.clone();
    let batch = rec.current_batch().to_vec();
    // Machines put into maintenance since the run was planned (a later batch) stay out.
    let in_maintenance: Vec<bool> = batch.iter().map(|m| core.in_maintenance(m)).collect();
    let mut launch = Vec::new();
    for (machine, maintenance) in batch.iter().zip(in_maintenance) {
        if core.target(run, machine).is_none_or(|t| !t.is_pending()) {
            continue; // killed before its batch came, or launched before a restart
        }
        if maintenance {
            log::info!("run {run}: {machine} is in maintenance now; left out");
            transition(core, run, machine, |t| t.skip_for_maintenance());
            continue;
        }
        // Its machine is full (`max_running_per_machine`): not launched until a place
        // frees up, so no wrapper waits on the minion and no timeout runs meanwhile.
        if let Err(reason) = throttle::may_start(core, run, machine) {
            if core.target(run, machine).is_some_and(|t| !t.is_throttled()) {
                log::info!("run {run}: {machine} {reason}");
            }
            transition(core, run, machine, |t| t.hold_for_capacity(reason));
            continue;
        }
        transition(core, run, machine, |t| t.launch());
        // Salt wrappers prove the machine with its minion key; local and plugin ones get
        // a launch token (in a private file or on the wrapper's stdin, never on a
        // command line).
        let attempt = core.target(run, machine).map_or(1, |t| t.attempt());
        let token = job
            .executor
            .uses_tokens()
            .then(|| Redacted(core.secret.launch_token(run, machine, attempt)));
        launch.push(LaunchTarget {
            machine: machine.clone(),
            token,
        });
    }
    // A pre-staged run starts at its slot (`prestage::await_slot` records it then).
    let before_slot = req.prestaged && core.run(run).is_some_and(|r| !r.go_sent());
    if !rec.start_recorded && !launch.is_empty() && !before_slot {
        rec.start_recorded = true;
        core.db_call(
            DbRequest::UpdateRun {
                run,
                update: RunUpdate {
                    state: Some(RunState::Running),
                    started: Some(now_ms()),
                    ..Default::default()
                },
            },
            DbWait::write("a running run"),
        );
    }
    if launch.is_empty() {
        return Err(send_launch(req, rec, core, launch));
    }
    // db answers a call only after committing the batch it is in, and it receives the
    // `launching` writes above before this read: its answer means they are durable.
    rec.held = launch;
    Ok(DbRequest::GetMeta(LAUNCH_BARRIER.to_string()))
}

/// How often a batch with throttled targets looks again without being woken.
const CAPACITY_RECHECK: Duration = Duration::from_secs(5);

/// A meta key nobody writes, read as the launch barrier.
const LAUNCH_BARRIER: &str = "launch_barrier";

/// Hands the batch's wrappers to blocking: a local batch at once, a salt batch to its
/// launch round (`rounds/`), which publishes it with the other runs of the round.
fn send_launch(
    req: &RunRequest,
    rec: &mut RecordedRun,
    core: &mut Main,
    launch: Vec<LaunchTarget>,
) -> Step {
    let job = req.job.clone();
    let run = rec.id();
    let url = core
        .launcher
        .wrapper_url(&core.config.saltpeter, core.daemon.wrapper_port(), &job);
    let now = Instant::now();
    if let Some(slot) = rec.round.take() {
        core.rounds.leave(slot);
    }
    if launch.is_empty() {
        return Step::Next;
    }
    if let Some(active) = core.run_mut(run) {
        active.launch_out(now);
    }
    rec.launch_started = Some(now);
    if job.executor == crate::config::Executor::Salt {
        let queued = crate::roles::main::rounds::Queued {
            run,
            url,
            wrapper_path: launcher::wrapper_path(&core.config.saltpeter, &job),
            minions: launch.into_iter().map(|t| t.machine).collect(),
            settings: launcher::salt_settings(&core.config.saltpeter),
            // After its slot (targets held back by a cap, retries) nothing is to coalesce.
            urgent: !req.prestaged || core.run(run).is_some_and(|r| r.go_sent()),
        };
        core.rounds.queue(queued, now);
        rec.launch_queued = true;
        return Step::Next;
    }
    let machines: Vec<String> = launch.iter().map(|t| t.machine.clone()).collect();
    let executor = match super::plugins::launch_executor(core, &job, &machines) {
        Ok(executor) => executor,
        Err(why) => {
            for m in &machines {
                super::failed::launch_failed(core, &job.name, run, m, why.clone());
            }
            return Step::Next;
        }
    };
    let id = core.blocking_call(BlockingRequest::Launch {
        executor,
        wrapper_path: launcher::wrapper_path(&core.config.saltpeter, &job),
        runs: vec![run],
        url,
        targets: launch,
        salt: None,
        await_returns: true,
    });
    rec.launch = Some(id);
    Step::Next
}

/// The launch's answer: a local batch's call, or a salt run's part of its round.
enum Launched {
    Waiting(Wake),
    Answer(Result<Vec<MinionOutcome>, String>),
    Nothing,
}

fn launched(rec: &mut RecordedRun, core: &mut Main) -> Launched {
    let run = rec.id();
    if rec.launch_queued {
        return match core.rounds.take_answer(run) {
            Some(answer) => {
                rec.launch_queued = false;
                Launched::Answer(answer.outcomes)
            }
            None => {
                let mut wakes = vec![Wake::event(Main::run_event(run))];
                wakes.extend(core.rounds.deadline().map(Wake::At));
                Launched::Waiting(Wake::Any(wakes))
            }
        };
    }
    let Some(id) = rec.launch else {
        return Launched::Nothing;
    };
    match core.links.take_blocking_reply::<blocking_calls::Launch>(id) {
        None => Launched::Waiting(Wake::Call(id)),
        Some(reply) => {
            rec.launch = None;
            let outcomes = reply
                .map(|all| all.into_iter().map(|(_, o)| o).collect())
                .map_err(|e| e.to_string());
            Launched::Answer(outcomes)
        }
    }
}

pub(crate) fn await_launch(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    let reply = match launched(rec, core) {
        Launched::Waiting(wake) => return Step::Wait(wake),
        // Nothing was launched (every target launched before a restart, or gone): the
        // pick-up deadline still applies to those awaited.
        Launched::Nothing => Ok(Vec::new()),
        Launched::Answer(reply) => reply,
    };
    if let Some(active) = core.run_mut(run) {
        active.launch_answered();
    }
    rec.launch_started = None;
    let path = launcher::wrapper_path(&core.config.saltpeter, &req.job);
    match reply {
        Ok(outcomes) => {
            let plugin = req.job.executor.plugin();
            for o in outcomes {
                if let Some(server) = o.server {
                    record_server(core, run, &o.machine, server);
                }
                if let Some(name) = plugin {
                    let builds = core.fleet.plugin_builds();
                    match (&o.result, &o.unreachable) {
                        (Ok(()), None) => builds.launched(name, &o.machine, &path),
                        (Err(_), _) => builds.failed(name, &o.machine, &path),
                        _ => {}
                    }
                }
                if let Some(why) = o.unreachable {
                    super::failed::unreachable(core, &req.job.name, run, &o.machine, why);
                    continue;
                }
                if let Some(word) = o.silent {
                    // Salt's silence is not unreachability: the wrapper may still call
                    // back; the pick-up deadline (and a ping then) decides.
                    log::info!("run {run}: {} did not return the launch: {word}", o.machine);
                    rec.silent.insert(o.machine.clone(), word);
                }
                if let Err(e) = o.result {
                    log::warn!("run {run}: wrapper for {} failed to launch: {e}", o.machine);
                    // Maybe the wrapper went missing: deploy again next time.
                    if plugin.is_none() {
                        let out = core.fleet.missing(&o.machine, &path);
                        core.perform(out);
                    }
                    super::failed::launch_failed(core, &req.job.name, run, &o.machine, e);
                }
            }
        }
        Err(e) => {
            log::error!("run {run}: launching batch {} failed: {e}", rec.batch);
            for m in rec.current_batch() {
                let why = format!("the launch failed: {e}");
                super::failed::launch_failed(core, &req.job.name, run, m, why);
            }
        }
    }
    let pickup = Duration::from_secs(core.config.saltpeter.pickup_timeout_s);
    rec.extend_pickup(Instant::now() + pickup);
    Step::Next
}

/// Several masters: which server's master launched the target, kept for `status` and
/// the dashboard.
fn record_server(core: &mut Main, run: RunId, machine: &str, server: String) {
    let Some(target) = core.target_mut(run, machine) else {
        return;
    };
    target.launched_through(server.clone());
    let update = TargetUpdate {
        server: Some(server),
        ..Default::default()
    };
    let due = core.write_due(run);
    crate::roles::main::shell::run::effects::write_target(
        core,
        run,
        machine,
        update,
        "a target's server",
        due,
    );
}

pub(crate) fn collect_batch(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    let now = s.now();
    let retry_wait = match super::retry::check(rec, core, now) {
        super::retry::RetryPlan::Relaunch => {
            s.insert_steps([
                ("launch_batch", launch_batch as StepFnOf),
                ("await_launch", await_launch),
                ("collect_batch", collect_batch),
            ]);
            return Step::Next;
        }
        super::retry::RetryPlan::WaitUntil(at) => Some(Wake::At(at)),
        super::retry::RetryPlan::Nothing => None,
    };
    // Minions waited for (`retry_unreachable`) that came back join this batch.
    let waiting = match super::unreachable::check(rec, core, now) {
        super::unreachable::Plan::Relaunch(back) => {
            join_current_batch(rec, back);
            s.insert_steps([
                (
                    "deploy_wrappers",
                    super::targets::deploy_wrappers as StepFnOf,
                ),
                ("launch_batch", launch_batch),
                ("await_launch", await_launch),
                ("collect_batch", collect_batch),
            ]);
            return Step::Next;
        }
        super::unreachable::Plan::Wait { at, probe } => {
            let mut w = vec![Wake::At(at)];
            w.extend(probe.map(Wake::Call));
            w
        }
        super::unreachable::Plan::Nothing => Vec::new(),
    };
    let batch = rec.batches.get(rec.batch).map(Vec::as_slice).unwrap_or(&[]);
    // Targets held back by `max_running_per_machine` start once their place is free.
    if throttle::any_admitted(core, run, batch) {
        s.insert_steps([
            ("launch_batch", launch_batch as StepFnOf),
            ("await_launch", await_launch),
            ("collect_batch", collect_batch),
        ]);
        return Step::Next;
    }
    let mut waiting = waiting;
    if throttle::has_throttled(core, run, batch) {
        // The wake comes when a target or run ends; the timer only backs it up.
        waiting.push(Wake::event(WakeEvent::Capacity));
        waiting.push(Wake::At(now + CAPACITY_RECHECK));
    }
    // A stall of the daemon, or a pause of its own (storage trouble), while the window was
    // open does not count against it. Wrappers refused meanwhile backed off as if the
    // server had restarted: they get the same grace to come back (`recovery_grace`).
    if let Some(deadline) = rec.pickup_deadline {
        let window = Duration::from_secs(core.config.saltpeter.pickup_timeout_s)
            .max(Duration::from_secs(core.config.saltpeter.recovery_grace_s));
        rec.pickup_deadline = Some(crate::roles::main::health::liveness::pickup_after_stall(
            deadline,
            window,
            core.liveness.resumed_at(),
            core.liveness.is_paused(),
            now,
        ));
    }
    let Some(active) = core.run(run) else {
        return Step::Next;
    };
    let pickup = if rec.batches.len() == 1 && batch.len() == active.targets().len() {
        // One batch holding every target of the run (none in maintenance or waiting for
        // its minion): no lookup per target.
        rules::check_pickup_of(active.targets().iter(), rec.pickup_deadline, now)
    } else {
        rules::check_pickup(active.targets(), batch, rec.pickup_deadline, now)
    };
    let probe = super::pickup::overdue(req, rec, core, pickup.overdue.clone());
    let event = Wake::event(Main::run_event(run));
    if !pickup.open {
        // Targets still waiting for their minion do not hold the batches up.
        return match retry_wait {
            Some(at) => {
                let mut wakes = vec![event, at];
                wakes.extend(waiting);
                Step::Wait(Wake::Any(wakes))
            }
            None => Step::Next,
        };
    }
    let mut wakes = vec![event];
    wakes.extend(retry_wait);
    wakes.extend(waiting);
    wakes.extend(probe);
    if let (true, Some(d)) = (pickup.waiting, rec.pickup_deadline) {
        wakes.push(Wake::At(d));
    }
    Step::Wait(Wake::Any(wakes))
}

/// Targets that came back (`retry_unreachable`) join the batch going on, or form one
/// when the run had none (all its targets were unreachable).
fn join_current_batch(rec: &mut RecordedRun, machines: Vec<String>) {
    if rec.batches.is_empty() {
        rec.batches.push(Vec::new());
        rec.batch = 0;
    }
    let i = rec.batch.min(rec.batches.len() - 1);
    rec.batch = i;
    for m in machines {
        if !rec.batches[i].contains(&m) {
            rec.batches[i].push(m);
        }
    }
}

pub(crate) fn next_batch(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((_, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    if rec.batch + 1 >= rec.batches.len() {
        return Step::Next;
    }
    if core.run(run).is_some_and(|r| r.kill_requested()) {
        let rest: Vec<String> = rec.batches[rec.batch + 1..].concat();
        for m in rest {
            finish_target(core, run, &m, TargetReason::Canceled, None);
        }
        // Wait for those records before finalizing.
        rec.batch = rec.batches.len() - 1;
        s.insert_next("collect_canceled", collect_all);
        return Step::Next;
    }
    rec.batch += 1;
    log::info!("run {run}: starting batch {}", rec.batch + 1);
    s.insert_steps([
        ("launch_batch", launch_batch as StepFnOf),
        ("await_launch", await_launch),
        ("collect_batch", collect_batch),
        ("next_batch", next_batch),
    ]);
    Step::Next
}

pub(crate) type StepFnOf = fn(&mut RunEnv, &mut Main, &mut Sc) -> Step;

/// Wait until every target of the run is settled; minions waited for
/// (`retry_unreachable`) that come back meanwhile are launched as a batch of their own.
pub(crate) fn collect_all(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((_, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    let mut wakes = vec![Wake::event(Main::run_event(run))];
    match super::unreachable::check(rec, core, s.now()) {
        super::unreachable::Plan::Relaunch(back) => {
            join_current_batch(rec, back);
            s.insert_steps([
                (
                    "deploy_wrappers",
                    super::targets::deploy_wrappers as StepFnOf,
                ),
                ("launch_batch", launch_batch),
                ("await_launch", await_launch),
                ("collect_batch", collect_batch),
                ("collect_all", collect_all),
            ]);
            return Step::Next;
        }
        super::unreachable::Plan::Wait { at, probe } => {
            wakes.push(Wake::At(at));
            wakes.extend(probe.map(Wake::Call));
        }
        super::unreachable::Plan::Nothing => {}
    }
    let open = core
        .run(run)
        .is_some_and(|r| r.targets().values().any(|t| !t.is_settled()));
    if open {
        Step::Wait(Wake::Any(wakes))
    } else {
        Step::Next
    }
}
