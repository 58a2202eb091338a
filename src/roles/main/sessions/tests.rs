//! The wrapper sessions' pure decisions and the `Sessions` part, without sockets or a
//! clock.

use std::time::{Duration, Instant};

use super::verdicts::*;
use super::{REFUSAL_RECORDS, REFUSAL_WINDOW, REFUSALS_PER_MINUTE, Refusal, Sessions};
use crate::roles::main::messages::{Cmd, Out};
use crate::wire::link::WrapperVerdict;
use crate::wire::records::{TargetReason, TargetState};
use crate::wire::wrapper::RejectCode;

fn code(v: &WrapperVerdict) -> Option<RejectCode> {
    match v {
        WrapperVerdict::Reject { code, .. } => Some(*code),
        WrapperVerdict::Welcome { .. } => None,
    }
}

/// The events an `Out` records: (kind, message).
fn events(out: &Out) -> Vec<(&'static str, String)> {
    out.cmds()
        .iter()
        .filter_map(|c| match c {
            Cmd::Event(e) => Some((e.kind, e.message.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_start_is_the_wrappers_word_inside_what_the_server_knows() {
    // go at 1,000, the news at 1,150: the wrapper's 1,040 stands.
    assert_eq!(start_time(1_040, Some(1_000), 1_150), 1_040);
    // A wrapper clock behind or ahead lands on an edge of the window.
    assert_eq!(start_time(400, Some(1_000), 1_150), 1_000);
    assert_eq!(start_time(9_000, Some(1_000), 1_150), 1_150);
    // No window known, or an impossible one: the arrival.
    assert_eq!(start_time(1_040, None, 1_150), 1_150);
    assert_eq!(start_time(1_040, Some(2_000), 1_150), 1_150);
}

#[test]
fn sessions_bind_unbind_and_end_with_their_run() {
    let mut s = Sessions::default();
    s.bind(1, 10, "web1");
    s.bind(2, 10, "web2");
    s.bind(3, 11, "db1");
    assert_eq!(s.len(), 3);
    assert_eq!(s.target_of(2), Some((10, "web2")));
    assert_eq!(s.unbind(2), Some((10, "web2".to_string())));
    assert_eq!(s.unbind(2), None);
    assert_eq!(s.target_of(2), None);
    s.run_ended(10);
    assert_eq!(s.len(), 1);
    assert_eq!(s.target_of(1), None);
    assert_eq!(s.target_of(3), Some((11, "db1")));
}

fn refusal<'a>(peer: &'a str, code: RejectCode) -> Refusal<'a> {
    Refusal {
        run: 7,
        machine: "web1",
        peer,
        code,
        message: "bad token",
    }
}

#[test]
fn refusals_are_recorded_up_to_the_rate_limit_per_address() {
    let mut s = Sessions::default();
    let t0 = Instant::now();
    for i in 0..REFUSALS_PER_MINUTE {
        let out = s.refused(
            refusal("10.0.0.1:4000", RejectCode::BadToken),
            Some("backup".into()),
            t0 + Duration::from_secs(u64::from(i)),
        );
        assert_eq!(
            events(&out),
            vec![(
                "wrapper_refused",
                "a wrapper from 10.0.0.1:4000 was refused (BadToken): bad token".to_string()
            )]
        );
    }
    // Over the allowance: another port of the same address is held; another address is not.
    let held = s.refused(
        refusal("10.0.0.1:4001", RejectCode::BadToken),
        None,
        t0 + Duration::from_secs(30),
    );
    assert!(held.cmds().is_empty());
    let other = s.refused(
        refusal("10.0.0.2:4000", RejectCode::BadToken),
        None,
        t0 + Duration::from_secs(30),
    );
    assert_eq!(events(&other).len(), 1);
    // The next window says how many were held.
    let next = s.refused(
        refusal("10.0.0.1:4000", RejectCode::BadToken),
        None,
        t0 + Duration::from_secs(61),
    );
    let said = events(&next);
    assert_eq!(said.len(), 1);
    assert!(
        said[0]
            .1
            .ends_with("(1 more refusal(s) of 10.0.0.1 in the last minute were not recorded)"),
        "{said:?}"
    );
}

#[test]
fn a_transient_refusal_is_logged_but_not_recorded() {
    let mut s = Sessions::default();
    let out = s.refused(
        refusal("10.0.0.1:4000", RejectCode::RetryLater),
        None,
        Instant::now(),
    );
    assert!(out.cmds().is_empty());
}

#[test]
fn a_refusal_clips_what_the_peer_sent() {
    let mut s = Sessions::default();
    let long = "x".repeat(5_000);
    let r = Refusal {
        run: 7,
        machine: &long,
        peer: "not an address",
        code: RejectCode::BadToken,
        message: &long,
    };
    let out = s.refused(r, None, Instant::now());
    let Some(Cmd::Event(e)) = out.cmds().first() else {
        panic!("no event");
    };
    assert!(e.machine.as_ref().is_some_and(|m| m.len() < 300));
    assert!(e.message.len() < 1_200);
}

#[test]
fn refusals_are_counted_per_address_without_port_ipv6_by_its_64() {
    assert_eq!(peer_address("10.1.2.3:5000"), "10.1.2.3");
    assert_eq!(peer_address("[::1]:5000"), "::/64");
    assert_eq!(
        peer_address("[2001:db8:1:2:aaaa::1]:5000"),
        "2001:db8:1:2::/64"
    );
    assert_eq!(
        peer_address("[2001:db8:1:2:bbbb::9]:6000"),
        peer_address("[2001:db8:1:2::7]:5000")
    );
    assert_eq!(peer_address("[::ffff:10.0.0.1]:5000"), "10.0.0.1");
    assert_eq!(peer_address("local"), "local");
}

#[test]
fn one_ipv6_host_gets_one_share_whatever_its_addresses() {
    let mut s = Sessions::default();
    let t0 = Instant::now();
    let recorded = (0..REFUSALS_PER_MINUTE + 5)
        .map(|i| {
            let peer = format!("[2001:db8:1:2::{:x}]:4000", i + 1);
            let at = t0 + Duration::from_secs(u64::from(i));
            events(&s.refused(refusal(&peer, RejectCode::BadToken), None, at)).len()
        })
        .sum::<usize>();
    assert_eq!(recorded, REFUSALS_PER_MINUTE as usize);
}

#[test]
fn a_flood_from_many_addresses_costs_the_budget_in_all_and_one_summary() {
    let mut s = Sessions::default();
    let t0 = Instant::now();
    let mut lines = 0;
    for i in 0..5_000u32 {
        let peer = format!("10.{}.{}.{}:4000", i >> 16, (i >> 8) & 255, i & 255);
        let at = t0 + Duration::from_millis(u64::from(i));
        lines += events(&s.refused(refusal(&peer, RejectCode::BadToken), None, at)).len();
    }
    // 5 s of flood: one window's allowance, nothing said yet of the rest.
    assert_eq!(lines, REFUSAL_RECORDS as usize);
    assert!(s.tick(t0 + Duration::from_secs(6)).cmds().is_empty());
    let summary = events(&s.tick(t0 + REFUSAL_WINDOW));
    assert_eq!(summary.len(), 1, "{summary:?}");
    let held = 5_000 - REFUSAL_RECORDS;
    assert!(
        summary[0].1.starts_with(&format!(
            "{held} more refused wrapper hello(s) were not logged"
        )),
        "{summary:?}"
    );
    assert!(
        s.tick(t0 + REFUSAL_WINDOW * 2).cmds().is_empty(),
        "said once"
    );
    // A later refusal is recorded again.
    let later = s.refused(
        refusal("10.9.9.9:1", RejectCode::BadToken),
        None,
        t0 + REFUSAL_WINDOW * 3,
    );
    assert_eq!(events(&later).len(), 1);
}

#[test]
fn a_summary_due_goes_out_before_the_next_refusal() {
    let mut s = Sessions::default();
    let t0 = Instant::now();
    for i in 0..=REFUSAL_RECORDS {
        let peer = format!("10.0.1.{i}:1");
        let _ = s.refused(refusal(&peer, RejectCode::BadToken), None, t0);
    }
    // No tick came: the next refusal after the window says the count first.
    let out = s.refused(
        refusal("10.0.2.1:1", RejectCode::BadToken),
        None,
        t0 + REFUSAL_WINDOW,
    );
    let said = events(&out);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].1.starts_with("1 more refused wrapper hello(s)"),
        "{said:?}"
    );
}

#[test]
fn a_peer_that_proved_nothing_is_told_one_refusal_whatever_the_reason() {
    let told_of = |v: WrapperVerdict| match told(v) {
        WrapperVerdict::Reject { code, message } => (code, message),
        WrapperVerdict::Welcome { .. } => panic!("welcomed"),
    };
    let same = (RejectCode::UnknownRun, REFUSED.to_string());
    for v in [
        not_in_flight(7),
        not_in_flight(8),
        not_a_target(7),
        reject(
            RejectCode::BadToken,
            "a minion-key proof is accepted for Salt runs only",
        ),
        reject(RejectCode::BadToken, "the token is not valid"),
        coming_back(
            7,
            "web1",
            Some(TargetReason::Lost),
            TargetState::Finished,
            false,
        )
        .expect("refused"),
    ] {
        assert_eq!(told_of(v), same);
    }
    // What only a proven wrapper or nobody in particular hears is told as decided.
    for code in [
        RejectCode::Finished,
        RejectCode::Version,
        RejectCode::RetryLater,
    ] {
        assert_eq!(told_of(reject(code, "why")), (code, "why".to_string()));
    }
    assert!(!REFUSED.contains('7'));
}

#[test]
fn only_a_wrapper_proving_a_session_is_looked_up_when_its_run_is_not_in_flight() {
    assert!(look_up_first(false, false, true, false));
    assert!(look_up_first(false, false, false, true));
    assert!(!look_up_first(false, false, false, false));
    assert!(!look_up_first(false, true, true, false));
    assert!(!look_up_first(true, false, true, false));
}

#[test]
fn a_lost_target_whose_wrapper_proves_itself_is_reopened() {
    let lost = Some(TargetReason::Lost);
    assert!(coming_back(7, "web1", lost, TargetState::Finished, true).is_none());
    // Not proven: refused (and told nothing about the run, `told`).
    let v = coming_back(7, "web1", lost, TargetState::Finished, false);
    assert_eq!(v.as_ref().and_then(code), Some(RejectCode::BadToken));
    // Proven but not lost: its outcome is recorded.
    let v = coming_back(7, "web1", None, TargetState::Finished, true);
    assert_eq!(v.as_ref().and_then(code), Some(RejectCode::Finished));
    // Proven, not lost, not finished: as if not in flight.
    let v = coming_back(7, "web1", None, TargetState::Running, true);
    let Some(WrapperVerdict::Reject { code, message }) = v else {
        panic!("not refused");
    };
    assert_eq!(code, RejectCode::UnknownRun);
    assert_eq!(
        message,
        "run 7 is not in flight and its target was not lost"
    );
}

#[test]
fn a_credential_proves_targets_of_its_executor_only() {
    // A minion key for a local run, a launch token for a Salt run: refused.
    assert_eq!(
        shown(false, false, false, true),
        Shown::Refused("a minion-key proof is accepted for Salt runs only")
    );
    assert_eq!(
        shown(true, true, false, false),
        Shown::Refused("a launch token is accepted for local runs only")
    );
    // The key wins over the rest; a resume key over a token.
    assert!(matches!(shown(true, true, true, true), Shown::MinionKey));
    assert!(matches!(shown(true, false, true, false), Shown::ResumeKey));
    assert!(matches!(shown(false, true, true, false), Shown::ResumeKey));
    assert!(matches!(
        shown(false, true, false, false),
        Shown::LaunchToken
    ));
    assert!(matches!(shown(true, false, false, false), Shown::Nothing));
}

#[test]
fn a_wrapper_that_cannot_apply_limits_is_told_only_once_proven() {
    let v = cannot_limit("backup", true, false, true);
    assert_eq!(v.as_ref().and_then(code), Some(RejectCode::Version));
    assert!(cannot_limit("backup", false, false, true).is_none());
    assert!(cannot_limit("backup", true, true, true).is_none());
    assert!(cannot_limit("backup", true, false, false).is_none());
}

#[test]
fn silence_windows_follow_the_heartbeat() {
    let s = silences(5, 0);
    assert_eq!(s.heard, Duration::from_secs(15));
    assert_eq!(s.staged, Duration::from_secs(90));
    assert_eq!(s.grace, Duration::from_secs(15));
    // A heartbeat of 0 counts as 1 s; the recovery grace may be longer than 3 beats.
    let s = silences(0, 60);
    assert_eq!(s.heard, Duration::from_secs(3));
    assert_eq!(s.staged, Duration::from_secs(18));
    assert_eq!(s.grace, Duration::from_secs(60));
    assert_eq!(staged_heartbeat_s(10), 60);
}

#[test]
fn refused_output_is_logged_first_then_at_powers_of_two() {
    assert_eq!(refused_line(None), RefusedLine::First);
    assert_eq!(refused_line(Some(1)), RefusedLine::Still(2));
    assert_eq!(refused_line(Some(2)), RefusedLine::Quiet);
    assert_eq!(refused_line(Some(3)), RefusedLine::Still(4));
    assert_eq!(refused_line(Some(u64::MAX)), RefusedLine::Quiet);
}
