//! The rounds' pure rules and the part's methods, the time pinned.

use super::*;

fn settings() -> SaltSettings {
    SaltSettings {
        salt_bin: "salt".into(),
        config_dir: None,
        timeout_s: 20,
        concurrency: 4,
        bridge: true,
    }
}

fn q(run: RunId, minions: &[&str]) -> Queued {
    Queued {
        run,
        url: "wss://s/wrapper/v1".into(),
        wrapper_path: "/w".into(),
        minions: minions.iter().map(|m| m.to_string()).collect(),
        settings: settings(),
        urgent: false,
    }
}

#[test]
fn runs_on_the_same_minions_are_one_publish() {
    let all = ["m1", "m2", "m3"];
    let groups = group((1..=20).map(|r| q(r, &all)).collect());
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].runs, (1..=20).collect::<Vec<_>>());
    assert_eq!(groups[0].minions, ["m1", "m2", "m3"]);
}

#[test]
fn one_publish_per_distinct_set_of_runs() {
    let groups = group(vec![
        q(1, &["a", "b"]),
        q(2, &["b", "c"]),
        q(3, &["a", "b"]),
    ]);
    let shape: Vec<(Vec<RunId>, Vec<String>)> =
        groups.into_iter().map(|g| (g.runs, g.minions)).collect();
    assert_eq!(
        shape,
        vec![
            (vec![1, 2, 3], vec!["b".to_string()]),
            (vec![1, 3], vec!["a".to_string()]),
            (vec![2], vec!["c".to_string()]),
        ]
    );
}

#[test]
fn other_urls_paths_or_settings_publish_apart() {
    let mut other_url = q(2, &["a"]);
    other_url.url = "wss://t/wrapper/v1".into();
    let mut other_path = q(3, &["a"]);
    other_path.wrapper_path = "/v".into();
    let mut other_salt = q(4, &["a"]);
    other_salt.settings.timeout_s = 5;
    let groups = group(vec![q(1, &["a"]), other_url, other_path, other_salt]);
    assert_eq!(groups.len(), 4);
}

#[test]
fn a_round_goes_when_complete_urgent_or_overdue() {
    let t0 = Instant::now();
    let mut r = Rounds::default();
    assert!(!r.due(t0, false), "nothing queued");
    r.join(100);
    r.join(100);
    r.leave(100);
    r.queue(q(1, &["a"]), t0);
    assert!(!r.due(t0, false), "a run of the round is still on its way");
    assert!(r.due(t0 + ROUND_WAIT, false), "waited long enough");
    assert!(!r.due(t0 + ROUND_WAIT, true), "an ordered stop holds it");
    r.leave(100);
    assert!(r.due(t0, false), "the round is complete");
    r.join(200);
    let mut manual = q(2, &["a"]);
    manual.urgent = true;
    r.queue(manual, t0);
    assert!(r.due(t0, false), "a manual run does not wait");
    assert_eq!(r.take_groups().len(), 1);
    assert!(r.deadline().is_none());
}

#[test]
fn the_launch_latency_is_the_publish_to_its_last_wrapper() {
    let t0 = Instant::now();
    let mut r = Rounds::default();
    let id: PublishId = 7;
    r.await_arrivals(id, &[1], &["a".into(), "b".into()], t0);
    let s = Duration::from_secs(1);
    assert_eq!(r.arrived(1, "a", t0 + s), None, "one of two");
    assert_eq!(
        r.arrived(1, "a", t0 + 2 * s),
        None,
        "a reconnect is not news"
    );
    assert_eq!(r.arrived(1, "b", t0 + 3 * s), Some(3 * s));
    assert!(r.arrivals.is_empty() && r.awaited.is_empty());
    // A minion that never calls back: the publish counts with the last that did.
    r.await_arrivals(id, &[2], &["a".into(), "dead".into()], t0);
    assert_eq!(r.arrived(2, "a", t0 + s), None);
    assert!(r.overdue_arrivals(t0 + s).is_empty(), "not overdue yet");
    assert_eq!(r.overdue_arrivals(t0 + ARRIVALS_FOR), vec![s]);
    assert!(r.arrivals.is_empty() && r.awaited.is_empty());
}

#[test]
fn a_due_round_is_one_launch_and_its_answer_goes_to_each_run() {
    let t0 = Instant::now();
    let mut r = Rounds::default();
    r.queue(q(1, &["a", "b"]), t0);
    r.queue(q(2, &["a", "b"]), t0);
    let (out, late) = r.flush(t0, true, |_, _| false);
    assert!(
        out.is_empty() && late.is_empty(),
        "an ordered stop holds it"
    );
    let (out, late) = r.flush(t0, false, |m, _| m == "b");
    assert!(late.is_empty());
    assert_eq!(out.cmds().len(), 1);
    match &out.cmds()[0] {
        crate::roles::main::messages::Cmd::Blocking {
            req:
                BlockingRequest::Launch {
                    runs,
                    await_returns,
                    ..
                },
            local: false,
            ..
        } => {
            assert_eq!(runs, &vec![1, 2]);
            assert!(await_returns, "b's wrapper was never seen");
        }
        _ => panic!("not a launch"),
    }
    assert_eq!(r.publishes(), 1);
    let outcome = MinionOutcome {
        machine: "a".into(),
        result: Ok(()),
        silent: None,
        unreachable: None,
        server: None,
    };
    let reply = crate::wire::link::BlockingReply::Launched(vec![(1, outcome)]);
    let s = Duration::from_secs(2);
    let answered = r.answered(vec![1, 2], t0, Ok(reply), false, t0 + s);
    assert_eq!(
        answered,
        Some(Answered {
            took: s,
            runs: vec![1, 2]
        })
    );
    assert_eq!(
        r.take_answer(1).map(|a| a.outcomes.map(|o| o.len())),
        Some(Ok(1))
    );
    assert_eq!(
        r.take_answer(2).map(|a| a.outcomes.map(|o| o.len())),
        Some(Ok(0))
    );
    assert!(r.take_answer(1).is_none(), "taken once");
}

#[test]
fn a_failed_launch_fails_its_runs_unless_stopping() {
    let t0 = Instant::now();
    let mut r = Rounds::default();
    let lost = || Err(crate::ipc::CallError::PeerGone(crate::ipc::Role::Blocking));
    assert_eq!(r.answered(vec![1], t0, lost(), true, t0), None);
    assert!(r.take_answer(1).is_none(), "handed over to the next start");
    assert!(r.answered(vec![1], t0, lost(), false, t0).is_some());
    assert!(matches!(
        r.take_answer(1),
        Some(Answer { outcomes: Err(_) })
    ));
}
