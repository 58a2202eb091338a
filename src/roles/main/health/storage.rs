//! Whether the database stores, and what waits for it to store again.
//!
//! Storage trouble is a state with its own way out, never a latch: it begins with a write
//! that fails (a full disk, a database that cannot be reached, a call db did not answer
//! in time) and ends with the first write that succeeds, whatever it was. While it lasts
//! a probe write goes every [`PROBE_EVERY`], so the trouble ends even when nothing else
//! writes. Nothing is refused because of it: every slot still tries to record its run
//! (that write is a probe too), and what could not be written is kept here:
//!
//! - a target's outcome waits, with its wrapper, for a write that succeeds: retried with
//!   a backoff from [`FIRST_RETRY`] to [`LAST_RETRY`] (the wrapper keeps its exit and
//!   gets `done` only then);
//! - a slot whose run could not be recorded is counted at once and recorded, as skipped
//!   with the true reason, once the database stores again (at most [`MAX_UNRECORDED`]
//!   are kept; beyond that they are counted only).
//!
//! Everything here takes `now`: no clock, no socket, unit tested below.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::wire::records::{Millis, RunId, Trigger};

/// The first retry of an outcome that could not be written.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between two retries.
pub(crate) const LAST_RETRY: Duration = Duration::from_secs(10);
/// How often a probe write goes while nothing else succeeds.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(5);
/// Slots kept to be recorded once the database stores again.
pub(crate) const MAX_UNRECORDED: usize = 10_000;

/// A slot whose run could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnrecordedSlot {
    pub job: String,
    pub slot: Millis,
    pub trigger: Trigger,
    /// What the database said.
    pub why: String,
}

#[derive(Debug, Clone)]
struct Trouble {
    why: String,
    since: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Retry {
    at: Instant,
    delay: Duration,
    /// Handed out by [`Storage::due_outcomes`], its write not answered yet.
    out: bool,
}

/// The end of a trouble: what it was and how long it lasted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    pub why: String,
    pub lasted: Duration,
}

#[derive(Debug, Default)]
pub(crate) struct Storage {
    trouble: Option<Trouble>,
    next_probe: Option<Instant>,
    retries: BTreeMap<(RunId, String), Retry>,
    unrecorded: BTreeMap<(String, Millis), UnrecordedSlot>,
    write_failures: u64,
    slots_refused: u64,
}

impl Storage {
    /// Why the database does not store, while it does not.
    pub(crate) fn trouble(&self) -> Option<&str> {
        self.trouble.as_ref().map(|t| t.why.as_str())
    }

    /// Writes that failed since the start (`saltpeter_db_write_failures_total`).
    pub(crate) fn write_failures(&self) -> u64 {
        self.write_failures
    }

    /// Slots whose run could not be recorded (`saltpeter_slots_refused_total`).
    pub(crate) fn slots_refused(&self) -> u64 {
        self.slots_refused
    }

    /// Outcomes waiting for a write that succeeds.
    pub(crate) fn outcomes_waiting(&self) -> usize {
        self.retries.len()
    }

    /// A write failed at `now` for `why`; true when this begins a trouble.
    pub(crate) fn write_failed(&mut self, why: &str, now: Instant) -> bool {
        self.write_failures += 1;
        match &mut self.trouble {
            Some(t) => {
                t.why = why.to_string();
                false
            }
            None => {
                self.trouble = Some(Trouble {
                    why: why.to_string(),
                    since: now,
                });
                self.next_probe = Some(now + PROBE_EVERY);
                true
            }
        }
    }

    /// A write succeeded at `now`: the trouble, if any, is over (and every outcome waiting
    /// is due at once).
    pub(crate) fn write_stored(&mut self, now: Instant) -> Option<Recovered> {
        let t = self.trouble.take()?;
        self.next_probe = None;
        for r in self.retries.values_mut() {
            if !r.out {
                r.at = now;
            }
        }
        Some(Recovered {
            why: t.why,
            lasted: now.saturating_duration_since(t.since),
        })
    }

    /// Whether a probe write is due at `now` (only during a trouble); the next one is
    /// planned when it is.
    pub(crate) fn probe_due(&mut self, now: Instant) -> bool {
        match self.next_probe {
            Some(at) if self.trouble.is_some() && now >= at => {
                self.next_probe = Some(now + PROBE_EVERY);
                true
            }
            _ => false,
        }
    }

    /// The outcome of `machine` in `run` could not be written at `now`: try again later,
    /// each time twice as late up to [`LAST_RETRY`].
    pub(crate) fn outcome_not_stored(&mut self, run: RunId, machine: &str, now: Instant) {
        let key = (run, machine.to_string());
        let delay = match self.retries.get(&key) {
            Some(r) => (r.delay * 2).min(LAST_RETRY),
            None => FIRST_RETRY,
        };
        self.retries.insert(
            key,
            Retry {
                at: now + delay,
                delay,
                out: false,
            },
        );
    }

    /// The outcome is stored, or no longer to be written (its target moved on).
    pub(crate) fn outcome_settled(&mut self, run: RunId, machine: &str) {
        self.retries.remove(&(run, machine.to_string()));
    }

    /// Every outcome of `run` is forgotten (the run left main).
    pub(crate) fn run_gone(&mut self, run: RunId) {
        self.retries.retain(|(r, _), _| *r != run);
    }

    /// The outcomes whose next write is due at `now` (each handed out once until its
    /// write is answered).
    pub(crate) fn due_outcomes(&mut self, now: Instant) -> Vec<(RunId, String)> {
        let mut due = Vec::new();
        for (key, r) in &mut self.retries {
            if !r.out && now >= r.at {
                r.out = true;
                due.push(key.clone());
            }
        }
        due
    }

    /// A slot's run could not be recorded: counted now, recorded later.
    pub(crate) fn slot_not_recorded(&mut self, slot: UnrecordedSlot) {
        self.slots_refused += 1;
        self.keep_unrecorded(slot);
    }

    /// The slots to record now: all of them once the database stores, none before.
    pub(crate) fn take_unrecorded(&mut self) -> Vec<UnrecordedSlot> {
        if self.trouble.is_some() {
            return Vec::new();
        }
        std::mem::take(&mut self.unrecorded).into_values().collect()
    }

    /// A slot's record failed again: kept for the next recovery.
    pub(crate) fn keep_unrecorded(&mut self, slot: UnrecordedSlot) {
        if self.unrecorded.len() < MAX_UNRECORDED {
            self.unrecorded.insert((slot.job.clone(), slot.slot), slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(job: &str, at: Millis) -> UnrecordedSlot {
        UnrecordedSlot {
            job: job.into(),
            slot: at,
            trigger: Trigger::Schedule,
            why: "the disk is full".into(),
        }
    }

    #[test]
    fn trouble_begins_with_a_failure_and_ends_with_any_stored_write() {
        let t0 = Instant::now();
        let mut s = Storage::default();
        assert!(
            s.write_stored(t0).is_none(),
            "no trouble, nothing recovered"
        );
        assert!(s.write_failed("full", t0));
        assert!(!s.write_failed("still full", t0 + FIRST_RETRY));
        assert_eq!(s.trouble(), Some("still full"));
        assert_eq!(s.write_failures(), 2);
        let r = s.write_stored(t0 + Duration::from_secs(7));
        assert_eq!(
            r,
            Some(Recovered {
                why: "still full".into(),
                lasted: Duration::from_secs(7)
            })
        );
        assert_eq!(s.trouble(), None);
    }

    #[test]
    fn a_probe_is_due_every_period_during_a_trouble_only() {
        let t0 = Instant::now();
        let mut s = Storage::default();
        assert!(!s.probe_due(t0 + PROBE_EVERY * 3));
        s.write_failed("full", t0);
        assert!(!s.probe_due(t0 + PROBE_EVERY / 2));
        assert!(s.probe_due(t0 + PROBE_EVERY));
        assert!(!s.probe_due(t0 + PROBE_EVERY + Duration::from_secs(1)));
        assert!(s.probe_due(t0 + PROBE_EVERY * 2));
        s.write_stored(t0 + PROBE_EVERY * 2);
        assert!(!s.probe_due(t0 + PROBE_EVERY * 10));
    }

    #[test]
    fn an_outcome_is_retried_with_a_growing_backoff_and_once_at_a_time() {
        let t0 = Instant::now();
        let mut s = Storage::default();
        s.outcome_not_stored(7, "a", t0);
        assert!(s.due_outcomes(t0).is_empty());
        assert_eq!(s.due_outcomes(t0 + FIRST_RETRY), vec![(7, "a".to_string())]);
        assert!(
            s.due_outcomes(t0 + LAST_RETRY * 5).is_empty(),
            "handed out once until answered"
        );
        let mut now = t0 + FIRST_RETRY;
        let mut delays = Vec::new();
        for _ in 0..8 {
            s.outcome_not_stored(7, "a", now);
            let mut waited = Duration::ZERO;
            while s.due_outcomes(now + waited).is_empty() {
                waited += Duration::from_millis(250);
            }
            delays.push(waited);
            now += waited;
        }
        assert_eq!(delays[0], FIRST_RETRY * 2);
        assert_eq!(delays[1], FIRST_RETRY * 4);
        assert_eq!(*delays.last().unwrap_or(&Duration::ZERO), LAST_RETRY);
        s.outcome_settled(7, "a");
        assert_eq!(s.outcomes_waiting(), 0);
    }

    #[test]
    fn the_end_of_a_trouble_makes_every_waiting_outcome_due() {
        let t0 = Instant::now();
        let mut s = Storage::default();
        s.write_failed("down", t0);
        for _ in 0..6 {
            s.outcome_not_stored(1, "a", t0);
        }
        s.outcome_not_stored(2, "b", t0);
        s.write_stored(t0 + Duration::from_secs(1));
        assert_eq!(s.due_outcomes(t0 + Duration::from_secs(1)).len(), 2);
        s.run_gone(1);
        assert_eq!(s.outcomes_waiting(), 1);
    }

    #[test]
    fn slots_are_counted_at_once_and_recorded_once_storage_is_back() {
        let t0 = Instant::now();
        let mut s = Storage::default();
        s.write_failed("full", t0);
        s.slot_not_recorded(slot("j", 1000));
        s.slot_not_recorded(slot("j", 1000));
        s.slot_not_recorded(slot("k", 1000));
        assert_eq!(s.slots_refused(), 3);
        assert!(
            s.take_unrecorded().is_empty(),
            "not while the trouble lasts"
        );
        s.write_stored(t0);
        let slots = s.take_unrecorded();
        assert_eq!(slots, vec![slot("j", 1000), slot("k", 1000)]);
        assert!(s.take_unrecorded().is_empty());
    }

    #[test]
    fn the_slots_kept_are_bounded() {
        let mut s = Storage::default();
        for i in 0..(MAX_UNRECORDED as i64 + 50) {
            s.slot_not_recorded(slot("j", i));
        }
        assert_eq!(s.slots_refused(), MAX_UNRECORDED as u64 + 50);
        assert_eq!(s.take_unrecorded().len(), MAX_UNRECORDED);
    }
}
