//! Missed slots: which slots a job missed, and what becomes of them. Pure (every function
//! takes `now`) except `fire_due`, which applies the rule to the loop's due slots.
//!
//! A slot is missed when the daemon was not running at it (found at start-up: the slots
//! between a job's newest recorded slot and its next planned one), or when the loop reached
//! it more than the grace late (a suspended machine, a clock jump). By the job's `missed`:
//! - `skip` (default): each missed slot is recorded as a run in state `skipped`, reason
//!   `missed: ...`;
//! - `latest`: the newest missed slot runs (trigger `catchup`) if it is younger than
//!   `missed_deadline`; the others are recorded as skipped.
//!
//! A long downtime of a frequent job would mean thousands of records, so only the newest
//! `missed_record_limit` slots are recorded and the newest record's reason says how many
//! older ones were left out. Walking a schedule slot by slot is bounded too (`WALK_BUDGET`),
//! so start-up stays quick whatever the downtime.

use std::collections::{BTreeMap, HashMap, VecDeque};

use chrono::{DateTime, Duration, Utc};

use crate::config::{Job, JobEntry, Missed};
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::firing;
use crate::schedule::Schedule;
use crate::wire::records::Trigger;

/// Most `next_after` steps spent on one job's missed slots.
const WALK_BUDGET: usize = 20_000;

/// Older missed slots that are not recorded one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeftOut {
    None,
    /// Exactly this many.
    Count(u64),
    /// Too many to count cheaply.
    Many,
}

/// The missed slots of one job, oldest first, at most the limit of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissedSlots {
    pub slots: Vec<DateTime<Utc>>,
    pub left_out: LeftOut,
    /// The slot after which the walk started (the newest recorded one).
    pub since: DateTime<Utc>,
}

impl MissedSlots {
    /// How many slots were missed: those kept, and those left out when they were counted
    /// (`LeftOut::Many`: at least the kept ones).
    pub(crate) fn count(&self) -> u64 {
        let left = match self.left_out {
            LeftOut::Count(n) => n,
            LeftOut::None | LeftOut::Many => 0,
        };
        self.slots.len() as u64 + left
    }
}

/// What to do with one missed slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Record a run in state `skipped` with this reason.
    Skip { slot: DateTime<Utc>, reason: String },
    /// Run it now, trigger `catchup`.
    Run { slot: DateTime<Utc> },
}

/// The newest `limit` slots of `schedule` strictly between `after` and `before`.
pub(crate) fn missed_slots(
    schedule: &Schedule,
    after: DateTime<Utc>,
    before: DateTime<Utc>,
    limit: usize,
) -> MissedSlots {
    let limit = limit.max(1);
    let (kept, total, complete) = walk(schedule, after, before, limit, WALK_BUDGET);
    if complete {
        let left = total - kept.len() as u64;
        return MissedSlots {
            slots: kept.into(),
            left_out: if left == 0 {
                LeftOut::None
            } else {
                LeftOut::Count(left)
            },
            since: after,
        };
    }
    // Too many to walk from `after`: find a window ending at `before` that holds at least
    // `limit` slots by doubling it, and keep the newest of those.
    let mut window = Duration::minutes(1);
    loop {
        let start = (before - window).max(after);
        let (kept, total, complete) = walk(schedule, start, before, limit, WALK_BUDGET);
        if total >= limit as u64 || start == after || !complete {
            return MissedSlots {
                slots: kept.into(),
                left_out: LeftOut::Many,
                since: after,
            };
        }
        window = window * 2;
    }
}

/// Walk slots in `(after, before)`: the newest `limit`, how many were seen, and whether the
/// walk reached `before` within `budget` steps.
fn walk(
    schedule: &Schedule,
    after: DateTime<Utc>,
    before: DateTime<Utc>,
    limit: usize,
    budget: usize,
) -> (VecDeque<DateTime<Utc>>, u64, bool) {
    let mut kept = VecDeque::with_capacity(limit.min(1024));
    let mut total = 0u64;
    let mut cursor = after;
    for _ in 0..budget {
        match schedule.next_after(cursor) {
            Some(slot) if slot < before => {
                total += 1;
                if kept.len() == limit {
                    kept.pop_front();
                }
                kept.push_back(slot);
                cursor = slot;
            }
            _ => return (kept, total, true),
        }
    }
    (kept, total, false)
}

/// What becomes of each missed slot of `job`, oldest first. `why` says why they were
/// missed (e.g. "the daemon was not running at this slot").
pub(crate) fn decide(
    job: &Job,
    missed: &MissedSlots,
    now: DateTime<Utc>,
    why: &str,
) -> Vec<Action> {
    let base = format!("missed: {why}");
    let mut actions: Vec<Action> = missed
        .slots
        .iter()
        .map(|slot| Action::Skip {
            slot: *slot,
            reason: base.clone(),
        })
        .collect();
    if job.missed == Missed::Latest
        && let Some(newest) = missed.slots.last().copied()
        && let Some(last) = actions.last_mut()
    {
        if now - newest < deadline(job) {
            *last = Action::Run { slot: newest };
        } else if let Action::Skip { reason, .. } = last {
            reason.push_str(&format!(
                "; older than missed_deadline ({} s), so not caught up",
                job.missed_deadline_s
            ));
        }
    }
    let note = match missed.left_out {
        LeftOut::None => None,
        LeftOut::Count(n) => Some(format!(
            "; {n} older missed slot(s) since {} are not recorded one by one",
            missed
                .since
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )),
        LeftOut::Many => Some(format!(
            "; more older missed slots since {} are not recorded one by one",
            missed
                .since
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )),
    };
    if let Some(note) = note {
        // On the newest record that is a skip.
        match actions.iter_mut().rev().find_map(|a| match a {
            Action::Skip { reason, .. } => Some(reason),
            Action::Run { .. } => None,
        }) {
            Some(reason) => reason.push_str(&note),
            None => log::info!("{}{note}", job.name),
        }
    }
    actions
}

/// How long after its slot a missed slot of `job` may still run (`missed: latest`).
fn deadline(job: &Job) -> Duration {
    Duration::seconds(i64::try_from(job.missed_deadline_s).unwrap_or(i64::MAX))
}

/// Among slots the loop reached too late (`Due::missed`), the ones to run as catch-ups: per
/// `missed: latest` job the newest, if younger than its deadline and no slot of the job in
/// the same batch runs anyway.
pub(crate) fn live_catch_ups(
    due: &[Due],
    jobs: &BTreeMap<String, JobEntry>,
    now: DateTime<Utc>,
) -> HashMap<String, DateTime<Utc>> {
    let mut newest: HashMap<String, DateTime<Utc>> = HashMap::new();
    for d in due.iter().filter(|d| d.missed) {
        let Some(job) = jobs.get(&d.job).and_then(JobEntry::job) else {
            continue;
        };
        if job.missed == Missed::Latest && now - d.slot < deadline(job) {
            let slot = newest.entry(d.job.clone()).or_insert(d.slot);
            *slot = (*slot).max(d.slot);
        }
    }
    for d in due.iter().filter(|d| !d.missed) {
        newest.remove(&d.job);
    }
    newest
}

/// Act on the loop's due slots: each runs or is recorded as skipped (`firing::fire`),
/// except the catch-ups of `missed: latest` jobs, which run with trigger `catchup`.
pub(crate) fn fire_due(core: &mut Main, due: Vec<Due>, now: DateTime<Utc>) {
    let catch_ups = live_catch_ups(&due, &core.config.jobs, now);
    for d in due {
        core.views
            .metrics_mut()
            .slots_missed(&d.job, u64::from(d.missed));
        if catch_ups.get(&d.job) == Some(&d.slot) {
            let late = Due { missed: false, ..d };
            firing::fire(core, &late, now, Trigger::Catchup, None);
        } else {
            firing::fire(core, &d, now, Trigger::Schedule, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use chrono_tz::Tz;

    use super::*;

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        match Utc.with_ymd_and_hms(2026, 11, 25, h, m, s) {
            chrono::LocalResult::Single(t) => t,
            _ => panic!("bad time"),
        }
    }

    fn schedule(expr: &str) -> Schedule {
        match Schedule::from_expr(expr, Tz::UTC) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    fn job(expr: &str, missed: Missed, deadline_s: u64) -> Job {
        let yaml = format!(
            "j:\n  schedule: '{expr}'\n  command: 'true'\n  targets: a\n  missed: {}\n  \
             missed_deadline: {deadline_s}\n",
            missed.as_str()
        );
        let loaded = crate::config::check_yaml(&yaml, t(0, 0, 0));
        match loaded.valid_jobs().next() {
            Some(j) => j.clone(),
            None => panic!("no job: {:?}", loaded.diagnostics),
        }
    }

    #[test]
    fn the_slots_between_the_last_recorded_and_the_next_planned() {
        let s = schedule("0 * * * *");
        let m = missed_slots(&s, t(1, 0, 0), t(5, 0, 0), 100);
        assert_eq!(m.slots, [t(2, 0, 0), t(3, 0, 0), t(4, 0, 0)]);
        assert_eq!(m.left_out, LeftOut::None);
        assert!(
            missed_slots(&s, t(4, 0, 0), t(5, 0, 0), 100)
                .slots
                .is_empty()
        );
        // Only the newest `limit`, with the count of the others.
        let m = missed_slots(&s, t(1, 0, 0), t(5, 0, 0), 2);
        assert_eq!(m.slots, [t(3, 0, 0), t(4, 0, 0)]);
        assert_eq!(m.left_out, LeftOut::Count(1));
        assert_eq!(m.count(), 3, "the kept slots and those left out");
    }

    #[test]
    fn a_long_downtime_of_a_frequent_job_is_cheap_and_keeps_the_newest() {
        let s = schedule("* * * * * *");
        let before = t(23, 0, 0);
        let start = std::time::Instant::now();
        let m = missed_slots(&s, t(0, 0, 0) - Duration::days(300), before, 100);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(m.slots.len(), 100);
        assert_eq!(m.slots.last(), Some(&(before - Duration::seconds(1))));
        assert_eq!(m.slots[0], before - Duration::seconds(100));
        assert_eq!(m.left_out, LeftOut::Many);
    }

    #[test]
    fn skip_records_every_slot_and_says_what_was_left_out() {
        let j = job("0 * * * *", Missed::Skip, 3600);
        let m = missed_slots(&j.schedule, t(1, 0, 0), t(5, 0, 0), 2);
        let actions = decide(
            &j,
            &m,
            t(5, 0, 0),
            "the daemon was not running at this slot",
        );
        assert_eq!(actions.len(), 2);
        match &actions[..] {
            [
                Action::Skip {
                    slot: a,
                    reason: ra,
                },
                Action::Skip {
                    slot: b,
                    reason: rb,
                },
            ] => {
                assert_eq!((*a, *b), (t(3, 0, 0), t(4, 0, 0)));
                assert_eq!(ra, "missed: the daemon was not running at this slot");
                assert!(rb.starts_with(ra.as_str()), "{rb}");
                assert!(
                    rb.contains("1 older missed slot(s) since 2026-11-25T01:00:00Z"),
                    "{rb}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn latest_runs_the_newest_if_young_enough() {
        let j = job("*/10 * * * *", Missed::Latest, 600);
        let m = missed_slots(&j.schedule, t(1, 0, 0), t(1, 35, 0), 100);
        let actions = decide(&j, &m, t(1, 35, 0), "down");
        assert_eq!(
            actions,
            [
                Action::Skip {
                    slot: t(1, 10, 0),
                    reason: "missed: down".into()
                },
                Action::Skip {
                    slot: t(1, 20, 0),
                    reason: "missed: down".into()
                },
                Action::Run { slot: t(1, 30, 0) },
            ]
        );
        // Past the deadline: nothing runs, and the reason says why.
        let actions = decide(&j, &m, t(1, 41, 0), "down");
        assert!(actions.iter().all(|a| matches!(a, Action::Skip { .. })));
        match actions.last() {
            Some(Action::Skip { reason, .. }) => {
                assert!(
                    reason.contains("older than missed_deadline (600 s)"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn late_slots_of_a_latest_job_catch_up_once() {
        let j = job("* * * * *", Missed::Latest, 600);
        let mut jobs = BTreeMap::new();
        jobs.insert("j".to_string(), JobEntry::Valid(std::sync::Arc::new(j)));
        let due = |slot, missed| Due {
            job: "j".into(),
            slot,
            missed,
            early: false,
        };
        let now = t(2, 0, 0);
        let late = [due(t(1, 50, 0), true), due(t(1, 51, 0), true)];
        let got = live_catch_ups(&late, &jobs, now);
        assert_eq!(got.get("j"), Some(&t(1, 51, 0)));
        // A slot of the same job that runs anyway makes the catch-up pointless.
        let mixed = [due(t(1, 58, 0), true), due(t(1, 59, 30), false)];
        assert!(live_catch_ups(&mixed, &jobs, now).is_empty());
        // Past the deadline nothing catches up.
        assert!(live_catch_ups(&late, &jobs, t(3, 0, 0)).is_empty());
    }

    #[test]
    fn slots_outside_the_active_range_are_never_missed() {
        let s = schedule("0 * * * *").with_range(crate::schedule::ActiveRange {
            from: Some(t(2, 30, 0)),
            until: Some(t(3, 0, 0)),
            ..Default::default()
        });
        // Down from 01:00 to 06:00: only the 03:00 slot was inside the range.
        let m = missed_slots(&s, t(1, 0, 0), t(6, 0, 0), 100);
        assert_eq!(m.slots, [t(3, 0, 0)]);
        assert_eq!(m.left_out, LeftOut::None);
        // Down only after the range ended: nothing missed.
        assert!(
            missed_slots(&s, t(4, 0, 0), t(6, 0, 0), 100)
                .slots
                .is_empty()
        );
    }
}
