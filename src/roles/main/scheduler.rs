//! When each job fires next. Pure: every function takes `now`.
//!
//! The next slot of a job is computed from its previous slot, not from the clock, so a
//! slot never fires twice even if the wall clock steps backwards, and a clock that steps
//! forward shows up as slots that are late (recorded as missed beyond the grace).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::config::{Job, JobEntry};

/// How late a slot may fire and still run; later ones are recorded as missed.
pub const MISSED_GRACE_S: i64 = 60;

/// A slot to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub job: String,
    pub slot: DateTime<Utc>,
    /// Later than the grace: record as missed, do not run.
    pub missed: bool,
    /// Taken ahead of its slot (pre-staging): the run waits for the slot to go.
    pub early: bool,
}

#[derive(Debug, Default)]
pub struct Scheduler {
    next: BTreeMap<String, DateTime<Utc>>,
}

impl Scheduler {
    /// Recompute the plan for `jobs` (after start or a reload). A job that keeps its
    /// schedule keeps its pending slot, so a reload at the firing instant loses nothing.
    pub fn plan<'a>(&mut self, jobs: impl Iterator<Item = &'a Job>, now: DateTime<Utc>) {
        let mut next = BTreeMap::new();
        for job in jobs.filter(|j| j.enabled) {
            let fresh = job.schedule.next_after(now);
            let kept =
                self.next.get(&job.name).copied().filter(|slot| {
                    Some(*slot) <= fresh && *slot > now - chrono::Duration::seconds(1)
                });
            if let Some(slot) = kept.or(fresh) {
                next.insert(job.name.clone(), slot);
            }
        }
        self.next = next;
    }

    pub fn next_of(&self, job: &str) -> Option<DateTime<Utc>> {
        self.next.get(job).copied()
    }

    /// When the loop must next wake: the earliest slot minus its job's lead.
    pub fn earliest(
        &self,
        jobs: &BTreeMap<String, JobEntry>,
        lead: impl Fn(&Job) -> chrono::Duration,
    ) -> Option<DateTime<Utc>> {
        self.next
            .iter()
            .map(
                |(name, slot)| match jobs.get(name).and_then(JobEntry::job) {
                    Some(job) => *slot - lead(job),
                    None => *slot,
                },
            )
            .min()
    }

    /// Every slot whose time minus its job's `lead` has come, oldest first; each job's
    /// plan moves past them. At most `cap` slots per job are returned (a long downtime is
    /// summarised by its newest slots).
    pub fn take_due(
        &mut self,
        now: DateTime<Utc>,
        jobs: &BTreeMap<String, JobEntry>,
        cap: usize,
        lead: impl Fn(&Job) -> chrono::Duration,
    ) -> Vec<Due> {
        let mut due = Vec::new();
        let names: Vec<String> = self
            .next
            .iter()
            .filter(|(name, slot)| {
                let lead = jobs
                    .get(*name)
                    .and_then(JobEntry::job)
                    .map(&lead)
                    .unwrap_or_default();
                **slot - lead <= now
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            let Some(job) = jobs.get(&name).and_then(JobEntry::job) else {
                self.next.remove(&name);
                continue;
            };
            let horizon = now + lead(job);
            let mut slots = Vec::new();
            let mut slot = self.next.get(&name).copied();
            while let Some(s) = slot.filter(|s| *s <= horizon) {
                slots.push(s);
                if slots.len() > cap {
                    slots.remove(0);
                }
                slot = job.schedule.next_after(s);
            }
            match slot {
                Some(s) => {
                    self.next.insert(name.clone(), s);
                }
                None => {
                    self.next.remove(&name);
                }
            }
            for s in slots {
                let late = (now - s).num_seconds();
                due.push(Due {
                    job: name.clone(),
                    slot: s,
                    missed: late > MISSED_GRACE_S,
                    early: s > now,
                });
            }
        }
        due.sort_by_key(|d| d.slot);
        due
    }
}
