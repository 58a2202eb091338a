//! The run's stages: planned until recorded, recorded with its id from then on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::wire::records::Trigger;

fn request(prestaged: bool, reason: Option<&str>) -> RunRequest {
    let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n";
    let loaded = crate::config::check_yaml(yaml, chrono::Utc::now());
    let Some(job) = loaded.valid_jobs().next() else {
        panic!("no job: {:?}", loaded.diagnostics);
    };
    RunRequest {
        job: Arc::new(job.clone()),
        slot: Some(60_000),
        trigger: Trigger::Schedule,
        admin_call: None,
        prestaged,
        reason: reason.map(str::to_string),
    }
}

fn machines(names: &[&str]) -> Vec<String> {
    names.iter().map(|m| m.to_string()).collect()
}

#[test]
fn a_run_has_an_id_only_once_recorded() {
    let mut env = RunEnv::plan(request(false, None));
    assert!(env.recorded().is_none(), "a plan has no run id");
    let Some((_, plan)) = env.planned() else {
        panic!("a new run is planned");
    };
    assert!(plan.counted, "counted as busy until recorded");
    plan.batches = vec![machines(&["a", "b"]), machines(&["c"])];
    plan.unreachable = vec![("d".into(), "no answer".into())];
    plan.round = Some(60_000);
    assert_eq!(
        env.record(7),
        Some(vec![("d".to_string(), "no answer".to_string())]),
        "the unreachable targets are handed back to be recorded"
    );
    assert!(env.planned().is_none(), "the plan is consumed");
    let Some((_, run)) = env.recorded() else {
        panic!("recorded");
    };
    assert_eq!(run.id(), 7);
    assert_eq!(run.current_batch(), ["a", "b"]);
    assert_eq!(
        env.leave_round(),
        Some(60_000),
        "the round goes with the run"
    );
    assert_eq!(env.leave_round(), None);
    assert!(!env.uncount(), "a recorded run is not counted");
    assert_eq!(env.record(8), None, "recorded once");
    assert_eq!(env.recorded().map(|(_, r)| r.id()), Some(7));
}

#[test]
fn a_plan_is_uncounted_once() {
    let mut env = RunEnv::plan(request(false, None));
    assert!(env.uncount());
    assert!(!env.uncount());
    let mut staged = RunEnv::plan(request(true, None));
    assert!(!staged.uncount(), "a pre-staged run never counted");
}

#[test]
fn a_recovered_run_is_recorded_and_started() {
    let until = Instant::now() + Duration::from_secs(30);
    let mut env = RunEnv::recovered(request(true, None), 9, vec![machines(&["a"])], until);
    assert!(env.planned().is_none());
    let Some((req, run)) = env.recorded() else {
        panic!("recovered runs are recorded");
    };
    assert!(req.prestaged);
    assert_eq!(run.id(), 9);
    assert!(run.start_recorded);
    assert_eq!(run.pickup_deadline, Some(until));
    run.extend_pickup(until - Duration::from_secs(1));
    assert_eq!(run.pickup_deadline, Some(until), "never earlier");
    assert!(!env.uncount());
}

#[test]
fn the_record_of_a_plan_says_its_state_and_targets() {
    let req = request(false, Some("chained"));
    let plan = RunPlan {
        batches: vec![machines(&["a"]), machines(&["b"])],
        maintenance: machines(&["m"]),
        unreachable: vec![("u".into(), "silent".into())],
        ..RunPlan::default()
    };
    let new = plan.new_run(&req, 5);
    assert_eq!(new.state, RunState::Dispatching);
    assert_eq!(new.reason.as_deref(), Some("chained"));
    assert_eq!(new.now, 5);
    assert_eq!(
        new.targets,
        vec![
            ("a".to_string(), TargetState::Pending),
            ("b".to_string(), TargetState::Queued),
            ("m".to_string(), TargetState::SkippedMaintenance),
            ("u".to_string(), TargetState::Pending),
        ]
    );
    let targets = plan.targets();
    assert_eq!(targets.len(), 4);
    assert_eq!(
        targets["m"].phase(),
        &crate::roles::main::run::target::Phase::SkippedMaintenance
    );
    assert!(targets["a"].is_pending() && targets["u"].is_pending());

    let staged = plan.new_run(&request(true, None), 5);
    assert_eq!(staged.state, RunState::Queued, "waits for its slot");
}

#[test]
fn a_plan_without_targets_is_skipped_with_why() {
    let req = request(false, None);
    let empty = RunPlan::default();
    let new = empty.new_run(&req, 0);
    assert_eq!(new.state, RunState::Skipped);
    assert_eq!(new.reason.as_deref(), Some("no targets"));
    let all_out = RunPlan {
        batches: vec![Vec::new()],
        maintenance: machines(&["m"]),
        ..RunPlan::default()
    };
    let new = all_out.new_run(&req, 0);
    assert_eq!(new.state, RunState::Skipped);
    assert_eq!(
        new.reason.as_deref(),
        Some("no target left: all are in maintenance")
    );
    let unresolved = RunPlan {
        unresolved: Some((RunState::Failed, "target resolution failed: x".into())),
        ..RunPlan::default()
    };
    let new = unresolved.new_run(&req, 0);
    assert_eq!(new.state, RunState::Failed);
    assert_eq!(new.reason.as_deref(), Some("target resolution failed: x"));
}

#[test]
fn the_end_is_written_again_ever_later() {
    let end = |failures| RunEnd { at: 0, failures };
    assert_eq!(end(1).retry_in(), Duration::from_millis(500));
    assert_eq!(end(2).retry_in(), Duration::from_secs(1));
    assert_eq!(end(20).retry_in(), Duration::from_secs(10));
}
