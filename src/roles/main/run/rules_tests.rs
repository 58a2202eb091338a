//! The run-level rules (batches, overlap, the slot decision, the pick-up deadline).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::roles::main::run::rules::{
    AtSlot, LaunchView, Pickup, RunView, at_slot, check_pickup, cut_batches, job_busy,
    launches_behind, recovered_batches,
};
use crate::roles::main::run::target::Target;
use crate::wire::records::{RunState, TargetReason};

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("m{i}")).collect()
}

#[test]
fn batches_cut_in_order_and_all_at_once_without_a_size() {
    let no_pick = |_: &mut [String]| panic!("nothing to pick");
    assert_eq!(
        cut_batches(names(5), None, Some(2), no_pick),
        [vec!["m1", "m2"], vec!["m3", "m4"], vec!["m5"]]
    );
    assert_eq!(cut_batches(names(3), None, None, no_pick), [names(3)]);
    assert_eq!(cut_batches(names(3), None, Some(0), no_pick), [names(3)]);
    assert_eq!(cut_batches(names(3), Some(3), None, no_pick), [names(3)]);
    assert!(cut_batches(Vec::new(), None, None, no_pick).is_empty());
}

#[test]
fn number_of_targets_picks_that_many_sorted() {
    let reverse = |m: &mut [String]| m.reverse();
    assert_eq!(
        cut_batches(names(5), Some(2), Some(1), reverse),
        [vec!["m4"], vec!["m5"]]
    );
}

#[test]
fn a_recovered_run_awaits_its_launched_targets_then_keeps_its_batch_size() {
    let open = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
        v.iter().map(|(m, p)| (m.to_string(), *p)).collect()
    };
    // m1 was running at the restart; m2 and m3 had not been launched.
    assert_eq!(
        recovered_batches(open(&[("m1", false), ("m2", true), ("m3", true)]), Some(1)),
        [vec!["m1"], vec!["m2"], vec!["m3"]]
    );
    assert_eq!(
        recovered_batches(open(&[("m2", true), ("m1", false), ("m3", true)]), Some(2)),
        [vec!["m1"], vec!["m2", "m3"]]
    );
    // Nothing launched yet: batches as at the start.
    assert_eq!(
        recovered_batches(open(&[("m1", true), ("m2", true)]), Some(1)),
        [vec!["m1"], vec!["m2"]]
    );
    // No batch size: the launched ones first, then all the others together.
    assert_eq!(
        recovered_batches(open(&[("m1", false), ("m2", true), ("m3", true)]), None),
        [vec!["m1"], vec!["m2", "m3"]]
    );
    assert_eq!(
        recovered_batches(Vec::new(), Some(1)),
        [Vec::<String>::new()]
    );
}

#[test]
fn a_job_is_busy_with_a_queued_run_or_a_run_that_has_gone() {
    let run = |id, prestaged, go_sent| RunView {
        id,
        prestaged,
        go_sent,
    };
    assert!(!job_busy(0, [], None));
    assert!(job_busy(1, [], None), "queued or being recorded");
    assert!(job_busy(0, [run(1, false, false)], None));
    assert!(
        !job_busy(0, [run(1, true, false)], None),
        "staged, waiting for its slot"
    );
    assert!(job_busy(0, [run(1, true, true)], None));
    assert!(
        !job_busy(0, [run(1, false, false)], Some(1)),
        "a run does not overlap itself"
    );
    assert!(job_busy(
        0,
        [run(1, false, false), run(2, true, true)],
        Some(1)
    ));
}

#[test]
fn the_slot_decision_kill_first_then_maintenance_then_overlap() {
    assert_eq!(at_slot("j", false, false, false), AtSlot::Go);
    assert!(matches!(
        at_slot("j", true, true, true),
        AtSlot::Refuse(RunState::Canceled, _)
    ));
    match at_slot("j", false, true, true) {
        AtSlot::Refuse(RunState::Skipped, why) => assert!(why.starts_with("maintenance"), "{why}"),
        other => panic!("{other:?}"),
    }
    match at_slot("backup", false, false, true) {
        AtSlot::Refuse(RunState::Skipped, why) => assert!(why.contains("backup"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn targets_not_picked_up_by_the_deadline_are_overdue() {
    let t0 = Instant::now();
    let deadline = Some(t0 + Duration::from_secs(10));
    let mut targets = BTreeMap::new();
    let mut waiting = Target::new(0);
    waiting.launch();
    targets.insert("waiting".to_string(), waiting);
    let mut picked = Target::new(0);
    picked.launch();
    picked
        .hello(
            t0,
            1,
            crate::roles::main::run::target::Credential::LaunchToken { valid: true },
        )
        .expect("welcome");
    targets.insert("picked".to_string(), picked);
    let mut done = Target::new(0);
    done.finish(TargetReason::Exit, Some(0), 1);
    done.recorded();
    targets.insert("done".to_string(), done);
    let batch: Vec<String> = ["waiting", "picked", "done", "absent"]
        .map(String::from)
        .to_vec();

    assert_eq!(
        check_pickup(&targets, &batch, deadline, t0),
        Pickup {
            open: true,
            overdue: Vec::new(),
            waiting: true
        }
    );
    assert_eq!(
        check_pickup(&targets, &batch, deadline, t0 + Duration::from_secs(10)),
        Pickup {
            open: true,
            overdue: vec!["waiting".to_string()],
            waiting: false
        }
    );
    // Before the launch was answered there is no deadline yet.
    assert!(check_pickup(&targets, &batch, None, t0 + Duration::from_secs(99)).waiting);
    let settled: Vec<String> = vec!["done".to_string()];
    assert_eq!(
        check_pickup(&targets, &settled, deadline, t0),
        Pickup::default()
    );
}

#[test]
fn a_slot_is_skipped_only_when_launches_fall_behind_for_good() {
    let s = Duration::from_secs(1);
    let out = |slot: i64, secs: u64| LaunchView {
        slot: Some(slot),
        out_for: Some(s * secs as u32),
        waiting: false,
    };
    let waiting = |slot: i64| LaunchView {
        slot: Some(slot),
        out_for: None,
        waiting: true,
    };
    // Every 20 s; the slot due is 40 000 ms, the previous one 20 000.
    // One slow launch (out 25 s, longer than the period) and nothing behind it: no skip.
    assert!(!launches_behind(&[out(20_000, 25)], 40_000, 0));
    // Slower than the period but side by side: two in flight, steady: late, not skipped.
    assert!(!launches_behind(&[out(0, 21), out(20_000, 2)], 40_000, 0));
    assert!(!launches_behind(&[out(0, 21), waiting(20_000)], 40_000, 0));
    // Out less than a period, however many behind: no skip.
    assert!(!launches_behind(&[out(0, 15), waiting(20_000)], 40_000, 5));
    // Out more than a period and the backlog growing (three): behind for good.
    assert!(launches_behind(
        &[out(0, 21), out(10_000, 12), waiting(20_000)],
        40_000,
        0
    ));
    assert!(
        launches_behind(&[out(0, 21), waiting(20_000)], 40_000, 1),
        "queued counts"
    );
    // Nothing out at all, or no earlier slot to measure a period by.
    assert!(!launches_behind(&[waiting(20_000)], 40_000, 3));
    assert!(!launches_behind(&[out(40_000, 99)], 40_000, 3));
}
