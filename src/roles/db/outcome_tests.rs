//! A target's final outcome across a takeover (run by `storage_tests.rs` on both
//! backends).

use crate::roles::db::storage::Storage;
use crate::roles::db::store::tests::new_run;
use crate::wire::db::{KeptOutcome, TargetUpdate};
use crate::wire::records::{RunState, TargetReason, TargetState};

/// Two servers judged one target across a takeover: the first outcome a wrapper reported
/// stands; a `lost` verdict gives way to a real outcome.
pub(super) fn a_final_outcome_is_not_written_over(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", Some(1_000), RunState::Running, &["m1", "m2"]))
        .unwrap()
        .unwrap();
    let finished = |reason, code, ended| TargetUpdate {
        state: Some(TargetState::Finished),
        reason: Some(reason),
        exit_code: Some(code),
        ended: Some(ended),
        ..Default::default()
    };
    assert_eq!(
        s.update_target(run, "m1", &finished(TargetReason::Exit, 0, 10))
            .unwrap(),
        None
    );
    let kept = s
        .update_target(run, "m1", &finished(TargetReason::Lost, 253, 20))
        .unwrap();
    assert_eq!(
        kept,
        Some(KeptOutcome {
            reason: TargetReason::Exit,
            exit_code: Some(0),
            ended: Some(10),
        })
    );
    // A lost verdict is replaced by the outcome its wrapper brings back.
    s.update_target(run, "m2", &finished(TargetReason::Lost, 253, 20))
        .unwrap();
    assert_eq!(
        s.update_target(run, "m2", &finished(TargetReason::Exit, 3, 30))
            .unwrap(),
        None
    );
    let record = s.get_run(run).unwrap().unwrap();
    let outcome = |m: &str| {
        let t = record.targets.iter().find(|t| t.machine == m).unwrap();
        (t.reason, t.exit_code, t.ended)
    };
    assert_eq!(outcome("m1"), (Some(TargetReason::Exit), Some(0), Some(10)));
    assert_eq!(outcome("m2"), (Some(TargetReason::Exit), Some(3), Some(30)));
}
