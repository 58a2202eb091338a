//! What a wrapper's `exited` means for a target: the reason and exit code recorded.

use crate::wire::records::TargetReason;
use crate::wire::wrapper::ExitReason;

/// What a wrapper's `exited` means for the target: reason and recorded exit code.
pub(crate) fn exit_outcome(
    reason: ExitReason,
    code: Option<i32>,
    signal: Option<i32>,
) -> (TargetReason, Option<i32>) {
    match reason {
        ExitReason::Exit => (
            TargetReason::Exit,
            // Death by a signal is reported like a shell does: 128 + signal.
            code.or(signal.map(|s| 128 + s)),
        ),
        ExitReason::Timeout => (TargetReason::Timeout, Some(124)),
        ExitReason::Killed => (TargetReason::Killed, Some(143)),
        ExitReason::SpawnFailed | ExitReason::LockBusy => (TargetReason::WrapperFailed, Some(254)),
        ExitReason::Canceled => (TargetReason::Canceled, None),
        // As a shell reports a KILL (128 + 9), with the reason saying who killed it.
        ExitReason::MemoryLimit => (TargetReason::MemoryLimit, Some(137)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_compatible() {
        assert_eq!(
            exit_outcome(ExitReason::Exit, Some(3), None),
            (TargetReason::Exit, Some(3))
        );
        assert_eq!(
            exit_outcome(ExitReason::Exit, None, Some(9)),
            (TargetReason::Exit, Some(137))
        );
        assert_eq!(
            exit_outcome(ExitReason::Timeout, None, Some(15)),
            (TargetReason::Timeout, Some(124))
        );
        assert_eq!(
            exit_outcome(ExitReason::Killed, Some(0), None),
            (TargetReason::Killed, Some(143))
        );
        assert_eq!(
            exit_outcome(ExitReason::LockBusy, None, None),
            (TargetReason::WrapperFailed, Some(254))
        );
    }
}
