//! The target core's rules, with no sockets and no clock: every test hands in its own
//! `now`.

use std::time::{Duration, Instant};

use super::{Credential, Effect, KillAction, Outcome, PendingExit, Phase, Target, Token};
use crate::wire::link::ConnId;
use crate::wire::records::{TargetReason, TargetRecord, TargetState};
use crate::wire::wrapper::RejectCode;

const TOKEN: Credential = Credential::LaunchToken { valid: true };
const KEY: Credential = Credential::ResumeKey { valid: true };
const C1: ConnId = 1;
const C2: ConnId = 2;

fn exit(end_seq: u64, code: i32) -> PendingExit {
    PendingExit {
        end_seq,
        reason: TargetReason::Exit,
        code: Some(code),
    }
}

/// A target whose wrapper said hello on C1 with the token at `t0` and started its command.
fn running(t0: Instant) -> Target {
    let mut t = Target::new(0);
    t.launch();
    t.hello(t0, C1, TOKEN).expect("welcome");
    t.heard(t0);
    t.command_started(1_000, None);
    t
}

#[test]
fn launch_moves_a_pending_target_once() {
    let mut t = Target::new(2);
    assert_eq!(
        t.state(),
        TargetState::Queued,
        "a later batch waits for its turn"
    );
    assert_eq!(Target::new(0).state(), TargetState::Pending);
    assert!(t.awaiting_pickup());
    assert_eq!(
        t.launch(),
        [Effect::StoreState(TargetState::Launching, None)]
    );
    assert_eq!(t.state(), TargetState::Launching);
    assert!(t.launch().is_empty(), "launching twice does nothing");
    assert!(t.awaiting_pickup());
}

#[test]
fn maintenance_leaves_only_a_pending_target_out() {
    let mut t = Target::new(0);
    assert_eq!(
        t.skip_for_maintenance(),
        [Effect::StoreState(TargetState::SkippedMaintenance, None)]
    );
    assert!(t.is_settled());
    let mut launched = Target::new(0);
    launched.launch();
    assert!(launched.skip_for_maintenance().is_empty());
}

#[test]
fn a_launch_token_works_once_and_is_spent_by_its_welcome() {
    let t0 = Instant::now();
    let mut t = Target::new(0);
    t.launch();
    let welcome = t.hello(t0, C1, TOKEN).expect("welcome");
    assert_eq!(welcome.acked_seq, 0);
    // Picked up and recorded as such; the token is spent durably before the welcome goes
    // out (the shell waits for that write).
    assert_eq!(
        welcome.effects,
        [
            Effect::StoreState(TargetState::PickedUp, None),
            Effect::StoreTokenSpent
        ]
    );
    assert_eq!(t.state(), TargetState::PickedUp);
    assert_eq!(t.token, Token::Spent);
    assert!(!t.awaiting_pickup());
    // Nobody can present it again: not on a new connection, not after the first one
    // hung up before saying anything (a thief who took the welcome and left).
    let refused = t.hello(t0, C2, TOKEN).expect_err("token spent");
    assert_eq!(refused.code, RejectCode::BadToken);
    t.gone(C1);
    assert_eq!(t.token, Token::Spent);
    let refused = t.hello(t0, C2, TOKEN).expect_err("token spent");
    assert_eq!(refused.code, RejectCode::BadToken);
}

#[test]
fn a_session_that_could_not_be_recorded_lets_the_token_be_presented_again() {
    let t0 = Instant::now();
    let mut t = Target::new(0);
    t.launch();
    t.hello(t0, C1, TOKEN).expect("welcome");
    // db refused the write: no welcome went out.
    t.session_not_stored(C1);
    assert_eq!(t.token, Token::Unused);
    assert_eq!(t.phase, Phase::Launching);
    assert!(t.awaiting_pickup(), "the pickup deadline applies again");
    t.hello(t0, C2, TOKEN).expect("second presentation");
    assert_eq!(t.conn, Some(C2));
}

#[test]
fn a_minion_key_proof_opens_and_reopens_sessions_without_a_token() {
    let t0 = Instant::now();
    let mut t = Target::new(0);
    t.launch();
    let proof = Credential::MinionKey { valid: true };
    let welcome = t.hello(t0, C1, proof).expect("welcome");
    assert_eq!(
        welcome.effects,
        [Effect::StoreState(TargetState::PickedUp, None)],
        "no token is spent"
    );
    let again = t
        .hello(t0, C2, proof)
        .expect("a reconnect signs a new challenge");
    assert_eq!(again.effects, [Effect::Close(C1)]);
    let forged = t.hello(t0, C1, Credential::MinionKey { valid: false });
    assert_eq!(forged.expect_err("refused").code, RejectCode::BadToken);
}

#[test]
fn bad_credentials_are_refused() {
    let t0 = Instant::now();
    for credential in [
        Credential::LaunchToken { valid: false },
        Credential::ResumeKey { valid: false },
        Credential::MinionKey { valid: false },
        Credential::None,
    ] {
        let mut t = Target::new(0);
        t.launch();
        let refused = t.hello(t0, C1, credential).expect_err("refused");
        assert_eq!(refused.code, RejectCode::BadToken, "{credential:?}");
        assert_eq!(t.conn, None);
    }
}

#[test]
fn a_reconnect_with_the_resume_key_replaces_the_old_connection_and_resumes_at_the_ack() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.output_stored(5, 2_000);
    let welcome = t.hello(t0, C2, KEY).expect("resume");
    assert_eq!(welcome.acked_seq, 5);
    assert_eq!(welcome.effects, [Effect::Close(C1)]);
    assert_eq!(t.conn, Some(C2));
    assert_eq!(t.state(), TargetState::Running);
}

#[test]
fn output_is_acked_only_forward() {
    let t0 = Instant::now();
    let mut t = running(t0);
    assert_eq!(t.output_stored(3, 0), [Effect::Ack(C1, 3)]);
    assert!(t.output_stored(2, 0).is_empty(), "no ack backwards");
    assert!(t.output_stored(3, 0).is_empty(), "no ack twice");
    assert_eq!(t.acked_seq, 3);
}

#[test]
fn an_exit_settles_only_once_its_output_is_stored() {
    let t0 = Instant::now();
    let mut t = running(t0);
    assert!(
        t.exited(C1, exit(4, 7), 2_000).is_empty(),
        "output 4 not stored"
    );
    assert!(!t.is_decided());
    assert!(t.awaits_output(), "db is asked how far output 4 is stored");
    let effects = t.output_stored(4, 3_000);
    let outcome = Outcome {
        reason: Some(TargetReason::Exit),
        code: Some(7),
    };
    assert_eq!(
        effects,
        [
            Effect::Ack(C1, 4),
            Effect::RecordOutcome {
                outcome,
                ended: 3_000,
                waited: true,
            }
        ]
    );
    // Shown as running with its outcome until db confirms, then finished.
    assert_eq!(t.state(), TargetState::Running);
    assert_eq!(t.recorded(), [Effect::Done(C1), Effect::WakeRun]);
    assert_eq!(t.record("m").state, TargetState::Finished);
    assert_eq!(t.record("m").exit_code, Some(7));
    // A resent `exited` is confirmed again, nothing else.
    assert_eq!(t.exited(C1, exit(4, 7), 4_000), [Effect::Done(C1)]);
}

#[test]
fn an_exit_whose_output_is_already_stored_settles_at_once() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.output_stored(2, 0);
    let effects = t.exited(C1, exit(2, 0), 5_000);
    assert!(matches!(
        effects[..],
        [Effect::RecordOutcome {
            ended: 5_000,
            waited: false,
            ..
        }]
    ));
}

#[test]
fn an_exit_after_output_another_server_stored_settles_on_db_s_answer() {
    // Taken over from another server: restored with output 3 acknowledged, while the
    // other server stored (and acknowledged) up to 9 before it stopped.
    let t0 = Instant::now();
    let record = TargetRecord {
        machine: "m".into(),
        state: TargetState::Running,
        reason: None,
        exit_code: None,
        started: Some(500),
        ended: None,
        suspended: false,
        waiting: None,
        limits: None,
        server: None,
    };
    let mut t = Target::restored(&record, true, None, 3, t0, Duration::from_secs(30));
    t.hello(t0, C1, KEY).expect("welcome");
    assert!(t.exited(C1, exit(9, 0), 1_000).is_empty());
    assert!(t.awaits_output());
    // db's answer (StoredSeq) goes through the same transition as a stored frame.
    let effects = t.output_stored(9, 2_000);
    assert!(matches!(
        effects[..],
        [
            Effect::Ack(C1, 9),
            Effect::RecordOutcome { waited: true, .. }
        ]
    ));
    assert!(!t.awaits_output());
}

#[test]
fn an_outcome_stored_first_by_another_server_stands() {
    let t0 = Instant::now();
    let mut t = running(t0);
    // Judged lost here, while the server that drove it before had stored exit 0.
    t.finish(TargetReason::Lost, Some(253), 5_000);
    let kept = Outcome {
        reason: Some(TargetReason::Exit),
        code: Some(0),
    };
    assert_eq!(
        t.recorded_as(kept, Some(4_000)),
        [Effect::Done(C1), Effect::WakeRun]
    );
    assert_eq!(t.record("m").reason, Some(TargetReason::Exit));
    assert_eq!(t.record("m").exit_code, Some(0));
    assert_eq!(t.record("m").ended, Some(4_000));
    assert!(t.recorded_as(kept, None).is_empty(), "settled once");
}

#[test]
fn an_outcome_is_decided_once() {
    let t0 = Instant::now();
    let mut t = running(t0);
    assert_eq!(t.finish(TargetReason::Lost, Some(253), 10).len(), 1);
    assert!(t.finish(TargetReason::Exit, Some(0), 11).is_empty());
    assert!(t.exited(C1, exit(0, 0), 12).is_empty());
    t.recorded();
    assert!(t.finish(TargetReason::Exit, Some(0), 13).is_empty());
    assert!(t.recorded().is_empty(), "recorded twice does nothing");
    assert_eq!(t.record("m").reason, Some(TargetReason::Lost));
}

#[test]
fn silence_counts_only_after_pickup_and_after_the_recovery_grace() {
    let t0 = Instant::now();
    let silence = Duration::from_secs(3);
    let mut launching = Target::new(0);
    launching.launch();
    assert!(!launching.silent_too_long(t0 + Duration::from_secs(100), silence, silence));

    let mut t = running(t0);
    assert!(!t.silent_too_long(t0 + Duration::from_secs(3), silence, silence));
    assert!(t.silent_too_long(t0 + Duration::from_secs(4), silence, silence));
    t.heard(t0 + Duration::from_secs(4));
    assert!(!t.silent_too_long(t0 + Duration::from_secs(5), silence, silence));

    let record = TargetRecord {
        machine: "m".into(),
        state: TargetState::Running,
        reason: None,
        exit_code: None,
        started: Some(1),
        ended: None,
        suspended: false,
        waiting: None,
        limits: None,
        server: None,
    };
    let grace = Duration::from_secs(30);
    let restored = Target::restored(&record, true, None, 9, t0, grace);
    assert!(!restored.silent_too_long(t0 + Duration::from_secs(20), silence, silence));
    assert!(restored.silent_too_long(t0 + Duration::from_secs(31), silence, silence));
}

#[test]
fn a_wrapper_waiting_to_start_has_the_longer_silence_until_its_command_starts() {
    let t0 = Instant::now();
    let (silence, staged) = (Duration::from_secs(3), Duration::from_secs(18));
    let mut t = Target::new(0);
    t.launch();
    t.hello(t0, C1, TOKEN).expect("welcome");
    t.heard(t0);
    assert!(!t.silent_too_long(t0 + Duration::from_secs(10), silence, staged));
    assert!(t.silent_too_long(t0 + Duration::from_secs(19), silence, staged));
    t.heard(t0 + Duration::from_secs(19));
    t.command_started(1_000, None);
    assert!(!t.silent_too_long(t0 + Duration::from_secs(22), silence, staged));
    assert!(t.silent_too_long(t0 + Duration::from_secs(23), silence, staged));
}

#[test]
fn a_lost_wrapper_that_proves_its_session_reopens_its_target() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.finish(TargetReason::Lost, Some(253), 10);
    // Recorded as lost while its wrapper is still connected: no `done` (it would end a
    // command that may still run), the link is closed so that the wrapper says hello.
    assert_eq!(t.recorded(), [Effect::Close(C1), Effect::WakeRun]);
    let welcome = t.hello(t0, C2, KEY).expect("reconciled");
    assert_eq!(
        welcome.effects,
        [
            Effect::Reconciled,
            Effect::StoreState(TargetState::Running, None),
        ]
    );
    assert_eq!(t.state(), TargetState::Running);
    assert_eq!(t.record("m").reason, None);
    assert_eq!(t.ended, None);
}

#[test]
fn a_finished_target_refuses_any_hello() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.finish(TargetReason::Exit, Some(0), 10);
    t.recorded();
    assert_eq!(
        t.hello(t0, C2, KEY).expect_err("finished").code,
        RejectCode::Finished
    );
}

#[test]
fn kill_before_pickup_cancels_after_pickup_sends_and_while_away_waits() {
    let t0 = Instant::now();
    let mut queued = Target::new(1);
    match queued.kill(50) {
        KillAction::Canceled(effects) => assert!(matches!(
            effects[..],
            [Effect::RecordOutcome {
                outcome: Outcome {
                    reason: Some(TargetReason::Canceled),
                    code: None
                },
                ended: 50,
                waited: false,
            }]
        )),
        other => panic!("{other:?}"),
    }

    let mut t = running(t0);
    assert_eq!(t.kill(50), KillAction::Sent(vec![Effect::Kill(C1)]));

    let mut away = running(t0);
    away.gone(C1);
    assert_eq!(away.kill(50), KillAction::Deferred);
    // Delivered when it comes back.
    let welcome = away.hello(t0, C2, KEY).expect("resume");
    assert_eq!(welcome.effects, [Effect::Kill(C2)]);

    let mut done = running(t0);
    done.finish(TargetReason::Exit, Some(0), 1);
    assert_eq!(done.kill(50), KillAction::None);
}

#[test]
fn restored_targets_take_the_phase_their_record_and_token_say() {
    let t0 = Instant::now();
    let grace = Duration::from_secs(5);
    let record = |state| TargetRecord {
        machine: "m".into(),
        state,
        reason: (state == TargetState::Finished).then_some(TargetReason::Exit),
        exit_code: (state == TargetState::Finished).then_some(0),
        started: None,
        ended: None,
        suspended: false,
        waiting: None,
        limits: None,
        server: None,
    };
    let phase = |state, spent| Target::restored(&record(state), spent, None, 0, t0, grace).phase;
    assert_eq!(phase(TargetState::Pending, false), Phase::Pending);
    assert_eq!(phase(TargetState::Launching, false), Phase::Launching);
    assert!(matches!(
        phase(TargetState::Launching, true),
        Phase::PickedUp { running: false, .. }
    ));
    assert!(matches!(
        phase(TargetState::Running, true),
        Phase::PickedUp { running: true, .. }
    ));
    assert!(matches!(
        phase(TargetState::Finished, true),
        Phase::Finished(_)
    ));
    assert_eq!(
        phase(TargetState::SkippedMaintenance, false),
        Phase::SkippedMaintenance
    );
    // A pre-staged wrapper waiting for `go` when the daemon died re-attaches with its key.
    let mut staged = Target::restored(&record(TargetState::Launching), true, None, 0, t0, grace);
    assert!(staged.hello(t0, C1, TOKEN).is_err(), "token spent");
    staged.hello(t0, C1, KEY).expect("resume");
    assert_eq!(staged.state(), TargetState::PickedUp);
    // Picked up by a session never confirmed: the token works again after a restart.
    assert_eq!(phase(TargetState::PickedUp, false), Phase::Launching);
    assert!(matches!(
        phase(TargetState::PickedUp, true),
        Phase::PickedUp { running: false, .. }
    ));
}

#[test]
fn command_started_keeps_the_first_start_time() {
    let t0 = Instant::now();
    let mut t = running(t0);
    assert_eq!(t.started, Some(1_000));
    let effects = t.command_started(9_000, None);
    assert_eq!(
        effects,
        [
            Effect::StoreState(TargetState::Running, Some(1_000)),
            Effect::WakeRun
        ]
    );
}

#[test]
fn a_failed_target_is_retried_while_attempts_are_left() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.exited(C1, exit(0, 3), 2_000);
    assert!(!t.wants_retry(2), "not before the outcome is recorded");
    t.recorded();
    t.gone(C1);
    assert!(t.wants_retry(2));
    assert!(!t.wants_retry(0), "no retries configured");
    let effects = t.retry();
    assert_eq!(
        effects[0],
        Effect::StoreRetry {
            attempt: 2,
            previous: Outcome {
                reason: Some(TargetReason::Exit),
                code: Some(3)
            }
        }
    );
    assert_eq!(t.phase, Phase::Pending);
    assert_eq!(t.token, Token::Unused);
    assert_eq!(t.acked_seq, 0);
    assert!(t.awaiting_pickup());
    // The second attempt's wrapper presents the launch token again and runs.
    t.launch();
    t.hello(t0, C2, TOKEN).expect("welcome for attempt 2");
    t.heard(t0);
    t.command_started(3_000, None);
    t.exited(C2, exit(0, 1), 4_000);
    t.recorded();
    assert!(t.wants_retry(2), "attempt 2 of 1 + 2");
    t.retry();
    assert_eq!(t.attempt, 3);
    t.launch();
    t.hello(t0, C1, TOKEN).expect("welcome for attempt 3");
    t.heard(t0);
    t.exited(C1, exit(0, 1), 5_000);
    t.recorded();
    assert!(!t.wants_retry(2), "the last attempt counts");
    assert_eq!(t.record("m").exit_code, Some(1));
}

#[test]
fn success_kills_and_losses_are_not_retried() {
    let t0 = Instant::now();
    let mut ok = running(t0);
    ok.exited(C1, exit(0, 0), 2_000);
    ok.recorded();
    assert!(!ok.wants_retry(5));

    let mut killed = running(t0);
    let _ = killed.kill(2_000);
    killed.exited(
        C1,
        PendingExit {
            end_seq: 0,
            reason: TargetReason::Killed,
            code: Some(143),
        },
        2_000,
    );
    killed.recorded();
    assert!(!killed.wants_retry(5));

    let mut lost = running(t0);
    lost.finish(TargetReason::Lost, Some(253), 2_000);
    lost.recorded();
    assert!(!lost.wants_retry(5));
}
