//! The notifier's rules, without sockets or a clock: what a run's end or a skipped slot
//! queues, the hourly rate limit, the outbox's pump and its numbers.

use super::outbox::{self, MAX_IN_FLIGHT};
use super::*;
use crate::ipc::Role;
use crate::ipc::rpc::CallError;
use crate::roles::main::messages::{Attempt, BlockingResult, Cmd, DbResult};
use crate::wire::db::DbReply;
use crate::wire::link::{BlockingReply, BlockingRequest};
use crate::wire::notify::{DeliveryAttempt, DueDeliveries, DueDelivery, MailTransport};
use crate::wire::records::{RunRecord, TargetState, Trigger};

const URL: &str = "https://hooks.example/T/secret-path";
/// How the log and events show [`URL`].
const SHOWN: &str = "https://hooks.example/…";
const NOW: Millis = 1_000_000;

/// A job `j` with the `notify` rules of `rules` (YAML, indented for the job).
fn job(rules: &str) -> Job {
    let yaml =
        format!("j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n  notify:\n{rules}");
    let loaded = crate::config::check_yaml(&yaml, chrono::Utc::now());
    match loaded.valid_jobs().next() {
        Some(j) => j.clone(),
        None => panic!("no job: {:?}", loaded.diagnostics),
    }
}

fn on_failure_and_always() -> Job {
    job(&format!(
        "    - on: [failure]\n      webhook: {URL}\n    - on: [always]\n      email: ops@example.com\n"
    ))
}

fn target(machine: &str, state: TargetState, reason: Option<TargetReason>) -> TargetRecord {
    TargetRecord {
        machine: machine.to_string(),
        state,
        reason,
        exit_code: Some(1),
        started: Some(NOW - 5_000),
        ended: Some(NOW),
        suspended: false,
        waiting: None,
        limits: None,
        server: None,
    }
}

fn end<'a>(job: &'a Job, run: RunId, state: RunState) -> FinishedRun<'a> {
    FinishedRun {
        job,
        run,
        slot: Some(60_000),
        trigger: "schedule",
        state,
        reason: None,
        targets: vec![target("a", TargetState::Finished, None)],
    }
}

/// The db requests of `out`, in order.
fn db_requests(out: &Out) -> Vec<&DbRequest> {
    out.cmds()
        .iter()
        .filter_map(|c| match c {
            Cmd::Db { req, .. } => Some(req),
            _ => None,
        })
        .collect()
}

/// The events of `out`: (kind, message).
fn events(out: &Out) -> Vec<(&'static str, String)> {
    out.cmds()
        .iter()
        .filter_map(|c| match c {
            Cmd::Event(e) => Some((e.kind, e.message.clone())),
            _ => None,
        })
        .collect()
}

/// The messages `out` queues.
fn queued(out: &Out) -> Vec<&NewDelivery> {
    db_requests(out)
        .into_iter()
        .filter_map(|r| match r {
            DbRequest::QueueDeliveries(new) => Some(new.iter()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The limit of the take of due messages `out` asks for, if it asks.
fn take_limit(out: &Out) -> Option<usize> {
    db_requests(out).into_iter().find_map(|r| match r {
        DbRequest::TakeDueDeliveries { limit, .. } => Some(*limit),
        _ => None,
    })
}

/// The message db's reply `result` to the (only) told db call of `out` becomes.
fn told(out: Out, result: DbResult) -> Message {
    for cmd in out.into_cmds() {
        if let Cmd::Db {
            then: Then::Tell(to),
            ..
        } = cmd
        {
            return to(result);
        }
    }
    panic!("no db call told back");
}

/// The messages blocking's answers `results` to the deliveries of `out` become.
fn answers(out: Out, mut result: impl FnMut() -> BlockingResult) -> Vec<Message> {
    out.into_cmds()
        .into_iter()
        .filter_map(|cmd| match cmd {
            Cmd::Blocking {
                req: BlockingRequest::Deliver(_),
                local: false,
                tell,
            } => Some(tell(result())),
            _ => None,
        })
        .collect()
}

fn attempt(event: &str, attempts: u32) -> Attempt {
    Attempt {
        id: 9,
        attempts,
        job: Some("j".into()),
        run: Some(7),
        event: event.into(),
        destination: SHOWN.into(),
    }
}

fn due(n: u64, next_due: Option<Millis>) -> DbResult {
    let d = |id| DueDelivery {
        id,
        attempts: 0,
        job: Some("j".into()),
        run: Some(7),
        event: "failure".into(),
        message: Outgoing::Webhook {
            url: URL.into(),
            body: "{}".into(),
            signature: None,
            delivery_key: format!("k{id}"),
        },
    };
    Ok(DbReply::DueDeliveries(DueDeliveries {
        due: (1..=n).map(d).collect(),
        next_due,
        pending: n,
        oldest_pending: Some(NOW - 1_000),
    }))
}

#[test]
fn a_run_end_that_fires_reads_the_tails_then_queues_one_message_per_rule() {
    let sp = SaltpeterConfig::default();
    let job = on_failure_and_always();
    let mut n = Notifier::default();
    let out = n.run_ended(&sp, end(&job, 7, RunState::Failed), NOW);
    assert!(matches!(
        db_requests(&out)[..],
        [DbRequest::OutputTails { run: 7, .. }]
    ));
    let tails = vec![("a".to_string(), "disk full".to_string())];
    let Message::NotifyTailsRead { decided, result } = told(out, Ok(DbReply::OutputTails(tails)))
    else {
        panic!("not the tails");
    };
    let out = n.tails_read(sp.notify_rate_limit, *decided, result, NOW);
    let keys: Vec<&str> = queued(&out).iter().map(|d| d.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            format!("run:7:failed:webhook:{URL}").as_str(),
            "run:7:failed:email:ops@example.com"
        ]
    );
    let new = queued(&out);
    assert_eq!(new[0].event, "failure");
    assert_eq!(new[1].event, "always");
    assert!(new.iter().all(|d| d.now == NOW && d.run == Some(7)));
    match &new[0].message {
        Outgoing::Webhook { body, .. } => assert!(body.contains("disk full"), "{body}"),
        other => panic!("not a webhook: {other:?}"),
    }
    assert!(events(&out).is_empty());
}

#[test]
fn tails_that_cannot_be_read_leave_the_messages_without_them() {
    let sp = SaltpeterConfig::default();
    let job = on_failure_and_always();
    let mut n = Notifier::default();
    let out = n.run_ended(&sp, end(&job, 7, RunState::Failed), NOW);
    let Message::NotifyTailsRead { decided, result } =
        told(out, Err(CallError::PeerGone(Role::Db)))
    else {
        panic!("not the tails");
    };
    let out = n.tails_read(sp.notify_rate_limit, *decided, result, NOW);
    assert_eq!(queued(&out).len(), 2);
}

#[test]
fn a_lost_target_is_in_the_key_so_a_corrected_end_is_news() {
    let sp = SaltpeterConfig::default();
    let job = on_failure_and_always();
    let mut n = Notifier::default();
    let mut lost = end(&job, 7, RunState::Failed);
    lost.targets = vec![target("a", TargetState::Finished, Some(TargetReason::Lost))];
    let out = n.run_ended(&sp, lost, NOW);
    let Message::NotifyTailsRead { decided, .. } = told(out, Ok(DbReply::OutputTails(vec![])))
    else {
        panic!("not the tails");
    };
    assert_eq!(decided.key, "run:7:failed+lost");
}

#[test]
fn recovery_remembers_the_last_end_and_skips_do_not_count() {
    let sp = SaltpeterConfig::default();
    let job = job("    - on: [recovery]\n      email: ops@example.com\n");
    let mut n = Notifier::default();
    // Nothing before: a success is no recovery.
    assert!(
        n.run_ended(&sp, end(&job, 1, RunState::Succeeded), NOW)
            .is_empty()
    );
    assert!(
        n.run_ended(&sp, end(&job, 2, RunState::Failed), NOW)
            .is_empty()
    );
    // A skip in between does not hide the failure.
    assert!(
        n.run_ended(&sp, end(&job, 3, RunState::Skipped), NOW)
            .is_empty()
    );
    let out = n.run_ended(&sp, end(&job, 4, RunState::Succeeded), NOW);
    assert!(matches!(
        db_requests(&out)[..],
        [DbRequest::OutputTails { run: 4, .. }]
    ));
}

#[test]
fn the_last_runs_read_at_start_give_way_to_ends_seen_since() {
    let sp = SaltpeterConfig::default();
    let job = job("    - on: [recovery]\n      email: ops@example.com\n");
    let mut n = Notifier::default();
    let out = n.start(NOW);
    assert!(matches!(
        db_requests(&out)[..],
        [
            DbRequest::ReleaseDeliveryLeases { now: NOW },
            DbRequest::LastRuns
        ]
    ));
    // A success ended before db answered: the failure it read is older.
    let _ = n.run_ended(&sp, end(&job, 5, RunState::Succeeded), NOW);
    let record = |state| RunRecord {
        id: 4,
        job: "j".into(),
        slot: Some(0),
        trigger: Trigger::Schedule,
        state,
        reason: None,
        started: None,
        ended: None,
        targets: Vec::new(),
        attempts: Vec::new(),
    };
    let Message::NotifyLastRuns { result } = told(
        out,
        Ok(DbReply::LastRuns(
            [("j".to_string(), record(RunState::Failed))].into(),
        )),
    ) else {
        panic!("not the last runs");
    };
    n.last_runs(result);
    assert!(
        n.run_ended(&sp, end(&job, 6, RunState::Succeeded), NOW)
            .is_empty(),
        "succeeded after succeeded: no recovery"
    );
}

#[test]
fn the_hourly_rate_limit_suppresses_with_an_event() {
    let sp = SaltpeterConfig {
        notify_rate_limit: 1,
        ..Default::default()
    };
    let job = on_failure_and_always();
    let mut n = Notifier::default();
    let out = n.run_ended(&sp, end(&job, 7, RunState::Failed), NOW);
    let Message::NotifyTailsRead { decided, result } = told(out, Ok(DbReply::OutputTails(vec![])))
    else {
        panic!("not the tails");
    };
    let out = n.tails_read(sp.notify_rate_limit, *decided, result, NOW);
    assert_eq!(queued(&out).len(), 1);
    assert_eq!(
        events(&out),
        [(
            "notification_suppressed",
            "always to ops@example.com not sent: more than 1 notifications of this job in an \
             hour"
                .to_string()
        )]
    );
    // An hour later the job may send again.
    let out = n.slot_skipped(&sp, &job, 120_000, "overlap", false, NOW + 3_600_000);
    assert_eq!(queued(&out).len(), 1);
    assert!(events(&out).is_empty());
}

#[test]
fn a_skipped_slot_is_queued_at_once_keyed_by_its_slot() {
    let sp = SaltpeterConfig::default();
    let job = job("    - on: [missed]\n      email: ops@example.com\n");
    let mut n = Notifier::default();
    assert!(
        n.slot_skipped(&sp, &job, 60_000, "overlap", false, NOW)
            .is_empty()
    );
    let out = n.slot_skipped(&sp, &job, 60_000, "missed", true, NOW);
    let new = queued(&out);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].key, "slot:j:60000:email:ops@example.com");
    assert_eq!(new[0].run, None);
    assert_eq!(new[0].event, "missed");
}

#[test]
fn jobs_without_rules_use_the_global_ones() {
    let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n";
    let loaded = crate::config::check_yaml(yaml, chrono::Utc::now());
    let Some(job) = loaded.valid_jobs().next() else {
        panic!("no job: {:?}", loaded.diagnostics);
    };
    let mut sp = SaltpeterConfig::default();
    let mut n = Notifier::default();
    assert!(
        n.slot_skipped(&sp, job, 60_000, "overlap", false, NOW)
            .is_empty()
    );
    sp.notify = on_failure_and_always().notify.unwrap_or_default();
    let out = n.slot_skipped(&sp, job, 60_000, "overlap", false, NOW);
    assert_eq!(queued(&out).len(), 1, "`always` fires on a skip");
}

#[test]
fn the_pump_takes_what_is_due_at_most_four_at_a_time_one_take_at_a_time() {
    let sp = SaltpeterConfig::default();
    let mut n = Notifier::default();
    assert!(n.tick(NOW).is_empty(), "nothing pending before start");
    let _ = n.start(NOW);
    let take = n.tick(NOW);
    assert_eq!(take_limit(&take), Some(MAX_IN_FLIGHT));
    assert!(n.tick(NOW).is_empty(), "one take at a time");
    let Message::DeliveriesDue { result } = told(take, due(4, Some(NOW))) else {
        panic!("not the due messages");
    };
    let sent = n.due(&sp, result, NOW);
    assert_eq!(n.outbox().pending(), 4);
    assert_eq!(take_limit(&sent), None, "no room left");
    let mut answers = answers(sent, || Ok(BlockingReply::Delivered(Ok("204".into()))));
    assert_eq!(answers.len(), 4);
    assert!(n.tick(NOW).is_empty(), "no room");
    let Some(Message::DeliveryAnswered { attempt, result }) = answers.pop() else {
        panic!("not an answer");
    };
    let out = n.answered(attempt, result, NOW);
    assert_eq!(
        events(&out),
        [(
            "notification_delivered",
            format!("failure to {SHOWN}: 204 (attempt 1)")
        )]
    );
    assert!(matches!(
        db_requests(&out)[..],
        [
            DbRequest::RecordDeliveryAttempt(DeliveryAttempt {
                id: 4,
                retry_at: None,
                ..
            }),
            DbRequest::TakeDueDeliveries { limit: 1, .. }
        ]
    ));
    assert_eq!(n.outbox().pending(), 3);
    assert_eq!(n.outbox().attempts("delivered"), 1);
}

#[test]
fn queued_messages_are_taken_at_once_and_a_failed_take_waits_five_seconds() {
    let sp = SaltpeterConfig::default();
    let mut n = Notifier::default();
    let take = n.queued(Ok(DbReply::DeliveriesQueued(1)), NOW);
    assert_eq!(take_limit(&take), Some(MAX_IN_FLIGHT));
    let Message::DeliveriesDue { result } = told(take, Err(CallError::PeerGone(Role::Db))) else {
        panic!("not the due messages");
    };
    assert!(n.due(&sp, result, NOW).is_empty());
    assert!(n.tick(NOW + 4_999).is_empty());
    assert_eq!(take_limit(&n.tick(NOW + 5_000)), Some(MAX_IN_FLIGHT));
}

#[test]
fn with_nothing_due_the_outbox_is_counted_again_within_a_minute() {
    let sp = SaltpeterConfig::default();
    let mut n = Notifier::default();
    let _ = n.start(NOW);
    let take = n.tick(NOW);
    let Message::DeliveriesDue { result } = told(take, due(0, Some(NOW + 600_000))) else {
        panic!("not the due messages");
    };
    assert!(n.due(&sp, result, NOW).is_empty());
    assert!(n.tick(NOW + 59_999).is_empty());
    assert!(take_limit(&n.tick(NOW + 60_000)).is_some());
}

#[test]
fn a_failed_attempt_is_tried_again_later_and_the_last_is_given_up() {
    let mut n = Notifier::default();
    let why = || Ok(BlockingReply::Delivered(Err("connection refused".into())));
    let out = n.answered(attempt("failure", 0), why(), NOW);
    assert_eq!(
        events(&out),
        [(
            "notification_failed",
            format!("failure to {SHOWN}: connection refused (attempt 1; next in 5 s)")
        )]
    );
    assert!(matches!(
        db_requests(&out)[..],
        [DbRequest::RecordDeliveryAttempt(DeliveryAttempt {
            retry_at: Some(at),
            ..
        })] if *at == NOW + 5_000
    ));
    // The retry is due then, not before.
    assert!(n.tick(NOW + 4_999).is_empty());
    assert!(take_limit(&n.tick(NOW + 5_000)).is_some());
    let mut n = Notifier::default();
    let out = n.answered(attempt("failure", notify::MAX_ATTEMPTS - 1), why(), NOW);
    assert_eq!(events(&out)[0].0, "notification_given_up");
    assert!(events(&out)[0].1.ends_with("(attempt 30, the last)"));
    // blocking gone is a failed attempt like any other.
    let out = n.answered(
        attempt("export", 0),
        Err(CallError::PeerGone(Role::Blocking)),
        NOW,
    );
    assert_eq!(
        events(&out),
        [(
            "export_failed",
            format!("to {SHOWN}: the blocking process went away before answering (attempt 1)")
        )]
    );
    assert_eq!(n.outbox().attempts("failed"), 1);
    assert_eq!(n.outbox().attempts("given_up"), 1);
}

#[test]
fn the_outbox_shrinks_as_messages_are_settled_and_attempts_count_by_result() {
    let mut o = Outbox::default();
    o.counted(2, Some(1_000));
    o.attempted(false, true);
    assert_eq!(
        (o.pending(), o.oldest()),
        (2, Some(1_000)),
        "retried: still pending"
    );
    o.attempted(true, false);
    assert_eq!(o.pending(), 1);
    o.attempted(false, false);
    assert_eq!(
        (o.pending(), o.oldest()),
        (0, None),
        "given up: gone, and no oldest"
    );
    o.attempted(true, false);
    assert_eq!(o.pending(), 0, "never below zero");
    let counts: Vec<u64> = DELIVERY_RESULTS.iter().map(|r| o.attempts(r)).collect();
    assert_eq!(counts, [2, 1, 1]);
}

#[test]
fn mail_goes_with_the_smtp_password_and_a_webhook_without() {
    let sp = SaltpeterConfig {
        smtp: Some(("mail.example".into(), None)),
        smtp_user: Some("sp".into()),
        smtp_password: Some(crate::config::Secret::new("pw")),
        ..Default::default()
    };
    let d = |message| DueDelivery {
        id: 1,
        attempts: 0,
        job: None,
        run: None,
        event: "failure".into(),
        message,
    };
    let mail = outbox::order(
        &sp,
        d(Outgoing::Email {
            to: vec!["ops@example.com".into()],
            subject: "s".into(),
            body: "b".into(),
        }),
        "saltpeter@here".into(),
    );
    assert_eq!(mail.smtp_auth, Some(("sp".into(), "pw".into())));
    assert_eq!(mail.mail_from, "saltpeter@here");
    assert!(matches!(mail.mail, MailTransport::Smtp { .. }));
    let hook = outbox::order(
        &sp,
        d(Outgoing::Webhook {
            url: URL.into(),
            body: "{}".into(),
            signature: None,
            delivery_key: "k".into(),
        }),
        "saltpeter@here".into(),
    );
    assert_eq!(hook.smtp_auth, None);
    assert_eq!(hook.basic_auth, None);
}
