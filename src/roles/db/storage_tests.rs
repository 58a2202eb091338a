//! One storage test suite, run against both backends through the [`Storage`] interface:
//! every check below runs once on a SQLite file (`sqlite::…`) and once on a database of
//! a throwaway PostgreSQL cluster (`postgres::…`, skipped without PostgreSQL unless CI
//! requires it; see `tests/support/pg_cluster.rs`).

use super::*;
use crate::roles::db::store::tests::new_run;
use crate::wire::db::{OutputLimit, OutputQuery, Retention, RunFilter, RunUpdate, TargetUpdate};
use crate::wire::notify::{DeliveryAttempt, DeliveryFilter, DeliveryState, NewDelivery, Outgoing};
use crate::wire::records::{RunState, TargetReason, TargetState};
use crate::wire::wrapper::Stream;

macro_rules! on_both_backends {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $check() {
                    let (_dir, mut store) = crate::roles::db::store::tests::temp_store();
                    super::$check(&mut store);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $check() {
                    let Some(url) = crate::roles::db::pg_cluster::fresh_database() else {
                        return;
                    };
                    let mut store = crate::roles::db::pg::PgStore::connect(&url)
                        .unwrap_or_else(|e| panic!("{e}"));
                    super::$check(&mut store);
                }
            )*
        }
    };
}

on_both_backends!(
    a_slot_is_recorded_once,
    runs_and_targets_update_and_list,
    output_is_idempotent_by_seq_across_gaps,
    output_keeps_head_and_tail,
    batched_frames_store_what_single_frames_store,
    a_batch_is_durable_only_when_committed,
    retention_meta_and_events,
    the_outbox_leases_once,
    attempts_keep_their_history,
    a_suspended_target_is_stored_and_read_back,
    a_final_outcome_is_not_written_over,
);

#[path = "suspend_tests.rs"]
mod suspend_checks;
use suspend_checks::a_suspended_target_is_stored_and_read_back;

#[path = "outcome_tests.rs"]
mod outcome_checks;
use outcome_checks::a_final_outcome_is_not_written_over;

/// The fleet state of wrapper builds, in a file of its own (after the macro, which it
/// uses).
#[path = "wrappers_tests.rs"]
mod wrappers;

/// Several masters: salt calls, the server registry, published minion keys.
#[path = "salt_calls_tests.rs"]
mod salt_calls;

/// Compressed output chunks.
#[path = "output_compress_tests.rs"]
mod output_compress;

fn a_slot_is_recorded_once(s: &mut dyn Storage) {
    let first = s
        .create_run(&new_run(
            "j",
            Some(60_000),
            RunState::Running,
            &["m2", "m1"],
        ))
        .unwrap();
    assert!(first.is_some());
    assert_eq!(
        s.create_run(&new_run("j", Some(60_000), RunState::Running, &["m1"]))
            .unwrap(),
        None,
        "the same (job, slot) twice"
    );
    let other = s
        .create_run(&new_run("k", Some(60_000), RunState::Running, &[]))
        .unwrap();
    assert!(other.is_some(), "another job's same slot");
    let manual1 = s
        .create_run(&new_run("j", None, RunState::Running, &["m1"]))
        .unwrap();
    let manual2 = s
        .create_run(&new_run("j", None, RunState::Running, &["m1"]))
        .unwrap();
    assert!(manual1.is_some() && manual2.is_some() && manual1 != manual2);
    let run = s.get_run(first.unwrap()).unwrap().unwrap();
    let machines: Vec<&str> = run.targets.iter().map(|t| t.machine.as_str()).collect();
    assert_eq!(machines, ["m1", "m2"]);
    assert_eq!(run.slot, Some(60_000));
    let slots = s.last_slot_per_job().unwrap();
    assert_eq!(slots.get("j"), Some(&60_000));
    assert_eq!(s.get_run(9_999).unwrap(), None);
}

fn runs_and_targets_update_and_list(s: &mut dyn Storage) {
    let a = s
        .create_run(&new_run("j", Some(1_000), RunState::Running, &["m1"]))
        .unwrap()
        .unwrap();
    let b = s
        .create_run(&new_run("j", Some(2_000), RunState::Running, &["m1"]))
        .unwrap()
        .unwrap();
    s.update_run(
        a,
        &RunUpdate {
            state: Some(RunState::Succeeded),
            ended: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    s.update_target(
        b,
        "m1",
        &TargetUpdate {
            state: Some(TargetState::Running),
            resume_key_sha256: Some("abc".into()),
            token_used: Some(true),
            last_seen: Some(7),
            ..Default::default()
        },
    )
    .unwrap();
    let missing = s.update_run(9_999, &RunUpdate::default()).unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");
    let missing = s
        .update_target(a, "nope", &TargetUpdate::default())
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");

    let in_flight = s.in_flight_details().unwrap();
    assert_eq!(in_flight.len(), 1);
    let (run, details) = &in_flight[0];
    assert_eq!(run.id, b);
    assert_eq!(details[0].resume_key_sha256.as_deref(), Some("abc"));
    assert!(details[0].token_used);
    assert_eq!(details[0].last_seen, Some(7));
    assert_eq!(details[0].record.state, TargetState::Running);

    let all = s.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
    let done = s
        .list_runs(&RunFilter {
            state: Some(RunState::Succeeded),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].ended, Some(5));
    let page = s
        .list_runs(&RunFilter {
            before_id: Some(b),
            limit: Some(1),
            job: Some("j".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.iter().map(|r| r.id).collect::<Vec<_>>(), [a]);
    assert_eq!(s.last_run_per_job().unwrap()["j"].id, b);
    let (record, details) = s.run_details(b).unwrap().unwrap();
    assert_eq!(record.id, b);
    assert_eq!(details.len(), 1);
}

const ROOMY: OutputLimit = OutputLimit {
    head_bytes: 1 << 20,
    tail_bytes: 1 << 20,
};

fn output_is_idempotent_by_seq_across_gaps(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let put = |s: &mut dyn Storage, seq: u64, data: &[u8]| {
        s.append_output(run, "m", seq, Stream::Stdout, data, ROOMY)
            .unwrap()
    };
    assert_eq!(put(s, 1, b"one ").contiguous_seq, 1);
    assert!(put(s, 1, b"one ").duplicate, "a seq stored twice");
    // seq 3 arrives before 2 (a lost frame resent later).
    let early = put(s, 3, b"three ");
    assert_eq!(early.contiguous_seq, 1);
    assert!(put(s, 3, b"three ").duplicate, "a seq above the gap twice");
    assert_eq!(put(s, 2, b"two ").contiguous_seq, 3);
    assert_eq!(put(s, 4, b"four").contiguous_seq, 4);
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.data, b"one three two four", "arrival order");
    assert_eq!(out.total_bytes, 18);
    assert_eq!(out.next_from, 18);
    let zero = s
        .append_output(run, "m", 0, Stream::Stdout, b"x", ROOMY)
        .unwrap_err();
    assert!(matches!(zero, StoreError::Invalid { .. }), "{zero}");
    let unknown = s
        .append_output(run, "other", 1, Stream::Stdout, b"x", ROOMY)
        .unwrap_err();
    assert!(matches!(unknown, StoreError::NotFound { .. }), "{unknown}");
    // Streams apart, and reading on from a position.
    s.append_output(run, "m", 5, Stream::Stderr, b"ERR", ROOMY)
        .unwrap();
    let err = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                stream: Some(Stream::Stderr),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(err.data, b"ERR");
    let on = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                from: 14,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(on.data, b"fourERR");
    let sliced = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                max_bytes: Some(6),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(sliced.data, b"one th");
    assert_eq!(sliced.next_from, 6);
}

fn output_keeps_head_and_tail(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let limit = OutputLimit {
        head_bytes: 4,
        tail_bytes: 6,
    };
    let frames: [&[u8]; 5] = [b"abc", b"defgh", b"ijk", b"lmnop", b"qr"];
    for (i, data) in frames.iter().enumerate() {
        s.append_output(run, "m", i as u64 + 1, Stream::Stdout, data, limit)
            .unwrap();
    }
    // 18 bytes: head "abcd", tail the last 6 "mnopqr", 8 omitted between.
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.data, b"abcdmnopqr");
    assert_eq!(out.omitted_bytes, 8);
    assert_eq!(out.total_bytes, 18);
    assert_eq!(out.omitted_at, Some(4));
    let tail = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                tail: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(tail.data, b"pqr");
    // A frame larger than the tail window replaces it.
    s.append_output(run, "m", 6, Stream::Stdout, b"0123456789", limit)
        .unwrap();
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.data, b"abcd456789");
    assert_eq!(out.omitted_bytes, 18);
    let details = s.run_details(run).unwrap().unwrap().1;
    assert_eq!(details[0].output_bytes, 28);
    assert_eq!(details[0].omitted_bytes, 18);
    assert_eq!(details[0].contiguous_seq, 6);
    let tails = s.output_tails(run, 4, 10).unwrap();
    assert_eq!(tails, [("m".to_string(), "6789".to_string())]);
}

/// A batch's frames whose tail bytes later frames of the batch push out are never
/// written (`Placement`); what is stored must be what frame-by-frame appends store.
fn batched_frames_store_what_single_frames_store(s: &mut dyn Storage) {
    use crate::wire::db::DbRequest;
    let run = s
        .create_run(&new_run(
            "j",
            None,
            RunState::Running,
            &["single", "batched"],
        ))
        .unwrap()
        .unwrap();
    let limit = OutputLimit {
        head_bytes: 5,
        tail_bytes: 7,
    };
    let sizes = [3usize, 1, 4, 9, 2, 6, 1, 1, 8, 3, 12, 2, 5, 7, 1];
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| vec![b'a' + i as u8; *n])
        .collect();
    for (i, data) in frames.iter().enumerate() {
        s.append_output(run, "single", i as u64 + 1, Stream::Stdout, data, limit)
            .unwrap();
    }
    // Batches of 1, 6 and 8 frames, with another target's request in between.
    let mut seq = 0u64;
    for batch in [1usize, 6, 8] {
        let mut calls = Vec::new();
        for data in &frames[seq as usize..seq as usize + batch] {
            seq += 1;
            calls.push((
                seq,
                DbRequest::AppendOutput {
                    run,
                    machine: "batched".into(),
                    seq,
                    stream: Stream::Stdout,
                    data: data.clone(),
                    limit,
                },
            ));
            calls.push((
                1000 + seq,
                DbRequest::UpdateTarget {
                    run,
                    machine: "single".into(),
                    update: TargetUpdate::default(),
                },
            ));
        }
        let results = crate::roles::db::apply_batch(s, &calls).unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    for from in [0u64, 3, 5, 40, 55, 60, 64] {
        let query = OutputQuery {
            from,
            ..Default::default()
        };
        let single = s.read_output(run, "single", &query).unwrap();
        let batched = s.read_output(run, "batched", &query).unwrap();
        assert_eq!(single, batched, "reading from {from}");
    }
    let details = s.run_details(run).unwrap().unwrap().1;
    let of = |m: &str| {
        let d = details.iter().find(|d| d.record.machine == m).unwrap();
        (d.output_bytes, d.omitted_bytes, d.contiguous_seq)
    };
    assert_eq!(of("single"), of("batched"));
    assert_eq!(of("batched"), (65, 53, 15));
}

fn a_batch_is_durable_only_when_committed(s: &mut dyn Storage) {
    s.begin_batch().unwrap();
    let gone = s
        .create_run(&new_run("j", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    s.rollback_batch().unwrap();
    assert_eq!(s.get_run(gone).unwrap(), None, "rolled back");

    s.begin_batch().unwrap();
    // A failing operation leaves no trace and does not spoil the batch.
    assert!(s.update_run(9_999, &RunUpdate::default()).is_err());
    let kept = s
        .create_run(&new_run("j", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    s.append_output(kept, "m", 1, Stream::Stdout, b"x", ROOMY)
        .unwrap();
    s.commit_batch().unwrap();
    assert!(s.get_run(kept).unwrap().is_some());
    assert_eq!(
        s.read_output(kept, "m", &OutputQuery::default())
            .unwrap()
            .data,
        b"x"
    );
    assert!(s.commit_batch().is_err(), "no batch is open");
}

fn retention_meta_and_events(s: &mut dyn Storage) {
    let mut ids = Vec::new();
    for slot in 1..=4 {
        let id = s
            .create_run(&new_run("j", Some(slot), RunState::Succeeded, &["m"]))
            .unwrap()
            .unwrap();
        s.append_output(id, "m", 1, Stream::Stdout, b"12345", ROOMY)
            .unwrap();
        ids.push(id);
    }
    let running = s
        .create_run(&new_run("j", Some(9), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let pruned = s
        .prune(
            "j",
            &Retention {
                keep_runs: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(pruned.runs, 2);
    assert_eq!(pruned.output_bytes, 10);
    assert!(s.get_run(ids[0]).unwrap().is_none());
    assert!(s.get_run(ids[3]).unwrap().is_some());
    assert!(s.get_run(running).unwrap().is_some(), "runs in flight stay");
    s.reclaim_after_prune().unwrap();
    // The next run's id is new, even after pruning.
    let next = s
        .create_run(&new_run("j", Some(10), RunState::Running, &[]))
        .unwrap()
        .unwrap();
    assert!(next > running);

    assert_eq!(s.get_meta("maintenance").unwrap(), None);
    s.set_meta("maintenance", "a").unwrap();
    s.set_meta("maintenance", "b").unwrap();
    assert_eq!(s.get_meta("maintenance").unwrap().as_deref(), Some("b"));

    for (at, kind) in [(1, "run_created"), (2, "target_lost"), (3, "run_created")] {
        s.record_event(&crate::wire::db::NewEvent {
            at,
            kind: kind.into(),
            job: Some("j".into()),
            run: Some(next),
            machine: None,
            message: format!("event at {at}"),
            uid: Some(1000),
        })
        .unwrap();
    }
    let created = s
        .list_events(&crate::wire::db::EventFilter {
            kind: Some("run_created".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(created.len(), 2);
    assert_eq!(created[0].event.at, 3, "newest first");
    assert_eq!(created[0].event.uid, Some(1000));
    assert_eq!(created[0].event.run, Some(next));
    let page = s
        .list_events(&crate::wire::db::EventFilter {
            before_id: Some(created[0].id),
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page[0].event.kind, "target_lost");
}

fn the_outbox_leases_once(s: &mut dyn Storage) {
    let new = |key: &str, now| NewDelivery {
        key: key.into(),
        job: Some("j".into()),
        run: Some(1),
        event: "failure".into(),
        message: Outgoing::Email {
            to: vec!["a@b.example".into()],
            subject: "s".into(),
            body: "b".into(),
        },
        now,
    };
    assert_eq!(
        s.queue_deliveries(&[new("k1", 10), new("k1", 11)]).unwrap(),
        1
    );
    assert_eq!(s.queue_deliveries(&[new("k1", 12)]).unwrap(), 0);
    let due = s.take_due_deliveries(10, 4, 1000).unwrap();
    assert_eq!(due.due.len(), 1);
    assert_eq!(due.next_due, Some(1010));
    // Counted for /metrics: pending (the leased one too), queued at 10.
    assert_eq!((due.pending, due.oldest_pending), (1, Some(10)));
    assert!(s.take_due_deliveries(20, 4, 1000).unwrap().due.is_empty());
    assert_eq!(s.release_delivery_leases(30).unwrap(), 1);
    let again = s.take_due_deliveries(30, 4, 1000).unwrap();
    let id = again.due[0].id;
    s.record_delivery_attempt(&DeliveryAttempt {
        id,
        now: 40,
        result: Err("refused".into()),
        retry_at: Some(5000),
    })
    .unwrap();
    assert!(s.take_due_deliveries(4999, 4, 1000).unwrap().due.is_empty());
    assert_eq!(
        s.take_due_deliveries(5000, 4, 1000).unwrap().due[0].attempts,
        1
    );
    s.record_delivery_attempt(&DeliveryAttempt {
        id,
        now: 5001,
        result: Ok("HTTP 200".into()),
        retry_at: None,
    })
    .unwrap();
    let after = s.take_due_deliveries(5002, 4, 1000).unwrap();
    assert_eq!(
        (after.pending, after.oldest_pending),
        (0, None),
        "delivered"
    );
    let list = s.list_deliveries(&DeliveryFilter::default()).unwrap();
    assert_eq!(list[0].state, DeliveryState::Delivered);
    assert_eq!(list[0].attempts, 2);
    assert_eq!(list[0].delivered, Some(5001));
    // Run 1 does not exist: its delivered message goes with retention.
    assert_eq!(s.prune_deliveries("j", &Retention::default()).unwrap(), 1);
    assert_eq!(s.export_backlog().unwrap(), 0);
}

fn attempts_keep_their_history(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    s.update_target(
        run,
        "m",
        &TargetUpdate {
            state: Some(TargetState::Finished),
            reason: Some(TargetReason::Exit),
            exit_code: Some(3),
            token_used: Some(true),
            ..Default::default()
        },
    )
    .unwrap();
    s.append_output(run, "m", 1, Stream::Stdout, b"first ", ROOMY)
        .unwrap();
    s.retry_target(run, "m", 2).unwrap();
    // The new attempt numbers its frames from 1 again; the output carries on.
    let again = s
        .append_output(run, "m", 1, Stream::Stdout, b"second", ROOMY)
        .unwrap();
    assert!(!again.duplicate);
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.data, b"first second");
    let attempts = s.target_attempts(run).unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].attempt, 1);
    assert_eq!(attempts[0].exit_code, Some(3));
    assert_eq!(attempts[1].attempt, 2);
    assert_eq!(attempts[1].exit_code, None);
    let details = s.run_details(run).unwrap().unwrap().1;
    assert!(!details[0].token_used, "a fresh session");
    assert!(s.retry_target(run, "nope", 2).is_err());
}

/// The storage ingest measurement (ignored; run by hand).
#[path = "storage_bench_tests.rs"]
mod bench;
