//! A standby's mirror, step by step: notices, the end of turns, db's replies handed back
//! as their messages would be. The time is pinned.

use std::time::{Duration, Instant};

use crate::roles::main::messages::Message;
use crate::roles::main::views::Views;
use crate::roles::main::views::tests::{lines, lost, output, record, run};
use crate::roles::main::views::ui::render::LeaderRuns;
use crate::wire::db::{DbReply, LiveChange, LiveKind, LiveNotice};
use crate::wire::records::{RunId, RunState};

fn notice(changes: &[(RunId, LiveKind)]) -> LiveNotice {
    LiveNotice {
        resync: false,
        changes: changes
            .iter()
            .map(|&(run, kind)| LiveChange { run, kind, seq: 0 })
            .collect(),
    }
}

#[test]
fn a_leaders_run_is_read_when_notified_and_mirrored_while_in_flight() {
    let mut views = Views::default();
    let now = Instant::now();
    // A leader mirrors nothing.
    views.mirror_notice(notice(&[(7, LiveKind::Run)]), false);
    assert!(views.mirror_turn(now, false).is_empty());
    // Two notices in a turn: one read.
    views.mirror_notice(notice(&[(7, LiveKind::Run)]), true);
    views.mirror_notice(notice(&[(7, LiveKind::Output)]), true);
    let (sent, messages) = run(views.mirror_turn(now, true), |_| lost());
    assert_eq!(sent, ["db GetRun(7)"]);
    assert!(matches!(messages[..], [Message::MirrorRun { run: 7, .. }]));
    // A read out is not made again.
    views.mirror_notice(notice(&[(7, LiveKind::Run)]), true);
    assert!(views.mirror_turn(now, true).is_empty());
    let rec = record(7, "j", RunState::Running, &["a"]);
    let out = views.mirror_run(7, Ok(DbReply::Run(Some(rec))), false, true);
    assert!(out.is_empty());
    assert_eq!(views.mirrored_count(), 1);
    assert_eq!(views.mirror.newest_of("j"), Some(7));
    assert_eq!(views.mirror.running().len(), 1);
    // The notice that came meanwhile is read now; with a run mirrored, a first resync.
    assert_eq!(
        lines(views.mirror_turn(now, true)),
        ["db InFlightDetails", "db GetRun(7)"]
    );
    let done = record(7, "j", RunState::Succeeded, &["a"]);
    assert!(
        views
            .mirror_run(7, Ok(DbReply::Run(Some(done))), false, true)
            .is_empty()
    );
    assert_eq!(views.mirrored_count(), 0, "no feed to wait for: it ended");
    assert!(views.ui.dirty().contains("j"));
}

#[test]
fn a_feed_continues_where_the_hubs_read_ended_and_the_end_waits_for_it() {
    let mut views = Views::default();
    let now = Instant::now();
    views.mirror_notice(notice(&[(7, LiveKind::Run)]), true);
    let _ = views.mirror_turn(now, true);
    let rec = record(7, "j", RunState::Running, &["a"]);
    let _ = views.mirror_run(7, Ok(DbReply::Run(Some(rec))), false, true);
    // The hub's `/ws` view of `a` starts: the read that starts its feed.
    let (sent, messages) = run(views.live_base(3, 7, "a".into(), None), |_| lost());
    assert!(sent[0].contains("tail: Some(1048576)"), "{sent:?}");
    assert!(matches!(
        messages[..],
        [Message::MirrorBase {
            call: 3,
            run: 7,
            ..
        }]
    ));
    // Output committed while the hub's read is out: no read yet.
    views.mirror_notice(notice(&[(7, LiveKind::Output)]), true);
    assert_eq!(lines(views.mirror_turn(now, true)), ["db InFlightDetails"]);
    // The run ends meanwhile: shown once the feed has caught up.
    views.mirror_notice(notice(&[(7, LiveKind::Run)]), true);
    let _ = views.mirror_turn(now, true);
    let done = record(7, "j", RunState::Succeeded, &["a"]);
    let _ = views.mirror_run(7, Ok(DbReply::Run(Some(done))), false, true);
    assert_eq!(views.mirrored_count(), 1, "the feed is behind");
    let sent = lines(views.mirror_base(3, 7, "a".into(), output(b"hello", 5)));
    assert!(sent[0].starts_with("answer 3 LiveOutput"), "{sent:?}");
    assert!(sent[0].contains("upto_seq: 5"), "{sent:?}");
    assert!(sent[1].contains("from: 5"), "the feed reads on: {sent:?}");
    let sent = lines(views.mirror_feed(7, "a".into(), output(b" world", 11)));
    assert!(sent[0].starts_with("hub UiStoredOutput"), "{sent:?}");
    assert!(sent[0].contains("seq: 11"), "{sent:?}");
    assert_eq!(views.mirrored_count(), 0, "caught up: the end is shown");
    // A run not mirrored has no feed: its view starts from this server's state.
    let (_, messages) = run(views.live_base(4, 7, "a".into(), None), |_| lost());
    assert!(matches!(messages[..], [Message::LiveBase { call: 4, .. }]));
}

#[test]
fn a_resync_reads_the_runs_in_flight_every_30_seconds_while_some_are_mirrored() {
    let mut views = Views::default();
    let t0 = Instant::now();
    assert!(views.mirror_turn(t0, true).is_empty(), "nothing mirrored");
    views
        .mirror
        .insert(record(7, "j", RunState::Running, &["a"]));
    let (sent, messages) = run(views.mirror_turn(t0, true), |_| lost());
    assert_eq!(sent, ["db InFlightDetails"]);
    assert!(matches!(messages[..], [Message::MirrorInFlight(_)]));
    assert!(
        views
            .mirror_turn(t0 + Duration::from_secs(40), true)
            .is_empty(),
        "one resync at a time"
    );
    // In flight: 8 is new; 7 is gone, so its record is read.
    let listed = vec![(record(8, "k", RunState::Running, &["b"]), Vec::new())];
    let out = views.mirror_in_flight(Ok(DbReply::InFlightDetails(listed)), true);
    assert!(out.is_empty());
    assert_eq!(views.mirror.newest_of("k"), Some(8));
    assert_eq!(
        lines(views.mirror_turn(t0 + Duration::from_secs(10), true)),
        ["db GetRun(7)"]
    );
    assert!(
        views
            .mirror_turn(t0 + Duration::from_secs(20), true)
            .is_empty()
    );
    let sent = lines(views.mirror_turn(t0 + Duration::from_secs(30), true));
    assert_eq!(sent, ["db InFlightDetails"]);
    // db's listener connected again: a resync at once.
    let _ = views.mirror_in_flight(lost(), true);
    views.mirror_notice(
        LiveNotice {
            resync: true,
            changes: Vec::new(),
        },
        true,
    );
    let sent = lines(views.mirror_turn(t0 + Duration::from_secs(31), true));
    assert_eq!(sent, ["db InFlightDetails"]);
}

#[test]
fn taking_over_forgets_the_adopted_runs_and_reads_the_others_once_more() {
    let mut views = Views::default();
    for run in [7, 8] {
        views
            .mirror
            .insert(record(run, "j", RunState::Running, &["a"]));
    }
    let others: Vec<RunId> = views.mirrored_runs().filter(|r| *r != 7).collect();
    let sent = lines(views.mirror_adopted(vec![7], others));
    assert_eq!(sent, ["hub UiForget([7])"]);
    assert_eq!(
        lines(views.mirror_turn(Instant::now(), false)),
        ["db GetRun(8)"]
    );
    // Seen after taking over and not adopted: the orphan sweep takes it up.
    let rec = record(8, "j", RunState::Running, &["a"]);
    assert!(
        views
            .mirror_run(8, Ok(DbReply::Run(Some(rec))), false, false)
            .is_empty()
    );
    assert_eq!(views.mirrored_count(), 0);
    // A run adopted since its read went out leaves the mirror at its reply.
    views
        .mirror
        .insert(record(9, "j", RunState::Running, &["a"]));
    let rec = record(9, "j", RunState::Running, &["a"]);
    let sent = lines(views.mirror_run(9, Ok(DbReply::Run(Some(rec))), true, false));
    assert_eq!(sent, ["hub UiForget([9])"]);
}
