//! Child workflows: a run that fans out one workflow per target, joins them, and
//! passes interrupts down to them.

use super::*;

/// Env of a per-target child workflow.
#[derive(Default)]
struct TargetEnv {
    host: String,
    call: u64,
    exit_code: Option<i32>,
}

type TargetCtx<'a> = StepCtx<'a, TargetEnv, Main>;

fn target_launch(env: &mut TargetEnv, main: &mut Main, _: &mut TargetCtx) -> Step {
    env.call = main.call();
    Step::Next
}

fn target_await_exit(env: &mut TargetEnv, _: &mut Main, s: &mut TargetCtx) -> Step {
    match s.fired() {
        Some(Fired::Call(id)) if *id == env.call && env.host == "web3" => {
            Step::Fail(format!("wrapper on {} never picked the run up", env.host))
        }
        Some(Fired::Call(id)) if *id == env.call => {
            env.exit_code = Some(0);
            Step::Next
        }
        _ => Step::Wait(Wake::Call(env.call)),
    }
}

fn target_cleanup(env: &mut TargetEnv, main: &mut Main, s: &mut TargetCtx) -> Step {
    main.log.push(format!("{} {}", env.host, s.outcome()));
    Step::Next
}

fn target(host: &str) -> Workflow<TargetEnv, Main> {
    let env = TargetEnv {
        host: host.to_owned(),
        ..TargetEnv::default()
    };
    Workflow::new("target", env)
        .step("launch", target_launch)
        .step("await_exit", target_await_exit)
        .always("cleanup", target_cleanup)
}

/// Spawns one child per host on its first run, then joins them and reads outcomes.
fn run_batch(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
    if s.first_run() {
        for host in ["web1", "web2", "web3"] {
            s.spawn(target(host));
        }
    }
    if s.children_running() > 0 {
        return Step::Wait(Wake::Children);
    }
    let mut failed = 0;
    for child in s.take_child_outcomes() {
        let outcome = child.outcome.clone();
        failed += usize::from(outcome != Outcome::Done);
        let env = child.into_env::<TargetEnv>().unwrap_or_default();
        main.log
            .push(format!("joined {} {:?} {outcome}", env.host, env.exit_code));
    }
    match failed {
        0 => Step::Next,
        n => Step::Fail(format!("{n} of 3 targets failed")),
    }
}

#[test]
fn fan_out_joins_when_every_child_has_ended_and_failures_propagate() {
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("run_batch", run_batch)
        .step("next_batch", next)
        .always("finalize", finalize);
    let now = Instant::now();
    let id = registry.start(wf, &mut main, now);
    assert_eq!(registry.running(), 4);
    assert_eq!(registry.current_step(id), Some("run_batch"));
    // Calls 1..=3 went to web1..web3; complete them out of order.
    registry.wake(&WakeKey::Call(3), &mut main, now);
    registry.wake(&WakeKey::Call(1), &mut main, now);
    assert_eq!(registry.current_step(id), Some("run_batch"));
    assert_eq!(registry.running(), 2);
    registry.wake(&WakeKey::Call(2), &mut main, now);
    assert!(registry.is_idle());
    let picked_up = "wrapper on web3 never picked the run up";
    assert_eq!(
        main.log,
        [
            format!("web3 failed: {picked_up}"),
            "web1 done".to_owned(),
            "web2 done".to_owned(),
            format!("joined web3 None failed: {picked_up}"),
            "joined web1 Some(0) done".to_owned(),
            "joined web2 Some(0) done".to_owned(),
            "finalize failed: 1 of 3 targets failed".to_owned(),
        ]
    );
    // Only the top-level run is reported; children went to their parent.
    assert_eq!(
        outcomes(&mut registry),
        [Outcome::Failed("1 of 3 targets failed".into())]
    );
}

#[test]
fn interrupting_a_parent_interrupts_its_children_and_it_can_join_them_in_cleanup() {
    fn join_children(_: &mut Env, main: &mut Main, s: &mut Ctx) -> Step {
        if s.children_running() > 0 {
            return Step::Wait(Wake::Children);
        }
        main.log.push(format!(
            "joined {} {}",
            s.child_outcomes().len(),
            s.outcome()
        ));
        Step::Next
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default())
        .step("run_batch", run_batch)
        .always("join_children", join_children);
    let now = Instant::now();
    let id = registry.start(wf, &mut main, now);
    registry
        .interrupt(id, "killed by admin", &mut main, now)
        .expect("the run is registered");
    assert!(registry.is_idle());
    assert_eq!(
        main.log,
        [
            "web1 interrupted: killed by admin",
            "web2 interrupted: killed by admin",
            "web3 interrupted: killed by admin",
            "joined 3 interrupted: killed by admin",
        ]
    );
}

#[test]
fn a_step_can_interrupt_its_children_and_orphans_are_interrupted_and_reported() {
    fn spawn_and_kill(_: &mut Env, _: &mut Main, s: &mut Ctx) -> Step {
        if s.first_run() {
            s.spawn(target("web1"));
            return Step::Wait(Wake::Timer(1));
        }
        s.interrupt_children("run timeout");
        s.spawn(target("web2"));
        Step::Next // ends with both children still in their cleanup or running
    }
    let (mut registry, mut main) = (Registry::new(), Main::default());
    let wf = Workflow::new("run", Env::default()).step("spawn_and_kill", spawn_and_kill);
    let now = Instant::now();
    registry.start(wf, &mut main, now);
    registry.wake(&WakeKey::Timer(1), &mut main, now);
    assert!(registry.is_idle());
    assert_eq!(
        main.log,
        [
            "web1 interrupted: run timeout",
            "web2 interrupted: parent workflow run wf#1 ended"
        ]
    );
    let names: Vec<String> = registry
        .drain_finished()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(names, ["run", "target", "target"]);
}
