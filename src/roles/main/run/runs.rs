//! Runs in flight, as main keeps them in memory, and the pure rules of their outcomes.

use crate::ipc::rpc::Due;
use crate::roles::main::state::run::ActiveRun;

/// How long before its slot a pre-staged run's held writes are committed.
const STAGED_WRITES_LEAD_MS: i64 = 1_000;

use crate::wire::records::{RunState, TargetReason, TargetRecord, TargetState, settle_run_state};
use crate::wire::wrapper::ExitReason;

impl ActiveRun {
    /// `go` went out: waiting wrappers were released.
    pub(crate) fn go_sent(&self) -> bool {
        self.go_at.is_some()
    }

    /// How soon db must store a write of this run that nothing waits for. A pre-staged
    /// run's writes before `go` (its wrappers connecting, proven and waiting) are needed
    /// only by its slot: db holds them until shortly before it and commits them
    /// together, instead of as the stream of connections goes (a commit per window: the
    /// commits of a firing grew with its targets). Lost in a crash, they cost nothing:
    /// the wrappers reconnect and prove themselves again.
    pub(crate) fn write_due(&self) -> Due {
        match self.slot {
            Some(slot) if self.prestaged && !self.go_sent() => {
                Due::By(slot - STAGED_WRITES_LEAD_MS)
            }
            _ => Due::Soon,
        }
    }

    /// Its place in the throttling queues: slot order (a manual run: when recorded), then
    /// run id.
    pub(crate) fn queue_key(&self) -> crate::roles::main::shell::throttle::QueueKey {
        (self.slot.unwrap_or(self.recorded_at), self.id)
    }

    /// Final state once every target is settled.
    pub(crate) fn final_state(&self) -> RunState {
        let records: Vec<TargetRecord> = self.targets.iter().map(|(m, t)| t.record(m)).collect();
        let state = settle_run_state(&records);
        let all_stopped_by_user = !records.is_empty()
            && records.iter().all(|t| {
                matches!(
                    t.reason,
                    Some(TargetReason::Killed) | Some(TargetReason::Canceled)
                ) || t.state == TargetState::SkippedMaintenance
            });
        if self.kill_requested && all_stopped_by_user {
            RunState::Canceled
        } else {
            state
        }
    }
}

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
