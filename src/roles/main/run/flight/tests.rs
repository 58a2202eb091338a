use std::sync::Arc;

use super::*;
use crate::config::Job;
use crate::roles::main::run::active::ActiveRun;
use crate::wire::records::Trigger;

fn job(name: &str) -> Arc<Job> {
    let yaml = format!("{name}:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n");
    let loaded = crate::config::check_yaml(&yaml, chrono::Utc::now());
    match loaded.valid_jobs().next() {
        Some(j) => Arc::new(j.clone()),
        None => panic!("no job: {:?}", loaded.diagnostics),
    }
}

fn request(name: &str, prestaged: bool) -> RunRequest {
    RunRequest {
        job: job(name),
        slot: Some(60_000),
        trigger: Trigger::Schedule,
        admin_call: None,
        prestaged,
        reason: None,
    }
}

#[test]
fn a_queued_run_counts_as_busy_until_released() {
    let mut flight = Flight::default();
    flight.queue_start(request("a", false));
    flight.queue_start(request("a", false));
    flight.queue_start(request("b", false));
    assert_eq!(flight.busy_count("a"), 2);
    assert_eq!(flight.busy_count("b"), 1);
    assert_eq!(flight.queued_of("a"), 2);
    let queued = flight.take_to_start();
    assert_eq!(queued.len(), 3);
    assert_eq!(flight.queued_of("a"), 0, "taken");
    assert_eq!(flight.busy_count("a"), 2, "busy until recorded or given up");
    flight.release_job("a");
    flight.release_job("a");
    assert_eq!(flight.busy_count("a"), 0);
    flight.release_job("a");
    assert_eq!(flight.busy_count("a"), 0, "never below zero");
    assert_eq!(flight.busy_count("b"), 1);
}

#[test]
fn a_prestaged_run_is_queued_without_counting_as_busy() {
    let mut flight = Flight::default();
    flight.queue_start(request("a", true));
    assert_eq!(flight.busy_count("a"), 0);
    assert_eq!(flight.queued_of("a"), 1);
}

#[test]
fn recovery_holds_until_recovered() {
    let mut flight = Flight::default();
    assert!(!flight.is_recovering());
    flight.begin_recovery();
    assert!(flight.is_recovering());
    flight.recovered();
    assert!(!flight.is_recovering());
    assert!(flight.take_to_recover().is_empty());
}

#[test]
fn stopping_is_for_good() {
    let mut flight = Flight::default();
    assert!(!flight.is_stopping());
    flight.stop();
    flight.stop();
    assert!(flight.is_stopping());
}

#[test]
fn the_liveness_check_is_armed_once_and_only_with_runs_in_flight() {
    let mut flight = Flight::default();
    assert!(!flight.arm_liveness(), "no run in flight");
    flight.insert(ActiveRun::new(7, job("a"), None, Trigger::Manual, false, 0));
    assert_eq!(flight.len(), 1);
    assert!(flight.arm_liveness());
    assert!(!flight.arm_liveness(), "armed already");
    flight.liveness_fired();
    assert!(flight.arm_liveness());
    assert!(flight.remove(7).is_some());
    flight.liveness_fired();
    assert!(!flight.arm_liveness());
}
