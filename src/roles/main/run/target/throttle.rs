//! A target held back by `max_running_per_machine` (decided in `throttle.rs`).

use super::{Effect, Phase, Target};
use crate::wire::records::TargetState;

impl Target {
    /// Its wrapper was launched and its command has not ended: it holds a place on its
    /// machine.
    pub(crate) fn occupies_machine(&self) -> bool {
        matches!(self.phase, Phase::Launching | Phase::PickedUp { .. })
    }

    /// Pending, held back by `max_running_per_machine`.
    pub(crate) fn is_throttled(&self) -> bool {
        self.phase == Phase::Pending && self.throttled.is_some()
    }

    /// Its batch came but its machine is full: it stays pending, shown as `queued` with
    /// `reason`, until a place frees up.
    pub(crate) fn hold_for_capacity(&mut self, reason: String) -> Vec<Effect> {
        if self.phase != Phase::Pending {
            return Vec::new();
        }
        let before = self.state();
        self.throttled = Some(reason);
        debug_assert!(
            self.is_throttled(),
            "a held target is pending and throttled"
        );
        if before == TargetState::Queued {
            return Vec::new();
        }
        vec![Effect::StoreState(TargetState::Queued, None)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_target_is_queued_until_launched() {
        let mut t = Target::new(0);
        assert_eq!(t.state(), TargetState::Pending);
        let effects = t.hold_for_capacity("waiting: full".into());
        assert_eq!(effects, [Effect::StoreState(TargetState::Queued, None)]);
        assert!(t.is_throttled() && !t.occupies_machine());
        assert_eq!(t.state(), TargetState::Queued);
        // Held again: nothing new to store. Not awaiting pick-up: no deadline runs.
        assert!(t.hold_for_capacity("waiting: still full".into()).is_empty());
        assert!(!t.awaiting_pickup());
        t.launch();
        assert!(!t.is_throttled() && t.occupies_machine());
        assert_eq!(t.state(), TargetState::Launching);
    }
}
