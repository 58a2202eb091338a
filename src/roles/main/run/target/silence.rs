//! A target's silence: judged only over time the daemon ran (`health/liveness.rs`).

use std::time::{Duration, Instant};

use super::{Phase, Target};

impl Target {
    /// Picked up, and no word from its wrapper for longer than `silence` at `now`
    /// (`before_start` while its command has not started: a staged wrapper's slower beat).
    pub(crate) fn silent_too_long(
        &self,
        now: Instant,
        silence: Duration,
        before_start: Duration,
    ) -> bool {
        match &self.phase {
            Phase::PickedUp {
                running,
                last_seen,
                grace_until,
                ..
            } => {
                let limit = if *running { silence } else { before_start };
                !grace_until.is_some_and(|until| now < until)
                    && now.saturating_duration_since(*last_seen) > limit
            }
            _ => false,
        }
    }

    /// A stall of the daemon ended at `now` (`health/liveness.rs`): its silence until
    /// then does not count, and it has `grace` to be heard again.
    pub(crate) fn excuse_silence(&mut self, now: Instant, grace: Duration) {
        if let Phase::PickedUp {
            last_seen,
            grace_until,
            ..
        } = &mut self.phase
        {
            *last_seen = now;
            *grace_until = Some(grace_until.map_or(now + grace, |g| g.max(now + grace)));
        }
    }
}
