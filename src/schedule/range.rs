//! A job's active date range (`active_from` / `active_until`): the span of time in which
//! its slots fire. Pure: nothing here reads the clock.
//!
//! The bounds are kept as instants, already resolved in the job's zone by the config
//! reader, both inclusive: a slot at `from` fires, a slot at `until` fires. A date given
//! as `active_until` is the end of that day (the config reader passes the last instant of
//! the day), so `active_until: 2026-12-31` still fires on New Year's Eve.
//!
//! The range lives in the [`super::Schedule`], so every question asked of a schedule
//! (the scheduler's next slot, missed slots after a downtime, `schedule next`, the
//! dashboard's next run) answers within it without knowing about it.

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// The instants a job is active in, with the bounds as the job's file wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActiveRange {
    /// First instant a slot may fire at (inclusive).
    pub from: Option<DateTime<Utc>>,
    /// Last instant a slot may fire at (inclusive).
    pub until: Option<DateTime<Utc>>,
    /// `active_from` as written, for messages.
    pub from_text: Option<Arc<str>>,
    /// `active_until` as written, for messages.
    pub until_text: Option<Arc<str>>,
}

/// Where an instant lies relative to a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangePhase {
    /// Before `active_from`.
    NotYet,
    Active,
    /// After `active_until`: the job never fires again.
    Ended,
}

impl ActiveRange {
    /// No bound: always active.
    pub fn is_unbounded(&self) -> bool {
        self.from.is_none() && self.until.is_none()
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.phase(t) == RangePhase::Active
    }

    pub fn phase(&self, t: DateTime<Utc>) -> RangePhase {
        if self.from.is_some_and(|f| t < f) {
            RangePhase::NotYet
        } else if self.until.is_some_and(|u| t > u) {
            RangePhase::Ended
        } else {
            RangePhase::Active
        }
    }

    /// Why a job with this range has no slot at or after `now`, or is not active yet;
    /// `None` while it is active.
    pub fn note(&self, now: DateTime<Utc>) -> Option<String> {
        match self.phase(now) {
            RangePhase::Active => None,
            RangePhase::NotYet => Some(format!(
                "not active yet: active_from {} ({})",
                self.from_text.as_deref().unwrap_or("?"),
                rfc3339(self.from)
            )),
            RangePhase::Ended => Some(format!(
                "range ended: active_until {} ({}) has passed; the job fires no more",
                self.until_text.as_deref().unwrap_or("?"),
                rfc3339(self.until)
            )),
        }
    }
}

fn rfc3339(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}
