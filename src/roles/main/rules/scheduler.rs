//! When each job fires next. Pure: every function takes `now`.
//!
//! The next slot of a job is computed from its previous slot, not from the clock, so a
//! slot never fires twice even if the wall clock steps backwards, and a clock that steps
//! forward shows up as slots that are late (recorded as missed beyond the grace).
//!
//! The plan is a map job -> next slot plus a queue ordered by slot, so that the loop's
//! questions — when to wake next, which slots are due — cost the number of jobs due, not
//! the number of jobs configured (10,000 jobs with a few firing every second must not
//! cost a scan of all of them every second). A job may be taken ahead of its slot by its
//! lead (pre-staged salt runs); leads are at most [`Leads::max`], which bounds the part of
//! the queue looked at.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use chrono::{DateTime, Duration, Utc};

use crate::config::{Executor, Job, JobEntry};
use crate::schedule::Schedule;

/// How late a slot may fire and still run; later ones are recorded as missed.
pub(crate) const MISSED_GRACE_S: i64 = 60;

/// A slot to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub job: String,
    pub slot: DateTime<Utc>,
    /// Later than the grace: record as missed, do not run.
    pub missed: bool,
    /// Taken ahead of its slot (pre-staging): the run waits for the slot to go.
    pub early: bool,
}

/// How far ahead of its slot each job is taken: salt jobs by the pre-staging lead, the
/// others at their slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Leads {
    /// The lead of a salt job whose launches have not been measured yet (the cap: a
    /// lead is never learned at the cost of a late slot).
    pub salt: Duration,
    /// Salt jobs with measured launches: their own lead (at most `salt`).
    pub per_job: std::collections::HashMap<String, Duration>,
    /// The lead of a job of an executor plugin (a fixed one: `PLUGIN_LEAD` within
    /// `prestage_cap`).
    pub plugin: Duration,
}

impl Leads {
    #[cfg(test)]
    pub(crate) fn none() -> Leads {
        Leads::default()
    }

    pub(crate) fn of(&self, job: &Job) -> Duration {
        match job.executor {
            Executor::Salt => self
                .per_job
                .get(&job.name)
                .copied()
                .unwrap_or(self.salt)
                .max(Duration::zero()),
            Executor::Plugin(_) => self.plugin.max(Duration::zero()),
            Executor::Local => Duration::zero(),
        }
    }

    /// The longest lead of any job.
    pub(crate) fn max(&self) -> Duration {
        self.per_job
            .values()
            .copied()
            .fold(self.salt.max(self.plugin), Duration::max)
            .max(Duration::zero())
    }
}

/// The lead of `job` for its slot `slot`: its lead, but never more than the gap to its
/// following slot, so at most one run of a job is staged ahead (a job every 15 s is not
/// staged four slots ahead by a 60 s cap).
fn lead_at(leads: &Leads, job: &Job, slot: DateTime<Utc>) -> Duration {
    let lead = leads.of(job);
    if lead <= Duration::zero() {
        return lead;
    }
    match job.schedule.next_after(slot) {
        Some(next) => lead.min(next - slot),
        None => lead,
    }
}

/// A job's planned slot, and the schedule it was computed from (a reload that keeps the
/// schedule keeps the slot as is; comparing is cheap, see `Schedule`'s `PartialEq`).
#[derive(Debug, Clone)]
struct Planned {
    slot: DateTime<Utc>,
    schedule: Schedule,
}

#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    next: HashMap<String, Planned>,
    /// The same slots, ordered: `(slot, job)`.
    queue: BTreeSet<(DateTime<Utc>, String)>,
}

fn job_of<'a>(jobs: &'a BTreeMap<String, JobEntry>, name: &str) -> Option<&'a Job> {
    jobs.get(name).and_then(JobEntry::job)
}

impl Scheduler {
    /// Recompute the plan for `jobs` (after start or a reload). A job that keeps its
    /// schedule keeps its pending slot, so a reload at the firing instant loses nothing,
    /// and unchanged jobs cost no schedule computation.
    pub(crate) fn plan<'a>(&mut self, jobs: impl Iterator<Item = &'a Job>, now: DateTime<Utc>) {
        let mut previous = std::mem::take(&mut self.next);
        self.queue.clear();
        let recent = now - Duration::seconds(1);
        for job in jobs.filter(|j| j.enabled) {
            let kept = previous
                .remove(&job.name)
                .filter(|p| p.schedule == job.schedule && p.slot > recent)
                .map(|p| p.slot);
            let slot = match kept {
                Some(slot) => Some(slot),
                None => job.schedule.next_after(now),
            };
            if let Some(slot) = slot {
                self.insert(&job.name, slot, job.schedule.clone());
            }
        }
    }

    fn insert(&mut self, job: &str, slot: DateTime<Utc>, schedule: Schedule) {
        if let Some(old) = self
            .next
            .insert(job.to_string(), Planned { slot, schedule })
        {
            self.queue.remove(&(old.slot, job.to_string()));
        }
        self.queue.insert((slot, job.to_string()));
    }

    fn remove(&mut self, job: &str) {
        if let Some(old) = self.next.remove(job) {
            self.queue.remove(&(old.slot, job.to_string()));
        }
    }

    pub(crate) fn next_of(&self, job: &str) -> Option<DateTime<Utc>> {
        self.next.get(job).map(|p| p.slot)
    }

    /// When the loop must next wake: the earliest slot minus its job's lead.
    pub(crate) fn earliest(
        &self,
        jobs: &BTreeMap<String, JobEntry>,
        leads: &Leads,
    ) -> Option<DateTime<Utc>> {
        let mut best: Option<DateTime<Utc>> = None;
        for (slot, name) in &self.queue {
            if best.is_some_and(|b| *slot - leads.max() > b) {
                break;
            }
            let lead = job_of(jobs, name)
                .map(|j| lead_at(leads, j, *slot))
                .unwrap_or_default();
            let at = *slot - lead;
            best = Some(best.map_or(at, |b| b.min(at)));
        }
        best
    }

    /// Every slot whose time minus its job's lead has come, oldest first; each job's
    /// plan moves past them. At most `cap` slots per job are returned (a long stall is
    /// summarised by its newest slots).
    pub(crate) fn take_due(
        &mut self,
        now: DateTime<Utc>,
        jobs: &BTreeMap<String, JobEntry>,
        cap: usize,
        leads: &Leads,
    ) -> Vec<Due> {
        let horizon = now + leads.max();
        let candidates: Vec<(DateTime<Utc>, String)> = self
            .queue
            .iter()
            .take_while(|(slot, _)| *slot <= horizon)
            .cloned()
            .collect();
        let mut due = Vec::new();
        for (first, name) in candidates {
            let Some(job) = job_of(jobs, &name) else {
                self.remove(&name);
                continue;
            };
            let lead = lead_at(leads, job, first);
            if first - lead > now {
                continue;
            }
            let job_horizon = now + lead;
            let mut slots = VecDeque::new();
            let mut slot = Some(first);
            while let Some(s) = slot.filter(|s| *s <= job_horizon) {
                slots.push_back(s);
                if slots.len() > cap {
                    slots.pop_front();
                }
                slot = job.schedule.next_after(s);
            }
            match slot {
                Some(s) => self.insert(&name, s, job.schedule.clone()),
                None => self.remove(&name),
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

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        match Utc.with_ymd_and_hms(2026, 11, 25, h, m, s) {
            chrono::LocalResult::Single(t) => t,
            _ => panic!("bad time"),
        }
    }

    /// Jobs from `(name, schedule, executor)`.
    fn jobs(specs: &[(&str, &str, &str)]) -> BTreeMap<String, JobEntry> {
        let mut yaml = String::new();
        for (name, schedule, executor) in specs {
            yaml.push_str(&format!(
                "{name}:\n  schedule: '{schedule}'\n  executor: {executor}\n  targets: a\n  \
                 command: 'true'\n"
            ));
        }
        crate::config::check_yaml(&yaml, t(0, 0, 0)).jobs
    }

    fn valid(jobs: &BTreeMap<String, JobEntry>) -> impl Iterator<Item = &Job> {
        jobs.values().filter_map(JobEntry::job)
    }

    #[test]
    fn due_slots_come_in_order_and_move_the_plan() {
        let jobs = jobs(&[
            ("every10", "*/10 * * * * *", "local"),
            ("hourly", "0 * * * *", "local"),
        ]);
        let mut s = Scheduler::default();
        s.plan(valid(&jobs), t(10, 0, 5));
        assert_eq!(s.next_of("every10"), Some(t(10, 0, 10)));
        assert_eq!(s.earliest(&jobs, &Leads::none()), Some(t(10, 0, 10)));
        assert!(
            s.take_due(t(10, 0, 9), &jobs, 100, &Leads::none())
                .is_empty()
        );
        let due = s.take_due(t(10, 0, 31), &jobs, 100, &Leads::none());
        let slots: Vec<_> = due.iter().map(|d| d.slot).collect();
        assert_eq!(slots, [t(10, 0, 10), t(10, 0, 20), t(10, 0, 30)]);
        assert!(
            due.iter()
                .all(|d| !d.missed && !d.early && d.job == "every10")
        );
        assert_eq!(s.next_of("every10"), Some(t(10, 0, 40)));
        assert_eq!(s.next_of("hourly"), Some(t(11, 0, 0)));
        // Late beyond the grace: missed, and at most `cap` of them.
        let due = s.take_due(t(10, 5, 0), &jobs, 3, &Leads::none());
        let slots: Vec<_> = due.iter().map(|d| (d.slot, d.missed)).collect();
        assert_eq!(
            slots,
            [
                (t(10, 4, 40), false),
                (t(10, 4, 50), false),
                (t(10, 5, 0), false)
            ]
        );
        let due = s.take_due(t(10, 8, 0), &jobs, 100, &Leads::none());
        assert!(
            due.first()
                .is_some_and(|d| d.missed && d.slot == t(10, 5, 10))
        );
        assert!(
            due.last()
                .is_some_and(|d| !d.missed && d.slot == t(10, 8, 0))
        );
    }

    #[test]
    fn salt_jobs_are_taken_ahead_by_their_lead() {
        let jobs = jobs(&[
            ("salty", "0 * * * *", "salt"),
            ("local", "0 * * * *", "local"),
        ]);
        let leads = Leads {
            salt: Duration::seconds(5),
            ..Leads::default()
        };
        let mut s = Scheduler::default();
        s.plan(valid(&jobs), t(10, 30, 0));
        assert_eq!(s.earliest(&jobs, &leads), Some(t(10, 59, 55)));
        let due = s.take_due(t(10, 59, 56), &jobs, 100, &leads);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].job.as_str(), due[0].early), ("salty", true));
        assert_eq!(s.earliest(&jobs, &leads), Some(t(11, 0, 0)));
        let due = s.take_due(t(11, 0, 0), &jobs, 100, &leads);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].job.as_str(), due[0].early), ("local", false));
        // A lead longer than the job's period stages one slot ahead, not several.
        let jobs = super::tests::jobs(&[("often", "*/15 * * * * *", "salt")]);
        let leads = Leads {
            salt: Duration::seconds(60),
            ..Leads::default()
        };
        let mut s = Scheduler::default();
        s.plan(valid(&jobs), t(10, 0, 1));
        assert_eq!(s.earliest(&jobs, &leads), Some(t(10, 0, 0)));
        let due = s.take_due(t(10, 0, 1), &jobs, 100, &leads);
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(due[0].slot, t(10, 0, 15));
    }

    #[test]
    fn a_reload_keeps_pending_slots_of_unchanged_jobs_only() {
        let before = jobs(&[
            ("a", "*/10 * * * * *", "local"),
            ("b", "0 * * * *", "local"),
        ]);
        let mut s = Scheduler::default();
        s.plan(valid(&before), t(10, 0, 5));
        // At the firing instant itself: the pending slot of `a` is kept, not skipped.
        let after = jobs(&[
            ("a", "*/10 * * * * *", "local"),
            ("b", "30 * * * *", "local"),
        ]);
        s.plan(valid(&after), t(10, 0, 10));
        assert_eq!(s.next_of("a"), Some(t(10, 0, 10)));
        assert_eq!(s.next_of("b"), Some(t(10, 30, 0)));
        // A removed job leaves the plan and the queue.
        let fewer = jobs(&[("b", "30 * * * *", "local")]);
        s.plan(valid(&fewer), t(10, 0, 10));
        assert_eq!(s.next_of("a"), None);
        assert_eq!(s.earliest(&fewer, &Leads::none()), Some(t(10, 30, 0)));
        assert!(
            s.take_due(t(10, 0, 30), &fewer, 100, &Leads::none())
                .is_empty()
        );
    }

    #[test]
    fn a_job_outside_its_range_is_planned_inside_it_or_not_at_all() {
        let yaml = "soon:\n  schedule: '0 * * * *'\n  active_from: '2026-11-25 12:30'\n  \
                    targets: a\n  command: 'true'\n\
                    ended:\n  schedule: '0 * * * *'\n  active_until: 2026-11-24\n  \
                    targets: a\n  command: 'true'\n";
        let jobs = crate::config::check_yaml(yaml, t(0, 0, 0)).jobs;
        let mut s = Scheduler::default();
        s.plan(valid(&jobs), t(10, 0, 5));
        assert_eq!(s.next_of("soon"), Some(t(13, 0, 0)));
        assert_eq!(s.next_of("ended"), None);
        // Nothing comes due before the range opens, and nothing is missed.
        assert!(
            s.take_due(t(12, 59, 0), &jobs, 100, &Leads::none())
                .is_empty()
        );
        let due = s.take_due(t(13, 0, 0), &jobs, 100, &Leads::none());
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].job.as_str(), due[0].missed), ("soon", false));
    }
}
