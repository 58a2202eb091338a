//! Output db could not store (a full disk, a failing write, a call that timed out):
//! back-pressure on the wrapper's open link, never a closed one.
//!
//! Nothing refused is acknowledged, and the wrapper is told `output_held {from_seq,
//! retry_after_ms}`, `from_seq` being the first seq not stored: it keeps that output
//! (memory, then its spool), waits, sends one frame, and the rest once an `ack` shows
//! that db stores again (`wrapper/hold.rs`). The link stays open and its heartbeats keep
//! the target alive. A wrapper that did not advertise `output_held` (an older build) has
//! its link closed by the hub instead, as before: it reconnects and resends.
//!
//! One episode runs from the first refusal to the next time output is stored (the
//! acknowledged seq moves on); the shell logs its start and its end, not every frame.
//! Within it the wrapper is told again only once the wait it was given has passed: the
//! frames it sent before hearing of the hold are refused too, and are covered by it (it
//! resends everything from `from_seq`). Each message of an episode doubles the wait,
//! from [`FIRST_WAIT`](super::refusals::FIRST_WAIT) to [`MAX_WAIT`](super::refusals::MAX_WAIT), so a disk that stays full costs one refused
//! frame per wait and storage back is noticed within `MAX_WAIT`.

use std::time::Instant;

use super::refusals::Refusals;
use super::{Effect, Target};

impl Target {
    /// db could not store an output frame of this target: tell its wrapper to hold
    /// its output, unless it was told and the wait it got is not over.
    pub(crate) fn output_refused(&mut self, now: Instant) -> Vec<Effect> {
        let conn = self.conn;
        let episode = self.refusals.get_or_insert_with(Refusals::default);
        match (conn, episode.refused(conn, now)) {
            (Some(conn), Some(retry_after)) => vec![Effect::HoldOutput {
                conn,
                from_seq: self.acked_seq + 1,
                retry_after,
            }],
            _ => Vec::new(),
        }
    }

    /// Frames refused since output was last stored; `None` while db stores it.
    pub(crate) fn output_refusals(&self) -> Option<u64> {
        self.refusals.as_ref().map(Refusals::frames)
    }

    /// The acknowledged seq moved on: the episode, if any, is over.
    pub(super) fn output_stored_again(&mut self) {
        self.refusals = None;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::roles::main::run::target::Credential;
    use crate::roles::main::run::target::refusals::FIRST_WAIT;
    use crate::wire::link::ConnId;

    const C1: ConnId = 1;
    const C2: ConnId = 2;
    const MS: Duration = Duration::from_millis(1);

    fn running(t0: Instant) -> Target {
        let mut t = Target::new(0);
        t.launch();
        t.hello(t0, C1, Credential::LaunchToken { valid: true })
            .expect("welcome");
        t.heard(t0);
        t.command_started(1_000, None);
        t
    }

    fn hold(conn: ConnId, from_seq: u64, retry_after: Duration) -> Vec<Effect> {
        vec![Effect::HoldOutput {
            conn,
            from_seq,
            retry_after,
        }]
    }

    #[test]
    fn refused_output_holds_the_wrapper_instead_of_closing_its_link() {
        let t0 = Instant::now();
        let mut t = running(t0);
        t.output_stored(3, 0);
        assert_eq!(t.output_refused(t0), hold(C1, 4, FIRST_WAIT));
        assert_eq!(t.conn(), Some(C1), "the link stays");
        assert_eq!(t.output_refusals(), Some(1));
    }

    #[test]
    fn frames_refused_within_the_wait_are_covered_by_the_first_hold() {
        let t0 = Instant::now();
        let mut t = running(t0);
        assert_eq!(t.output_refused(t0).len(), 1);
        for i in 1..50 {
            assert!(t.output_refused(t0 + i * MS).is_empty(), "frame {i}");
        }
        assert_eq!(t.output_refusals(), Some(50));
        // The probe after the wait is refused: told again, waiting twice as long.
        assert_eq!(
            t.output_refused(t0 + FIRST_WAIT),
            hold(C1, 1, 2 * FIRST_WAIT)
        );
    }

    #[test]
    fn the_wait_doubles_to_its_cap_and_an_ack_ends_the_episode() {
        let t0 = Instant::now();
        let mut t = running(t0);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            match t.output_refused(now)[..] {
                [Effect::HoldOutput { retry_after, .. }] => {
                    waits.push(retry_after);
                    now += retry_after;
                }
                ref other => panic!("{other:?}"),
            }
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 5000, 5000]);
        // Stored again: the ack goes, the episode is over, the next one starts afresh.
        assert_eq!(t.output_stored(2, 0), [Effect::Ack(C1, 2)]);
        assert_eq!(t.output_refusals(), None);
        assert_eq!(t.output_refused(now), hold(C1, 3, FIRST_WAIT));
    }

    #[test]
    fn a_store_that_does_not_move_the_ack_leaves_the_episode_open() {
        let t0 = Instant::now();
        let mut t = running(t0);
        t.output_stored(2, 0);
        t.output_refused(t0);
        // A later frame stored above the gap: the ack stays at 2.
        assert!(t.output_stored(2, 0).is_empty());
        assert_eq!(t.output_refusals(), Some(1));
    }

    #[test]
    fn a_new_connection_is_told_at_once_and_none_is_told_nothing() {
        let t0 = Instant::now();
        let mut t = running(t0);
        t.output_refused(t0);
        t.gone(C1);
        assert!(t.output_refused(t0 + MS).is_empty(), "no wrapper to tell");
        t.hello(t0 + 2 * MS, C2, Credential::ResumeKey { valid: true })
            .expect("welcome back");
        assert_eq!(
            t.output_refused(t0 + 3 * MS),
            hold(C2, 1, 2 * FIRST_WAIT),
            "another link has not heard of the hold"
        );
    }
}
