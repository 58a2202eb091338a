//! Tests of runs and targets in the store, on real SQLite files.

use super::*;
use crate::roles::db::store::Store;
use crate::roles::db::store::tests::{Extra, Operations};
use crate::roles::db::store::tests::{new_run, temp_store};
use crate::wire::db::OutputLimit;
use crate::wire::db::{EventFilter, NewEvent};
use crate::wire::wrapper::Stream;

#[test]
fn a_run_round_trips_with_sorted_targets() {
    let (_dir, mut store) = temp_store();
    let mut run = new_run("backup", Some(60_000), RunState::Queued, &["zeta", "alpha"]);
    run.targets
        .push(("maint".into(), TargetState::SkippedMaintenance));
    run.reason = Some("first".into());
    let id = store.create_run(&run).unwrap().unwrap();
    let got = store.get_run(id).unwrap().unwrap();
    assert_eq!(got.id, id);
    assert_eq!(got.job, "backup");
    assert_eq!(got.slot, Some(60_000));
    assert_eq!(got.trigger, Trigger::Schedule);
    assert_eq!(got.state, RunState::Queued);
    assert_eq!(got.reason.as_deref(), Some("first"));
    let machines: Vec<_> = got.targets.iter().map(|t| t.machine.as_str()).collect();
    assert_eq!(machines, ["alpha", "maint", "zeta"]);
    assert_eq!(got.targets[1].state, TargetState::SkippedMaintenance);
    assert_eq!(store.get_run(id + 1).unwrap(), None);
}

#[test]
fn a_scheduled_slot_is_recorded_at_most_once() {
    let (_dir, mut store) = temp_store();
    let first = store
        .create_run(&new_run("a", Some(1_000), RunState::Queued, &["m"]))
        .unwrap();
    assert!(first.is_some());
    let again = store
        .create_run(&new_run("a", Some(1_000), RunState::Skipped, &["m", "n"]))
        .unwrap();
    assert_eq!(again, None);
    let run = store.get_run(first.unwrap()).unwrap().unwrap();
    assert_eq!((run.state, run.targets.len()), (RunState::Queued, 1));
    assert!(store.slot_recorded("a", 1_000).unwrap());
    assert!(!store.slot_recorded("a", 2_000).unwrap());
    assert!(!store.slot_recorded("b", 1_000).unwrap());
    // Another job may use the same instant; manual runs never collide.
    assert!(
        store
            .create_run(&new_run("b", Some(1_000), RunState::Queued, &[]))
            .unwrap()
            .is_some()
    );
    let m1 = store
        .create_run(&new_run("a", None, RunState::Queued, &["m"]))
        .unwrap();
    let m2 = store
        .create_run(&new_run("a", None, RunState::Queued, &["m"]))
        .unwrap();
    assert!(m1.is_some() && m2.is_some() && m1 != m2);
}

#[test]
fn run_updates_change_only_given_fields() {
    let (_dir, mut store) = temp_store();
    let id = store
        .create_run(&new_run("a", Some(1), RunState::Queued, &["m"]))
        .unwrap()
        .unwrap();
    store
        .update_run(
            id,
            &RunUpdate {
                state: Some(RunState::Running),
                started: Some(5),
                ..Default::default()
            },
        )
        .unwrap();
    store
        .update_run(
            id,
            &RunUpdate {
                reason: Some("slow".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let run = store.get_run(id).unwrap().unwrap();
    assert_eq!(run.state, RunState::Running);
    assert_eq!(
        (run.started, run.ended, run.reason.as_deref()),
        (Some(5), None, Some("slow"))
    );
    let missing = store
        .update_run(id + 7, &RunUpdate::default())
        .err()
        .unwrap();
    assert!(
        matches!(
            missing,
            StoreError::NotFound {
                op: Op::UpdateRun,
                ..
            }
        ),
        "{missing}"
    );
}

#[test]
fn target_updates_change_only_given_fields() {
    let (_dir, mut store) = temp_store();
    let id = store
        .create_run(&new_run("a", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let running = TargetUpdate {
        state: Some(TargetState::Running),
        started: Some(10),
        last_seen: Some(11),
        wrapper_version: Some("0.1.0".into()),
        ..Default::default()
    };
    store.update_target(id, "m", &running).unwrap();
    let finished = TargetUpdate {
        state: Some(TargetState::Finished),
        reason: Some(TargetReason::Timeout),
        exit_code: Some(124),
        ended: Some(20),
        ..Default::default()
    };
    store.update_target(id, "m", &finished).unwrap();
    let detail = store.get_target(id, "m").unwrap().unwrap();
    assert_eq!(
        detail.record,
        TargetRecord {
            machine: "m".into(),
            state: TargetState::Finished,
            reason: Some(TargetReason::Timeout),
            exit_code: Some(124),
            started: Some(10),
            ended: Some(20),
            suspended: false,
            waiting: None,
            limits: None,
            server: None,
        }
    );
    assert_eq!(detail.last_seen, Some(11));
    assert_eq!(detail.wrapper_version.as_deref(), Some("0.1.0"));
    assert_eq!(store.get_target(id, "other").unwrap(), None);
    assert!(matches!(
        store.update_target(id, "other", &running),
        Err(StoreError::NotFound {
            op: Op::UpdateTarget,
            ..
        })
    ));
}

#[test]
fn targets_can_be_added_to_a_run() {
    let (_dir, mut store) = temp_store();
    let id = store
        .create_run(&new_run("a", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    store
        .update_target(
            id,
            "m",
            &TargetUpdate {
                state: Some(TargetState::Running),
                ..Default::default()
            },
        )
        .unwrap();
    let added = store
        .add_targets(
            id,
            &[
                ("m".into(), TargetState::Pending),
                ("n".into(), TargetState::Pending),
            ],
        )
        .unwrap();
    assert_eq!(added, 1);
    let run = store.get_run(id).unwrap().unwrap();
    assert_eq!(
        run.targets[0].state,
        TargetState::Running,
        "existing target kept"
    );
    assert_eq!(run.targets[1].machine, "n");
    assert!(matches!(
        store.add_targets(id + 1, &[("x".into(), TargetState::Pending)]),
        Err(StoreError::NotFound {
            op: Op::AddTargets,
            ..
        })
    ));
}

/// Runs: a@100 succeeded, b@200 failed, a@300 running, a@400 succeeded, b@500 queued.
fn five_runs(store: &mut Store) -> Vec<RunId> {
    [
        ("a", 100, RunState::Succeeded),
        ("b", 200, RunState::Failed),
        ("a", 300, RunState::Running),
        ("a", 400, RunState::Succeeded),
        ("b", 500, RunState::Queued),
    ]
    .into_iter()
    .map(|(job, at, state)| {
        store
            .create_run(&new_run(job, Some(at), state, &["m1", "m2"]))
            .unwrap()
            .unwrap()
    })
    .collect()
}

#[test]
fn list_runs_filters_pages_and_orders_newest_first() {
    let (_dir, mut store) = temp_store();
    let ids = five_runs(&mut store);
    let mut list = |filter: RunFilter| -> Vec<RunId> {
        store
            .list_runs(&filter)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(
        list(RunFilter::default()),
        [ids[4], ids[3], ids[2], ids[1], ids[0]]
    );
    assert_eq!(
        list(RunFilter {
            job: Some("a".into()),
            ..Default::default()
        }),
        [ids[3], ids[2], ids[0]]
    );
    assert_eq!(
        list(RunFilter {
            state: Some(RunState::Succeeded),
            ..Default::default()
        }),
        [ids[3], ids[0]]
    );
    assert_eq!(
        list(RunFilter {
            since: Some(300),
            ..Default::default()
        }),
        [ids[4], ids[3], ids[2]]
    );
    let first_page = list(RunFilter {
        limit: Some(2),
        ..Default::default()
    });
    assert_eq!(first_page, [ids[4], ids[3]]);
    let second_page = list(RunFilter {
        limit: Some(2),
        before_id: Some(ids[3]),
        ..Default::default()
    });
    assert_eq!(second_page, [ids[2], ids[1]]);
    assert_eq!(
        list(RunFilter {
            since: Some(200),
            until: Some(300),
            ..Default::default()
        }),
        [ids[2], ids[1]]
    );
    assert_eq!(
        list(RunFilter {
            job: Some("b".into()),
            state: Some(RunState::Failed),
            since: Some(100),
            ..Default::default()
        }),
        [ids[1]]
    );
    let runs = store
        .list_runs(&RunFilter {
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(runs[0].targets.len(), 2, "runs come with their targets");
}

#[test]
fn last_run_per_job_and_in_flight_runs() {
    let (_dir, mut store) = temp_store();
    let ids = five_runs(&mut store);
    let last = store.last_run_per_job().unwrap();
    assert_eq!(last.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!((last["a"].id, last["b"].id), (ids[3], ids[4]));
    let in_flight: Vec<_> = store
        .in_flight_runs()
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(in_flight, [ids[2], ids[4]], "oldest first, non-final only");
    assert_eq!(store.known_jobs().unwrap(), ["a", "b"]);
}

#[test]
fn prune_removes_final_runs_by_count_age_and_bytes() {
    let (_dir, mut store) = temp_store();
    let ids = five_runs(&mut store);
    let out = |store: &mut Store, id, bytes: usize| {
        store
            .append_output(
                id,
                "m1",
                1,
                Stream::Stdout,
                &vec![b'x'; bytes],
                OutputLimit::default(),
            )
            .unwrap();
    };
    out(&mut store, ids[0], 100);
    out(&mut store, ids[3], 300);
    store
        .record_event(&NewEvent {
            at: 1,
            kind: "run_created".into(),
            job: Some("a".into()),
            run: Some(ids[0]),
            machine: None,
            message: "kept as audit".into(),
            uid: Some(1000),
        })
        .unwrap();

    // Keeping 5 runs or a young age removes nothing; the running run is never counted.
    let none = store
        .prune(
            "a",
            &Retention {
                keep_runs: Some(5),
                older_than: Some(50),
                max_output_bytes: Some(400),
            },
        )
        .unwrap();
    assert_eq!(none, PruneOutcome::default());
    // 350 bytes: the newest final run (300) stays, the older one (100) would exceed.
    let by_bytes = store
        .prune(
            "a",
            &Retention {
                max_output_bytes: Some(350),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        by_bytes,
        PruneOutcome {
            runs: 1,
            output_bytes: 100
        }
    );
    assert_eq!(store.get_run(ids[0]).unwrap(), None);
    let chunks: i64 = store
        .conn
        .query_row(
            "SELECT count(*) FROM output_chunks WHERE run_id = ?1",
            [ids[0] as i64],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(chunks, 0, "output goes with its run");
    assert_eq!(
        store.list_events(&EventFilter::default()).unwrap().len(),
        1,
        "events stay"
    );

    let by_count = store
        .prune(
            "a",
            &Retention {
                keep_runs: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(by_count.runs, 1);
    assert!(
        store.get_run(ids[2]).unwrap().is_some(),
        "in-flight run stays"
    );
    let by_age = store
        .prune(
            "b",
            &Retention {
                older_than: Some(300),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(by_age.runs, 1);
    assert!(store.get_run(ids[4]).unwrap().is_some());

    // Ids are never handed out again, even when the newest run was pruned.
    let newest = store
        .create_run(&new_run("c", Some(900), RunState::Succeeded, &[]))
        .unwrap()
        .unwrap();
    store
        .prune(
            "c",
            &Retention {
                keep_runs: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    let next = store
        .create_run(&new_run("c", Some(901), RunState::Queued, &[]))
        .unwrap()
        .unwrap();
    assert!(next > newest, "{next} > {newest}");
    store.reclaim_space(1000).unwrap();
}

#[test]
fn the_newest_slot_of_each_job_is_known() {
    let (_dir, mut store) = temp_store();
    assert!(store.last_slot_per_job().unwrap().is_empty());
    for (job, slot) in [
        ("a", Some(3_000)),
        ("a", Some(1_000)),
        ("a", None),
        ("b", Some(7)),
    ] {
        store
            .create_run(&new_run(job, slot, RunState::Skipped, &[]))
            .unwrap();
    }
    // A job with manual runs only has no slot.
    store
        .create_run(&new_run("manual", None, RunState::Succeeded, &[]))
        .unwrap();
    let last = store.last_slot_per_job().unwrap();
    assert_eq!(
        last.into_iter().collect::<Vec<_>>(),
        [("a".to_string(), 3_000), ("b".to_string(), 7)]
    );
}
