//! An episode of refused output, by itself: how many frames were refused, and when the
//! wrapper was last told to hold (`refused.rs` applies it to a target).

use std::time::{Duration, Instant};

use crate::wire::link::ConnId;

pub(crate) const FIRST_WAIT: Duration = Duration::from_millis(500);
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(5);

/// An episode of refused output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Refusals {
    /// Frames refused in this episode.
    frames: u64,
    /// The last `output_held`: to which connection, when, and the wait it asked for.
    told: Option<(ConnId, Instant, Duration)>,
    /// `output_held` messages sent in this episode.
    holds: u32,
}

fn wait_for(holds: u32) -> Duration {
    FIRST_WAIT.saturating_mul(1 << holds.min(8)).min(MAX_WAIT)
}

impl Refusals {
    /// One more frame refused. With a wrapper on `conn`: the wait to tell it, unless it
    /// was told on that link and the wait it got is not over.
    pub(crate) fn refused(&mut self, conn: Option<ConnId>, now: Instant) -> Option<Duration> {
        self.frames += 1;
        // No wrapper connected: it resends from the last ack when it is back.
        let conn = conn?;
        if let Some((told, at, wait)) = self.told
            && told == conn
            && now < at + wait
        {
            return None;
        }
        let retry_after = wait_for(self.holds);
        self.holds += 1;
        self.told = Some((conn, now, retry_after));
        Some(retry_after)
    }

    /// Frames refused in this episode.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }
}
