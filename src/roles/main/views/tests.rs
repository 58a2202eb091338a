//! The views' tests: what crosses their pieces (a run's change and end, the dashboard's
//! views, the start of a live view, following a run the leader drives), and the helpers
//! the pieces' own tests share. Pure: no sockets, the time pinned.

use std::collections::BTreeMap;
use std::time::Instant;

use super::*;
use crate::config::LoadedConfig;
use crate::ipc::rpc::{CallError, RemoteError};
use crate::roles::main::messages::{Cmd, DbResult};
use crate::roles::main::views::ui::render::Shown;
use crate::wire::db::{DbReply, OutputBytes};
use crate::wire::records::{RunState, TargetState, Trigger};

/// A target as stored.
pub(crate) fn target(machine: &str, state: TargetState) -> TargetRecord {
    TargetRecord {
        machine: machine.to_string(),
        state,
        reason: None,
        exit_code: None,
        started: None,
        ended: None,
        suspended: false,
        waiting: None,
        limits: None,
        server: None,
    }
}

/// Run `id` of `job` as stored, in `state`, with running targets on `machines`.
pub(crate) fn record(id: RunId, job: &str, state: RunState, machines: &[&str]) -> RunRecord {
    RunRecord {
        id,
        job: job.to_string(),
        slot: Some(1_000),
        trigger: Trigger::Schedule,
        state,
        reason: None,
        started: Some(1_500),
        ended: None,
        targets: machines
            .iter()
            .map(|m| target(m, TargetState::Running))
            .collect(),
        attempts: Vec::new(),
    }
}

/// db's answer with `bytes`, the next read from `next_from`.
pub(crate) fn output(bytes: &[u8], next_from: u64) -> DbResult {
    Ok(DbReply::Output(OutputBytes {
        data: bytes.to_vec(),
        total_bytes: next_from,
        next_from,
        ..OutputBytes::default()
    }))
}

/// A db call that failed.
pub(crate) fn lost() -> DbResult {
    Err(CallError::Remote(RemoteError::Failed("db is gone".into())))
}

/// What a part asked for, in order: one line per command (`db <request>`, `hub
/// <message>`, `answer <call> <response>`, as their `Debug`), and the messages db's
/// replies become, given `reply` for each db call.
pub(crate) fn run(out: Out, reply: impl Fn(&DbRequest) -> DbResult) -> (Vec<String>, Vec<Message>) {
    let mut lines = Vec::new();
    let mut messages = Vec::new();
    for cmd in out.into_cmds() {
        match cmd {
            Cmd::Db { req, then, .. } => {
                lines.push(format!("db {req:?}"));
                match then {
                    Then::Tell(to) => messages.push(to(reply(&req))),
                    Then::Write(what) => panic!("the views write nothing, not {what}"),
                }
            }
            Cmd::Hub(msg) => lines.push(format!("hub {msg:?}")),
            Cmd::Answer(call, resp) => lines.push(format!("answer {call} {resp:?}")),
            Cmd::Event(_) | Cmd::Post(_) | Cmd::Blocking { .. } => {
                panic!("the views record no events, post nothing, call no blocking")
            }
        }
    }
    (lines, messages)
}

/// What a part asked for, one line per command (db calls are not answered).
pub(crate) fn lines(out: Out) -> Vec<String> {
    run(out, |_| lost()).0
}

fn config() -> LoadedConfig {
    let yaml = "j:\n  schedule: '0 * * * *'\n  command: 'true'\n  targets: a\n\
                k:\n  schedule: '0 * * * *'\n  command: 'true'\n  targets: a\n";
    crate::config::check_yaml(yaml, chrono::Utc::now())
}

/// The dashboard's views of what changed, with no run in flight here, at `now`.
fn flush(views: &mut Views, config: &LoadedConfig, now: Millis) -> Vec<String> {
    let shown = Shown {
        config,
        runs: std::iter::empty,
        next_of: |_: &str| Some(9_000),
        now,
        instant: Instant::now(),
    };
    match views.ui_changes(&shown) {
        Some(changes) => lines(views.ui.sent(changes)),
        None => Vec::new(),
    }
}

/// `/metrics` as the views count, the other parts' gauges all zero.
pub(crate) fn metrics_text(views: &Views, config: &LoadedConfig) -> String {
    let gauges = metrics::Gauges {
        config,
        publishes: 0,
        deployments: 0,
        prestage_leads: Vec::new(),
        wrappers_connected: 0,
        runs_in_flight: 0,
        targets_suspended: 0,
        targets_throttled: 0,
        ha: None,
        storage_trouble: false,
        db_write_failures: 0,
        slots_refused: 0,
        outcomes_unstored: 0,
        stalls: 0,
        outbox: &crate::roles::main::notify::Outbox::default(),
        now: 0,
    };
    metrics::render(views.metrics(), &gauges)
}

fn status_of(line: &str) -> bool {
    line.starts_with("hub UiStatus")
}

#[test]
fn a_run_that_ended_is_its_jobs_last_run_counted_from_when_it_was_first_seen() {
    let mut views = Views::default();
    let config = config();
    let out = views.run_changed(7, "j", Vec::new(), 2_000);
    assert!(out.is_empty(), "no watcher: nothing to stream");
    // Seen again later: the start stays the first sighting.
    let _ = views.run_changed(7, "j", Vec::new(), 2_500);
    let end = FinishedRun {
        run: 7,
        job: "j".into(),
        state: RunState::Succeeded,
        slot: Some(1_000),
        trigger: Trigger::Schedule,
        targets: vec![target("a", TargetState::Finished)],
        waiters: vec![3],
    };
    let out = views.run_ended(end, 6_000);
    assert!(out.is_empty(), "no follower: nothing to read");
    let sent = flush(&mut views, &config, 6_000);
    let status = sent.iter().find(|l| status_of(l));
    let expected = "LastStateView { job: \"j\", last_run: Some(2000), result_ok: true }";
    assert!(status.is_some_and(|s| s.contains(expected)), "{sent:?}");
    let text = metrics_text(&views, &config);
    let duration = "saltpeter_run_duration_seconds_sum 4\n";
    assert!(
        text.contains(duration),
        "4 s from the first sighting: {text}"
    );
    assert!(text.contains("saltpeter_runs_total{state=\"succeeded\"} 1\n"));
}

#[test]
fn the_dashboard_gets_the_configuration_then_a_new_status_then_the_watched_details() {
    let mut views = Views::default();
    let config = config();
    let _ = views.start();
    views.ui.config_changed(config.jobs.keys());
    views.ui.watch("k".into(), true);
    let sent = flush(&mut views, &config, 5_000);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent[0].starts_with("hub UiConfig") && sent[0].contains("serial: 5000"));
    assert!(status_of(&sent[1]), "{sent:?}");
    assert!(sent[2].starts_with("hub UiDetails") && sent[2].contains("job: \"k\""));
    assert!(sent[2].contains("next_run: Some(9000)"), "{sent:?}");
    assert!(
        flush(&mut views, &config, 6_000).is_empty(),
        "nothing changed"
    );
    // `k` changed, and the status did not: only its details go out.
    views.ui.job_changed("k");
    let sent = flush(&mut views, &config, 7_000);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with("hub UiDetails"));
    // `j` changed, unwatched and the status the same: nothing goes out.
    views.ui.job_changed("j");
    assert!(flush(&mut views, &config, 8_000).is_empty());
}

#[test]
fn a_skipped_slot_for_overlap_shows_in_the_details_until_the_next_run_ends() {
    let mut views = Views::default();
    let config = config();
    views.ui.watch("j".into(), true);
    views.slot_fired(
        "j",
        1_500,
        Some("overlap: the previous run of j is still going"),
    );
    let sent = flush(&mut views, &config, 5_000);
    assert!(sent.iter().any(|l| l.contains("overlap: true")), "{sent:?}");
    let end = FinishedRun {
        run: 7,
        job: "j".into(),
        state: RunState::Failed,
        slot: None,
        trigger: Trigger::Manual,
        targets: Vec::new(),
        waiters: Vec::new(),
    };
    let _ = views.run_ended(end, 6_000);
    let sent = flush(&mut views, &config, 6_000);
    assert!(
        sent.iter().any(|l| l.contains("overlap: false")),
        "{sent:?}"
    );
    let text = metrics_text(&views, &config);
    assert!(
        text.contains("saltpeter_schedule_lateness_seconds_sum 1.5\n"),
        "{text}"
    );
}

#[test]
fn a_live_view_here_starts_with_what_went_to_db() {
    let mut views = Views::default();
    views.output_framed(7, "a", 12, 100, true);
    views.output_framed(7, "a", 9, 100, true);
    views.output_framed(8, "a", 50, 100, false);
    let cases = [
        (Some(5), 12, "the frames passed to db"),
        (Some(20), 20, "what db committed"),
        (None, u64::MAX, "a run over: everything is stored"),
    ];
    for (acked, upto, why) in cases {
        let (lines, messages) = run(views.live_base(3, 7, "a".into(), acked), |_| lost());
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("tail: Some(1048576)"), "{lines:?}");
        match &messages[..] {
            [
                Message::LiveBase {
                    call: 3, upto_seq, ..
                },
            ] => assert_eq!(*upto_seq, upto, "{why}"),
            _ => panic!("not a LiveBase read"),
        }
    }
    let text = metrics_text(&views, &config());
    assert!(text.contains("saltpeter_output_frames_total 3\n"), "{text}");
    assert!(
        text.contains("saltpeter_output_bytes_total 300\n"),
        "{text}"
    );
    let answer = live_base(3, 12, output(b"hi", 2));
    assert!(answer[0].starts_with("answer 3 LiveOutput"), "{answer:?}");
    assert!(answer[0].contains("upto_seq: 12"), "{answer:?}");
}

fn live_base(call: CallId, upto: u64, result: DbResult) -> Vec<String> {
    lines(answer::live_base_read(call, upto, result))
}

#[test]
fn a_standby_follows_a_run_the_leader_drives_and_mirrors_it_from_then_on() {
    let mut views = Views::default();
    let config = config();
    let spec = FollowSpec {
        run: Some(7),
        job: None,
        machine: None,
        stream: None,
        tail: None,
        live: true,
    };
    let _ = views.follow(3, spec, None);
    let rec = record(7, "j", RunState::Running, &["a"]);
    let sent = lines(views.follow_run(3, Ok(Some(rec.clone())), false, true));
    assert!(sent[0].contains("live: true"), "{sent:?}");
    assert_eq!(views.mirrored_count(), 1);
    let status = flush(&mut views, &config, 5_000);
    assert!(
        status
            .iter()
            .any(|l| l.contains("RunningView { job: \"j\", run: 7"))
    );
    // Not a standby: the run is over as far as this server knows.
    let mut leader = Views::default();
    let _ = leader.follow(
        3,
        FollowSpec {
            run: Some(7),
            job: None,
            machine: None,
            stream: None,
            tail: None,
            live: true,
        },
        None,
    );
    let sent = lines(leader.follow_run(3, Ok(Some(rec)), false, false));
    assert!(sent[0].contains("live: false"), "{sent:?}");
    assert_eq!(leader.mirrored_count(), 0);
}

#[test]
fn a_job_followed_live_starts_at_its_newest_run_here_or_mirrored() {
    let spec = |live| FollowSpec {
        run: None,
        job: Some("j".into()),
        machine: None,
        stream: None,
        tail: None,
        live,
    };
    let mut views = Views::default();
    views
        .mirror
        .insert(record(5, "j", RunState::Running, &["a"]));
    views
        .mirror
        .insert(record(6, "k", RunState::Running, &["a"]));
    let sent = lines(views.follow(3, spec(true), None));
    assert_eq!(sent, ["db GetRun(5)"], "the mirrored run");
    let sent = lines(views.follow(4, spec(true), Some(9)));
    assert_eq!(sent, ["db GetRun(9)"], "the run here first");
    let sent = lines(views.follow(5, spec(false), Some(9)));
    assert!(
        sent[0].starts_with("db ListRuns"),
        "not live: the history's newest"
    );
}

#[test]
fn watchers_of_a_run_hear_what_moved_once() {
    let mut views = Views::default();
    let mut snapshot = record(7, "j", RunState::Running, &["a", "b"]);
    snapshot.targets[1].state = TargetState::Pending;
    let sent = lines(views.live.watch(3, snapshot));
    assert!(sent[0].contains("RunProgress"), "{sent:?}");
    // `a` is pending now, `b` still.
    let targets: BTreeMap<String, Target> = [("a", Target::new(0)), ("b", Target::new(0))]
        .into_iter()
        .map(|(m, t)| (m.to_string(), t))
        .collect();
    let moved = views.live_progress(7, &targets);
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].1.machine, "a");
    let sent = lines(views.run_changed(7, "j", moved, 2_000));
    assert_eq!(sent.len(), 1);
    assert!(sent[0].contains("TargetProgress { run: 7") && sent[0].contains("\"a\""));
    assert!(views.live_progress(7, &targets).is_empty(), "heard already");
    views.live.run_gone(7);
    assert!(views.live_progress(7, &BTreeMap::new()).is_empty());
}
