//! A target from and to its stored record: restored after a restart, its state and
//! outcome as recorded and shown.

use std::time::{Duration, Instant};

use super::{Effect, Outcome, Phase, Target, Token};
use crate::wire::records::TargetReason;
use crate::wire::records::{Millis, TargetRecord, TargetState};

impl Target {
    /// db recorded the outcome: final now; the wrapper may exit. A wrapper still
    /// connected to a target recorded as lost is not told `done` (that would end a
    /// command that may still run): its link is closed instead, and its next hello
    /// reopens the target.
    pub(crate) fn recorded(&mut self) -> Vec<Effect> {
        let outcome = match &self.phase {
            Phase::Finishing { outcome, .. } => *outcome,
            _ => return Vec::new(),
        };
        self.phase = Phase::Finished(outcome);
        let mut effects: Vec<Effect> = match self.conn {
            Some(conn) if outcome.reason == Some(TargetReason::Lost) => {
                self.conn = None;
                vec![Effect::Close(conn)]
            }
            Some(conn) => vec![Effect::Done(conn)],
            None => Vec::new(),
        };
        effects.push(Effect::WakeRun);
        effects
    }

    /// Its outcome was not written: another server had stored this target's final
    /// outcome first (`kept`, ended at `ended`), and that one stands. Settled with it, as
    /// if it were its own.
    pub(crate) fn recorded_as(&mut self, kept: Outcome, ended: Option<Millis>) -> Vec<Effect> {
        match &mut self.phase {
            Phase::Finishing { outcome, .. } => *outcome = kept,
            _ => return Vec::new(),
        }
        if ended.is_some() {
            self.ended = ended;
        }
        self.recorded()
    }

    /// Its outcome's write failed: written again, as decided (nothing while it is not
    /// being recorded any more).
    pub(crate) fn record_again(&self) -> Vec<Effect> {
        match &self.phase {
            Phase::Finishing { outcome, .. } => vec![Effect::RecordOutcome {
                outcome: *outcome,
                ended: self.ended.unwrap_or_default(),
                waited: true,
            }],
            _ => Vec::new(),
        }
    }

    /// Restored with its attempt as stored (retries already made count against
    /// `retries` after a restart too).
    pub(crate) fn restore_attempt(&mut self, attempt: u32) {
        self.attempt = attempt.max(1);
    }

    /// A target as db recorded it, after a restart at `now`: a picked-up one gets `grace`
    /// before its silence counts.
    pub(crate) fn restored(
        record: &TargetRecord,
        token_spent: bool,
        resume_hash: Option<String>,
        acked_seq: u64,
        now: Instant,
        grace: Duration,
    ) -> Target {
        let outcome = Outcome {
            reason: record.reason,
            code: record.exit_code,
        };
        let phase = match record.state {
            TargetState::Finished => Phase::Finished(outcome),
            TargetState::SkippedMaintenance => Phase::SkippedMaintenance,
            // The window starts over after a restart (recovery sets the job's).
            TargetState::WaitingUnreachable => Phase::WaitingUnreachable { until: now + grace },
            TargetState::Pending | TargetState::Queued if !token_spent => Phase::Pending,
            // Launched, no welcome recorded: its wrapper may still come with its token.
            TargetState::Pending | TargetState::Launching | TargetState::PickedUp
                if !token_spent =>
            {
                Phase::Launching
            }
            state => Phase::PickedUp {
                running: state == TargetState::Running,
                last_seen: now,
                grace_until: Some(now + grace),
                exit: None,
            },
        };
        Target {
            batch: 0,
            phase,
            conn: None,
            token: if token_spent {
                Token::Spent
            } else {
                Token::Unused
            },
            resume_hash,
            acked_seq,
            refusals: None,
            kill_wanted: false,
            // Only a wrapper that can suspend was ever suspended.
            suspended: record.suspended,
            can_suspend: record.suspended,
            started: record.started,
            ended: record.ended,
            attempt: 1,
            throttled: None,
            limits: record.limits.clone(),
            server: record.server.clone(),
        }
    }

    /// The state as recorded and shown.
    pub(crate) fn state(&self) -> TargetState {
        match &self.phase {
            Phase::Pending if self.batch > 0 || self.throttled.is_some() => TargetState::Queued,
            Phase::Pending => TargetState::Pending,
            Phase::Launching => TargetState::Launching,
            Phase::PickedUp { running: true, .. } => TargetState::Running,
            Phase::PickedUp { running: false, .. } => TargetState::PickedUp,
            Phase::Finishing { was, .. } => *was,
            Phase::Finished(_) => TargetState::Finished,
            Phase::SkippedMaintenance => TargetState::SkippedMaintenance,
            Phase::WaitingUnreachable { .. } => TargetState::WaitingUnreachable,
        }
    }

    /// The outcome, once one is decided (recorded or being recorded).
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        match &self.phase {
            Phase::Finishing { outcome, .. } | Phase::Finished(outcome) => Some(*outcome),
            _ => None,
        }
    }

    pub(crate) fn record(&self, machine: &str) -> TargetRecord {
        let outcome = self.outcome();
        TargetRecord {
            machine: machine.to_string(),
            state: self.state(),
            reason: outcome.and_then(|o| o.reason),
            exit_code: outcome.and_then(|o| o.code),
            started: self.started,
            ended: self.ended,
            suspended: self.suspended,
            waiting: self.throttled.clone().filter(|_| self.is_throttled()),
            limits: self.limits.clone(),
            server: self.server.clone(),
        }
    }
}
