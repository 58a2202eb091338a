//! An outcome is final only once stored: the rules for a write that fails, a wrapper that
//! comes back while its outcome is being recorded, and a loss.

use std::time::{Duration, Instant};

use super::{Credential, Effect, Outcome, PendingExit, Phase, Target};
use crate::wire::link::ConnId;
use crate::wire::records::{TargetReason, TargetState};

const TOKEN: Credential = Credential::LaunchToken { valid: true };
const KEY: Credential = Credential::ResumeKey { valid: true };
const C1: ConnId = 1;
const C2: ConnId = 2;

fn running(t0: Instant) -> Target {
    let mut t = Target::new(0);
    t.launch();
    t.hello(t0, C1, TOKEN).expect("welcome");
    t.command_started(1_000, None);
    t
}

fn exited(t: &mut Target, conn: ConnId, code: i32) -> Vec<Effect> {
    let exit = PendingExit {
        end_seq: 0,
        reason: TargetReason::Exit,
        code: Some(code),
    };
    t.exited(conn, exit, 5_000)
}

#[test]
fn an_outcome_whose_write_failed_is_written_again_as_decided_and_done_waits() {
    let t0 = Instant::now();
    let mut t = running(t0);
    let first = exited(&mut t, C1, 0);
    let outcome = Outcome {
        reason: Some(TargetReason::Exit),
        code: Some(0),
    };
    assert_eq!(
        first,
        [Effect::RecordOutcome {
            outcome,
            ended: 5_000,
            waited: false
        }]
    );
    // The write failed: nothing changes, no `done`; the retry writes the same outcome.
    assert!(matches!(t.phase(), Phase::Finishing { .. }));
    assert_eq!(
        t.record_again(),
        [Effect::RecordOutcome {
            outcome,
            ended: 5_000,
            waited: true
        }]
    );
    assert!(!t.is_settled());
    // Stored at last: final, and only now the wrapper hears `done`.
    assert_eq!(t.recorded(), [Effect::Done(C1), Effect::WakeRun]);
    assert!(t.is_settled());
    assert!(t.record_again().is_empty(), "nothing to write any more");
}

#[test]
fn a_wrapper_that_comes_back_while_its_outcome_is_recorded_is_welcomed() {
    let t0 = Instant::now();
    let mut t = running(t0);
    exited(&mut t, C1, 3);
    t.gone(C1);
    // Its `done` never came: it asks again with its resume key.
    let welcome = t
        .hello(t0 + Duration::from_secs(60), C2, KEY)
        .expect("welcomed");
    assert!(welcome.effects.is_empty(), "{:?}", welcome.effects);
    // Its resent exit changes nothing: the outcome is decided.
    assert!(exited(&mut t, C2, 3).is_empty());
    assert!(matches!(t.phase(), Phase::Finishing { .. }));
    assert_eq!(t.recorded(), [Effect::Done(C2), Effect::WakeRun]);
    assert_eq!(t.record("m").exit_code, Some(3));
}

#[test]
fn a_wrapper_back_while_its_loss_is_recorded_reopens_the_target() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.gone(C1);
    t.finish(TargetReason::Lost, Some(253), 10);
    let welcome = t.hello(t0, C2, KEY).expect("reconciled");
    assert_eq!(
        welcome.effects,
        [
            Effect::Reconciled,
            Effect::StoreState(TargetState::Running, None)
        ]
    );
    // The loss's write answers late: it changes nothing, and no retry writes it again.
    assert!(t.recorded().is_empty());
    assert!(t.record_again().is_empty());
    assert_eq!(t.state(), TargetState::Running);
    // The real exit settles it.
    assert!(!exited(&mut t, C2, 0).is_empty());
    assert_eq!(t.recorded(), [Effect::Done(C2), Effect::WakeRun]);
    assert_eq!(t.record("m").exit_code, Some(0));
}

#[test]
fn a_loss_recorded_sends_no_done_to_a_connected_wrapper() {
    let t0 = Instant::now();
    let mut t = running(t0);
    t.finish(TargetReason::Lost, Some(253), 10);
    let effects = t.recorded();
    assert!(!effects.contains(&Effect::Done(C1)), "{effects:?}");
    assert!(effects.contains(&Effect::Close(C1)));
}

#[test]
fn a_stall_gives_every_picked_up_target_a_fresh_grace() {
    let t0 = Instant::now();
    let mut t = running(t0);
    let silence = Duration::from_secs(15);
    let resumed = t0 + Duration::from_secs(31);
    assert!(t.silent_too_long(resumed, silence, silence));
    t.excuse_silence(resumed, Duration::from_secs(60));
    assert!(!t.silent_too_long(resumed + Duration::from_secs(59), silence, silence));
    assert!(t.silent_too_long(resumed + Duration::from_secs(61), silence, silence));
    // Not picked up: nothing to excuse.
    let mut pending = Target::new(0);
    pending.excuse_silence(resumed, Duration::from_secs(60));
    assert_eq!(pending.state(), TargetState::Pending);
}
