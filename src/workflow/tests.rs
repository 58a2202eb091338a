use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::steps::StepFn;
use super::types::WorkflowId;
use super::types::{MAX_INSERTED_STEPS, WorkflowError};
use super::{Outcome, Registry, Step, StepCtx, Wake, WakeEvent, WakeKey, Workflow};

/// Stands in for `main`'s state: hands out call ids, keeps the calls that completed and
/// the runs that changed (as main keeps replies for the steps that wait on them), and
/// records what steps did.
#[derive(Default)]
struct Main {
    next_call: u64,
    replied: BTreeSet<u64>,
    changed: BTreeSet<u64>,
    log: Vec<String>,
}

impl Main {
    fn call(&mut self) -> u64 {
        self.next_call += 1;
        self.next_call
    }

    /// A call completes: its reply is kept, then its waiters are woken.
    fn reply(&mut self, registry: &mut Registry<Main>, call: u64, now: Instant) -> usize {
        self.replied.insert(call);
        registry.wake(&WakeKey::Call(call), self, now)
    }
}

#[derive(Default)]
struct Env {
    calls: Vec<u64>,
    deadline: Option<Instant>,
}

type Ctx<'a> = StepCtx<'a, Env, Main>;

fn log(main: &mut Main, s: &Ctx) {
    main.log.push(s.step().to_owned());
}

fn next(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
    log(main, s);
    Step::Next
}

/// Starts one call on its first run and waits until that call's reply is in.
fn await_call(env: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
    let call = match env.calls.last() {
        Some(&call) => call,
        None => {
            log(main, s);
            let call = main.call();
            env.calls.push(call);
            call
        }
    };
    if main.replied.contains(&call) {
        Step::Next
    } else {
        Step::Wait(Wake::Call(call))
    }
}

fn fail(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
    log(main, s);
    Step::Fail("salt returned no minions".into())
}

/// A cleanup step that records the outcome it sees.
fn finalize(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
    main.log.push(format!("{} {}", s.step(), s.outcome()));
    Step::Next
}

fn start(registry: &mut Registry<Main>, main: &mut Main, wf: Workflow<Env, Main>) -> WorkflowId {
    registry.start(wf, main, Instant::now())
}

fn outcomes(registry: &mut Registry<Main>) -> Vec<Outcome> {
    registry
        .drain_finished()
        .into_iter()
        .map(|f| f.outcome)
        .collect()
}

#[test]
fn steps_run_in_order_and_the_workflow_ends_done() {
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("resolve_targets", next)
        .always("finalize", finalize)
        .step("notify", next);
    start(&mut registry, &mut main, wf);
    assert_eq!(main.log, ["resolve_targets", "finalize done", "notify"]);
    assert!(registry.is_idle());
    assert_eq!(outcomes(&mut registry), [Outcome::Done]);
}

#[test]
fn inserted_steps_run_right_after_the_inserting_step_in_order() {
    fn plan_batches(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        log(main, s);
        s.insert_next("batch-1", next);
        s.insert_steps([("batch-2", next as StepFn<Env, Main>), ("batch-3", next)]);
        Step::Next
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("plan", plan_batches)
        .step("record", next);
    start(&mut registry, &mut main, wf);
    assert_eq!(
        main.log,
        ["plan", "batch-1", "batch-2", "batch-3", "record"]
    );
}

#[test]
fn a_call_wakes_only_the_workflow_waiting_on_it() {
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("launch", await_call)
        .step("record", next);
    let now = Instant::now();
    let id = registry.start(wf, &mut main, now);
    assert_eq!(registry.current_step(id), Some("launch"));
    assert_eq!(main.reply(&mut registry, 99, now), 0);
    let other_run = WakeKey::event(WakeEvent::RunChanged(1));
    assert_eq!(registry.wake(&other_run, &mut main, now), 0);
    assert_eq!(registry.current_step(id), Some("launch"));
    assert_eq!(main.reply(&mut registry, 1, now), 1);
    assert_eq!(main.log, ["launch", "record"]);
    assert!(registry.is_idle());
}

#[test]
fn a_step_that_waits_again_keeps_waiting_until_it_is_satisfied() {
    /// Needs both replies; either one alone re-parks it.
    fn await_both(env: &mut Env, main: &mut Main, _: &mut Ctx) -> Step {
        if env.calls.is_empty() {
            env.calls = vec![main.call(), main.call()];
        }
        env.calls.retain(|c| !main.replied.contains(c));
        match env.calls.as_slice() {
            [] => Step::Next,
            left => Step::Wait(Wake::Any(left.iter().map(|&c| Wake::Call(c)).collect())),
        }
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default()).step("await_both", await_both);
    let now = Instant::now();
    let id = registry.start(wf, &mut main, now);
    // A wake with no reply kept re-runs the step, which waits again.
    assert_eq!(registry.wake(&WakeKey::Call(1), &mut main, now), 1);
    assert_eq!(registry.current_step(id), Some("await_both"));
    assert_eq!(main.reply(&mut registry, 2, now), 1);
    assert_eq!(registry.current_step(id), Some("await_both"));
    assert_eq!(main.reply(&mut registry, 2, now), 0);
    assert_eq!(main.reply(&mut registry, 1, now), 1);
    assert_eq!(registry.current_step(id), None);
}

#[test]
fn events_and_deadlines_wake_their_waiters() {
    fn wait_exit(_: &mut Env, main: &mut Main, _: &mut Ctx) -> Step {
        match main.changed.contains(&42) {
            true => Step::Next,
            false => Step::Wait(Wake::event(WakeEvent::RunChanged(42))),
        }
    }
    fn wait_deadline(env: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        let deadline = *env
            .deadline
            .get_or_insert(s.now() + Duration::from_secs(10));
        match s.now() >= deadline {
            true => Step::Next,
            // Any: the deadline, or a call that never completes.
            false => Step::Wait(Wake::Any(vec![
                Wake::Call(main.next_call + 1),
                Wake::At(deadline),
            ])),
        }
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let now = Instant::now();
    let exits: Vec<WorkflowId> = (0..2)
        .map(|_| {
            let wf = Workflow::new("e", Env::default()).step("wait_exit", wait_exit);
            registry.start(wf, &mut main, now)
        })
        .collect();
    let deadline = registry.start(
        Workflow::new("d", Env::default()).step("wait_deadline", wait_deadline),
        &mut main,
        now,
    );
    assert_eq!(
        registry.next_deadline(),
        Some(now + Duration::from_secs(10))
    );

    // Another run's event wakes nobody; this run's wakes both waiters.
    main.changed.extend([42, 43]);
    let other = WakeKey::event(WakeEvent::RunChanged(43));
    assert_eq!(registry.wake(&other, &mut main, now), 0);
    let event = WakeKey::event(WakeEvent::RunChanged(42));
    assert_eq!(registry.wake(&event, &mut main, now), 2);
    assert!(exits.iter().all(|&id| registry.current_step(id).is_none()));

    assert_eq!(
        registry.due_timers(&mut main, now + Duration::from_secs(9)),
        0
    );
    assert_eq!(
        registry.due_timers(&mut main, now + Duration::from_secs(10)),
        1
    );
    assert_eq!(registry.current_step(deadline), None);
    assert_eq!(registry.next_deadline(), None);
    // The other source of the Any was dropped with the wait.
    assert_eq!(registry.wake(&WakeKey::Call(1), &mut main, now), 0);
    assert!(registry.is_idle());
}

/// A cleanup step that waits (the run's record) keeps the failure for the steps after it.
#[test]
fn a_waiting_cleanup_step_runs_to_its_end_after_a_failure() {
    fn record_run(env: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        main.log.push(format!("record_run {}", s.outcome()));
        await_call(env, main, s)
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("launch", fail)
        .always("record_run", record_run)
        .always("notify", finalize);
    let now = Instant::now();
    let id = registry.start(wf, &mut main, now);
    assert_eq!(registry.current_step(id), Some("record_run"));
    main.reply(&mut registry, 1, now);
    let failed = "failed: salt returned no minions";
    assert_eq!(
        main.log,
        [
            "launch".to_owned(),
            format!("record_run {failed}"),
            "record_run".to_owned(),
            format!("record_run {failed}"),
            format!("notify {failed}"),
        ]
    );
    assert_eq!(
        outcomes(&mut registry),
        [Outcome::Failed("salt returned no minions".into())]
    );
}

#[test]
fn fail_skips_normal_steps_runs_cleanup_and_the_first_failure_wins() {
    fn failing_cleanup(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        main.log.push(format!("{} {}", s.step(), s.outcome()));
        Step::Fail("database gone".into())
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("resolve_targets", fail)
        .step("launch", next)
        .always("record_run", failing_cleanup)
        .always("notify", finalize);
    start(&mut registry, &mut main, wf);
    let failed = "failed: salt returned no minions";
    assert_eq!(
        main.log,
        [
            "resolve_targets".to_owned(),
            format!("record_run {failed}"),
            format!("notify {failed}")
        ]
    );
    assert_eq!(
        outcomes(&mut registry),
        [Outcome::Failed("salt returned no minions".into())]
    );
}

#[test]
fn done_skips_the_remaining_normal_steps_only() {
    fn nothing_to_do(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        log(main, s);
        Step::Done
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("resolve_targets", nothing_to_do)
        .step("launch", next)
        .always("finalize", finalize);
    start(&mut registry, &mut main, wf);
    assert_eq!(main.log, ["resolve_targets", "finalize done"]);
    assert_eq!(outcomes(&mut registry), [Outcome::Done]);
}

#[test]
fn runaway_inserts_fail_the_workflow_with_the_step_name() {
    fn insert_myself(_: &mut Env, _: &mut Main, s: &mut Ctx) -> Step {
        s.insert_next("again", insert_myself);
        Step::Next
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("loop", insert_myself)
        .always("finalize", finalize);
    start(&mut registry, &mut main, wf);
    let expected = WorkflowError::TooManyInsertedSteps {
        workflow: "run".into(),
        step: "again".into(),
        limit: MAX_INSERTED_STEPS,
    };
    assert_eq!(main.log, [format!("finalize failed: {expected}")]);
    assert_eq!(
        outcomes(&mut registry),
        [Outcome::Failed(expected.to_string())]
    );
}

#[test]
fn waiting_forever_on_a_deadline_that_already_passed_fails() {
    /// Waits on the present moment and never accepts it.
    fn wait_past(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        main.log.push(s.step().to_owned());
        Step::Wait(Wake::At(s.now()))
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default()).step("wait_past", wait_past);
    start(&mut registry, &mut main, wf);
    let outcome = outcomes(&mut registry);
    assert!(
        matches!(&outcome[..], [Outcome::Failed(r)] if r.contains("wait_past")),
        "{outcome:?}"
    );
    // The first run, then one run per wait on the passed deadline up to the cap.
    assert_eq!(
        main.log.len(),
        1 + super::types::MAX_ALREADY_FIRED_WAITS as usize
    );
    assert_eq!(registry.next_deadline(), None);
}

#[test]
fn stall_report_names_the_step() {
    fn wait_on_nothing(_: &mut Env, _: &mut Main, _: &mut Ctx) -> Step {
        Step::Wait(Wake::Any(Vec::new()))
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let now = Instant::now();
    let empty = Workflow::new("reload", Env::default()).step("wait_on_nothing", wait_on_nothing);
    let empty = registry.start(empty, &mut main, now);
    let call = Workflow::new("run", Env::default()).step("await_pickup", await_call);
    let call = registry.start(call, &mut main, now);

    let threshold = Duration::from_secs(60);
    let stalled = registry.stalled(now, threshold, |_| false);
    assert_eq!(stalled.len(), 1);
    assert_eq!(
        (stalled[0].id, stalled[0].step.as_str()),
        (empty, "wait_on_nothing")
    );

    let later = now + threshold;
    assert_eq!(registry.stalled(later, threshold, |_| true).len(), 1);
    let stalled = registry.stalled(later, threshold, |key| *key != WakeKey::Call(1));
    assert_eq!(stalled.len(), 2);
    let report = stalled
        .iter()
        .find(|r| r.id == call)
        .expect("the run is reported");
    assert_eq!(
        (report.workflow.as_str(), report.step.as_str()),
        ("run", "await_pickup")
    );
    assert_eq!(
        (report.waiting_on.clone(), report.waiting_since),
        (Wake::Call(1), now)
    );
    assert!(report.to_string().contains("step await_pickup"));
}

#[test]
fn shutdown_waits_for_running_workflows_up_to_the_grace_period() {
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let now = Instant::now();
    let deadline = now + Duration::from_secs(30);
    assert!(registry.is_idle());
    assert!(registry.shutdown_complete(now, deadline));
    let wf = Workflow::new("run", Env::default()).step("await_exit", await_call);
    registry.start(wf, &mut main, now);
    assert!(!registry.is_idle());
    assert!(!registry.shutdown_complete(now, deadline));
    assert!(registry.shutdown_complete(deadline, deadline));
    main.reply(&mut registry, 1, now);
    assert!(registry.is_idle());
    assert!(registry.shutdown_complete(now, deadline));
}

/// A run written as the module outline describes: launch, wait for the exit, finalize.
#[test]
fn a_run_launches_waits_for_its_exit_and_finalizes() {
    #[derive(Default)]
    struct RunEnv {
        call: u64,
        exit_code: Option<i32>,
    }
    type RunCtx<'a> = StepCtx<'a, RunEnv, Main>;

    fn launch_wrapper(env: &mut RunEnv, main: &mut Main, _: &mut RunCtx) -> Step {
        env.call = main.call(); // a real step would queue an IPC request here
        Step::Next
    }
    fn await_exit(env: &mut RunEnv, main: &mut Main, _: &mut RunCtx) -> Step {
        if main.replied.contains(&env.call) {
            env.exit_code = Some(0);
            Step::Next
        } else {
            Step::Wait(Wake::Call(env.call))
        }
    }
    fn finalize(env: &mut RunEnv, main: &mut Main, s: &mut RunCtx) -> Step {
        main.log
            .push(format!("{:?} exit={:?}", s.outcome(), env.exit_code));
        Step::Next
    }

    let now = Instant::now();
    let mut main = Main::default();
    let mut registry = Registry::new();
    let run = Workflow::new("job-run", RunEnv::default())
        .step("launch_wrapper", launch_wrapper)
        .step("await_exit", await_exit)
        .always("finalize", finalize);
    let id = registry.start(run, &mut main, now);
    assert_eq!(registry.current_step(id), Some("await_exit"));

    main.reply(&mut registry, 1, now);
    assert!(registry.is_idle());
    assert_eq!(main.log, ["Done exit=Some(0)"]);
    let finished = registry.drain_finished();
    assert_eq!(finished[0].name, "job-run");
    assert_eq!(finished[0].outcome, Outcome::Done);
}
