//! A target whose minion did not answer, waiting for it to come back
//! (`retry_unreachable`, driven by `shell/run/unreachable.rs`).

use std::time::{Duration, Instant};

use super::{Effect, Outcome, Phase, Target};
use crate::wire::records::{Millis, TargetReason};

impl Target {
    /// Its minion did not answer at `now`: wait until `now + window` for it (state
    /// `waiting_unreachable`, reason unreachable, no exit code until it is decided).
    pub(crate) fn await_return(
        &mut self,
        now: Instant,
        window: Duration,
        now_ms: Millis,
    ) -> Vec<Effect> {
        if self.phase != Phase::Pending {
            return Vec::new();
        }
        self.phase = Phase::WaitingUnreachable {
            until: now + window,
        };
        self.ended = Some(now_ms);
        vec![Effect::StoreWaiting { ended: now_ms }]
    }

    /// Waiting for its minion.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::WaitingUnreachable { .. })
    }

    /// Its window closes at this instant (while waiting).
    pub(crate) fn waiting_until(&self) -> Option<Instant> {
        match self.phase {
            Phase::WaitingUnreachable { until } => Some(until),
            _ => None,
        }
    }

    /// Its minion answered: a new attempt, pending to be launched.
    pub(crate) fn came_back(&mut self) -> Vec<Effect> {
        if !self.is_waiting() || self.kill_wanted {
            return Vec::new();
        }
        self.new_attempt(Outcome {
            reason: Some(TargetReason::Unreachable),
            code: Some(255),
        })
    }

    /// The window closed at `now` without its minion: final, `gave_up` (255).
    pub(crate) fn give_up_waiting(&mut self, now: Instant, now_ms: Millis) -> Vec<Effect> {
        match self.phase {
            Phase::WaitingUnreachable { until } if until <= now => {
                self.finish(TargetReason::GaveUp, Some(255), now_ms)
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_target_comes_back_as_a_new_attempt() {
        let now = Instant::now();
        let mut t = Target::new(0);
        let fx = t.await_return(now, Duration::from_secs(60), 1_000);
        assert_eq!(fx, vec![Effect::StoreWaiting { ended: 1_000 }]);
        assert!(t.is_waiting());
        assert_eq!(
            t.state(),
            crate::wire::records::TargetState::WaitingUnreachable
        );
        assert!(!t.is_settled() && !t.is_decided() && !t.awaiting_pickup());
        // Not before the window closes.
        assert!(t.give_up_waiting(now, 2_000).is_empty());
        let fx = t.came_back();
        assert_eq!(t.attempt, 2);
        assert_eq!(t.phase, Phase::Pending);
        assert!(matches!(
            fx[0],
            Effect::StoreRetry {
                attempt: 2,
                previous: Outcome {
                    reason: Some(TargetReason::Unreachable),
                    code: Some(255)
                }
            }
        ));
        // Only once.
        assert!(t.came_back().is_empty());
    }

    #[test]
    fn the_window_closes_as_given_up_and_a_kill_cancels() {
        let now = Instant::now();
        let mut t = Target::new(0);
        t.await_return(now, Duration::from_secs(60), 0);
        let later = now + Duration::from_secs(61);
        let fx = t.give_up_waiting(later, 61_000);
        assert!(matches!(
            fx[0],
            Effect::RecordOutcome {
                outcome: Outcome {
                    reason: Some(TargetReason::GaveUp),
                    code: Some(255)
                },
                ..
            }
        ));
        let mut k = Target::new(0);
        k.await_return(now, Duration::from_secs(60), 0);
        match k.kill(5) {
            crate::roles::main::run::target::KillAction::Canceled(fx) => assert!(matches!(
                fx[0],
                Effect::RecordOutcome {
                    outcome: Outcome {
                        reason: Some(TargetReason::Canceled),
                        code: None
                    },
                    ..
                }
            )),
            other => panic!("{other:?}"),
        }
        assert!(
            k.came_back().is_empty(),
            "a killed target does not come back"
        );
    }
}
