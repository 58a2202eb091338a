//! A new attempt of a failed target (`retries`): the pure rules, beside the target core.

use super::{Effect, Outcome, Phase, Target, Token};
use crate::wire::records::TargetReason;

impl Target {
    /// Recorded with an outcome a new attempt may change (`retries` of the job, beyond the
    /// first): a non-zero exit, a timeout, a wrapper that failed. Not a kill or a cancel
    /// (an operator's decision), not a lost target (its command may still be running) and
    /// not an unreachable machine (`retry_unreachable`).
    pub(crate) fn wants_retry(&self, retries: u32) -> bool {
        let Phase::Finished(outcome) = &self.phase else {
            return false;
        };
        let retriable = match outcome.reason {
            Some(TargetReason::Exit) => outcome.code != Some(0),
            Some(
                TargetReason::Timeout | TargetReason::WrapperFailed | TargetReason::MemoryLimit,
            ) => true,
            _ => false,
        };
        retriable && !self.kill_wanted && self.attempt <= retries
    }

    /// A new attempt of a failed target: pending again, with a fresh session (the launch
    /// token works again, output is acknowledged from seq 1 again).
    pub(crate) fn retry(&mut self) -> Vec<Effect> {
        let Phase::Finished(previous) = self.phase else {
            return Vec::new();
        };
        self.new_attempt(previous)
    }

    /// The next attempt after `previous`: pending again with a fresh session (the launch
    /// token works again, no resume key, output acknowledged from seq 1 again); shared by
    /// `retry` and an unreachable minion that came back (`shell/run/unreachable.rs`).
    pub(crate) fn new_attempt(&mut self, previous: Outcome) -> Vec<Effect> {
        self.attempt += 1;
        self.phase = Phase::Pending;
        self.conn = None;
        self.token = Token::Unused;
        self.resume_hash = None;
        self.acked_seq = 0;
        self.refusals = None;
        self.started = None;
        self.ended = None;
        self.limits = None;
        vec![
            Effect::StoreRetry {
                attempt: self.attempt,
                previous,
            },
            Effect::WakeRun,
        ]
    }
}
