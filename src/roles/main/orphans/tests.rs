//! The orphan sweep's state, the time pinned.

use super::*;
use crate::roles::main::messages::Cmd;
use crate::wire::db::DbReply;
use crate::wire::records::{RunState, Trigger};

fn record(id: RunId) -> RunRecord {
    RunRecord {
        id,
        job: "backup".into(),
        slot: None,
        trigger: Trigger::Manual,
        state: RunState::Queued,
        reason: None,
        started: None,
        ended: None,
        targets: Vec::new(),
        attempts: Vec::new(),
    }
}

fn in_flight(ids: &[RunId]) -> DbResult {
    Ok(DbReply::InFlightDetails(
        ids.iter().map(|id| (record(*id), Vec::new())).collect(),
    ))
}

fn reads(out: &Out) -> bool {
    matches!(
        out.cmds(),
        [Cmd::Db {
            req: DbRequest::InFlightDetails,
            ..
        }]
    )
}

#[test]
fn a_suspect_still_there_at_the_next_sweep_is_adopted() {
    let t0 = Instant::now();
    let mut o = Orphans::default();
    assert!(o.sweep(false, false).is_empty(), "not while it may not");
    assert!(reads(&o.sweep(true, false)));
    assert!(o.sweep(true, false).is_empty(), "one read at a time");
    let adopt = o.loaded(in_flight(&[1, 2, 3]), |run| run == 2, t0);
    assert!(adopt.is_empty(), "first seen: suspects only");
    assert!(reads(&o.sweep(true, false)));
    let adopt = o.loaded(in_flight(&[1, 2, 4]), |run| run == 2, t0);
    let ids: Vec<RunId> = adopt.iter().map(|(r, _)| r.id).collect();
    assert_eq!(
        ids,
        vec![1],
        "3 ended meanwhile, 4 is new, 2 is driven here"
    );
    assert!(o.tick(t0 + SWEEP, true).is_empty(), "no early sweep due");
}

#[test]
fn storage_back_sweeps_early_and_follows_up() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut o = Orphans::default();
    o.storage_back(t0);
    assert!(o.tick(t0, true).is_empty(), "a second later");
    assert!(reads(&o.tick(t0 + s, true)));
    let adopt = o.loaded(in_flight(&[5]), |_| false, t0 + s);
    assert!(adopt.is_empty());
    assert!(o.tick(t0 + s + FOLLOW_UP / 2, true).is_empty());
    assert!(reads(&o.tick(t0 + s + FOLLOW_UP, true)), "the follow-up");
    let adopt = o.loaded(in_flight(&[5]), |_| false, t0 + s + FOLLOW_UP);
    assert_eq!(adopt.len(), 1);
    assert!(o.tick(t0 + 10 * FOLLOW_UP, true).is_empty(), "nothing left");
}

#[test]
fn a_failed_read_keeps_the_suspects_and_frees_the_next_sweep() {
    let t0 = Instant::now();
    let mut o = Orphans::default();
    let _ = o.sweep(true, false);
    let _ = o.loaded(in_flight(&[7]), |_| false, t0);
    let _ = o.sweep(true, false);
    let lost = Err(crate::ipc::CallError::PeerGone(crate::ipc::Role::Db));
    assert!(o.loaded(lost, |_| false, t0).is_empty());
    assert!(reads(&o.sweep(true, false)));
    assert_eq!(o.loaded(in_flight(&[7]), |_| false, t0).len(), 1);
}

#[test]
fn an_adoption_is_an_event() {
    let out = Orphans::adopting(&record(9));
    match out.cmds() {
        [Cmd::Event(e)] => {
            assert_eq!(e.kind, "run_orphan_adopted");
            assert_eq!(e.run, Some(9));
            assert_eq!(e.job.as_deref(), Some("backup"));
            assert_eq!(
                e.message,
                "queued in the database with nobody driving it: adopted"
            );
        }
        _ => panic!("not one event"),
    }
}
