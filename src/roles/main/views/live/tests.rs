//! Output followers, step by step: each db reply handed back as its message would be.

use super::*;
use crate::roles::main::views::tests::{lines, lost, output, record, run};
use crate::wire::db::DbReply;
use crate::wire::records::RunState;

fn spec(run: Option<RunId>, job: Option<&str>) -> FollowSpec {
    FollowSpec {
        run,
        job: job.map(str::to_string),
        machine: None,
        stream: None,
        tail: Some(100),
        live: true,
    }
}

/// The reads `out` asks for, as (machine, from, tail), and no other command.
fn reads(out: Out) -> Vec<(String, u64, Option<u64>)> {
    let mut reads = Vec::new();
    for cmd in out.into_cmds() {
        match cmd {
            crate::roles::main::messages::Cmd::Db {
                req: DbRequest::Output { machine, query, .. },
                ..
            } => reads.push((machine, query.from, query.tail)),
            _ => panic!("not a read of output"),
        }
    }
    reads
}

#[test]
fn a_follower_streams_each_target_and_answers_once_the_run_is_over_and_read() {
    let mut live = Live::default();
    let (sent, messages) = run(live.follow(3, spec(Some(7), None), None), |_| lost());
    assert_eq!(sent, ["db GetRun(7)"]);
    assert!(matches!(messages[..], [Message::FollowRun { call: 3, .. }]));
    let rec = record(7, "j", RunState::Running, &["a", "b"]);
    let sent = lines(live.run_read(3, Ok(Some(rec)), true));
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(
        sent[0]
            .contains("FollowStart { run: 7, job: \"j\", machines: [\"a\", \"b\"], live: true }")
    );
    assert!(sent[1].contains("machine: \"a\"") && sent[1].contains("tail: Some(100)"));
    // What `a` has: streamed, and its next read starts after it, without the tail.
    let sent = lines(live.output_read(3, "a", output(b"hello", 5)));
    assert_eq!(sent.len(), 1);
    assert!(sent[0].contains("OutputChunk { machine: \"a\""), "{sent:?}");
    assert_eq!(reads(live.output_stored(7, "a")), [("a".into(), 5, None)]);
    // `b`'s first read is out: what is committed meanwhile waits for its answer.
    assert!(live.output_stored(7, "b").is_empty());
    assert_eq!(
        reads(live.output_read(3, "b", output(b"", 0))),
        [("b".into(), 0, None)]
    );
    assert!(live.output_stored(8, "a").is_empty(), "another run");
    // The run ends while both reads are out: each is read once more, then the end.
    assert!(live.run_ended(7).is_empty());
    assert_eq!(
        reads(live.output_read(3, "a", output(b"", 5))),
        [("a".into(), 5, None)]
    );
    assert!(live.output_read(3, "a", output(b"", 5)).is_empty());
    assert_eq!(
        reads(live.output_read(3, "b", output(b"", 0))),
        [("b".into(), 0, None)]
    );
    let (sent, messages) = run(live.output_read(3, "b", output(b"", 0)), |_| lost());
    assert_eq!(sent, ["db GetRun(7)"]);
    assert!(matches!(messages[..], [Message::FollowEnd { call: 3, .. }]));
    let done = record(7, "j", RunState::Succeeded, &["a", "b"]);
    let sent = lines(live.end_read(3, Ok(DbReply::Run(Some(done)))));
    assert!(sent[0].starts_with("answer 3 Followed"), "{sent:?}");
    assert!(!live.follows(3));
}

#[test]
fn a_follower_of_a_job_reads_its_newest_run_in_history() {
    let mut live = Live::default();
    let (sent, messages) = run(live.follow(3, spec(None, Some("j")), None), |_| lost());
    assert!(sent[0].starts_with("db ListRuns"), "{sent:?}");
    assert!(sent[0].contains("job: Some(\"j\")") && sent[0].contains("limit: Some(1)"));
    assert!(matches!(
        messages[..],
        [Message::FollowLatest { call: 3, .. }]
    ));
    let runs = vec![record(4, "j", RunState::Failed, &["a"])];
    assert_eq!(
        lines(live.latest_read(3, Ok(DbReply::Runs(runs)))),
        ["db GetRun(4)"]
    );
    let sent = lines(live.run_read(3, Ok(Some(record(4, "j", RunState::Failed, &["a"]))), false));
    assert!(sent[0].contains("live: false"), "{sent:?}");
    // Read to the end and not in flight: the final answer follows.
    let sent = lines(live.output_read(3, "a", output(b"x", 1)));
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1], "db GetRun(4)");
}

#[test]
fn followers_that_cannot_follow_are_answered_at_once() {
    let mut live = Live::default();
    let sent = lines(live.follow(3, spec(None, None), None));
    assert!(
        sent[0].contains("Invalid(\"follow needs a run or a job\")"),
        "{sent:?}"
    );
    let _ = live.follow(4, spec(None, Some("j")), None);
    let sent = lines(live.latest_read(4, Ok(DbReply::Runs(Vec::new()))));
    assert!(
        sent[0].contains("NotFound(\"job j has no runs\")"),
        "{sent:?}"
    );
    let _ = live.follow(5, spec(Some(7), None), None);
    let sent = lines(live.run_read(5, Ok(None), true));
    assert!(sent[0].contains("NotFound(\"no run 7\")"), "{sent:?}");
    let mut only = spec(Some(7), None);
    only.machine = Some("z".into());
    let _ = live.follow(6, only, None);
    let rec = record(7, "j", RunState::Running, &["a"]);
    let sent = lines(live.run_read(6, Ok(Some(rec)), true));
    assert!(
        sent[0].contains("NotFound(\"z is not a target of run 7\")"),
        "{sent:?}"
    );
    let _ = live.follow(8, spec(Some(7), None), None);
    let why = CallError::Remote(crate::ipc::rpc::RemoteError::Failed("db is gone".into()));
    let sent = lines(live.run_read(8, Err(why), true));
    assert!(sent[0].contains("Internal"), "{sent:?}");
    for call in [3, 4, 5, 6, 8] {
        assert!(!live.follows(call), "call {call} is forgotten");
    }
}

#[test]
fn a_closed_connection_forgets_its_followers_and_watchers() {
    let mut live = Live::default();
    let _ = live.follow(3, spec(Some(7), None), None);
    let _ = live.watch(4, record(7, "j", RunState::Running, &["a"]));
    let _ = live.watch(5, record(7, "j", RunState::Running, &["a"]));
    live.calls_gone(&[3, 4]);
    assert!(!live.follows(3));
    assert_eq!(live.watchers.get(&7).map(Vec::len), Some(1));
    live.calls_gone(&[5]);
    assert!(live.watchers.is_empty());
}
