//! The policy of the throttling queues (pure): who gets a place when one frees up, and
//! when a job's queue is full.
//!
//! 1. **Round-robin between jobs.** The runs waiting for a place under
//!    `max_runs_in_flight` (and the targets waiting for a place on a machine under
//!    `max_running_per_machine`) are served job by job: a free place goes to the job with
//!    the fewest places taken, ties to the job whose oldest waiting entry is the oldest;
//!    within a job, in slot order ([`QueueKey`]). So a job that fires every second with
//!    long runs takes its share of the places, not all of them: another job's run starts
//!    at the next place that frees up, whatever the first job has queued before it.
//! 2. **A bounded queue per job.** A job with [`queue_full`] runs already waiting does not
//!    queue another: its slot is recorded as skipped with the reason (the shell's
//!    `fire_as`), a run asked for now is refused with it.
//!
//! Everything here takes counts and keys and answers a decision; the scans over the runs
//! in flight are `shell/throttle.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

pub(crate) use crate::roles::main::run::active::QueueKey;

/// An entry waiting in a queue: its job and its place in the job's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Queued<'a> {
    pub job: &'a str,
    pub key: QueueKey,
}

/// How many entries are served before `me` (which is among `waiting`), when `taken`
/// holds the places each job has now: round-robin between jobs by places taken, then by
/// their oldest waiting entry; each job's entries in key order.
pub(crate) fn ahead_of(
    taken: &HashMap<&str, usize>,
    waiting: &[Queued<'_>],
    me: Queued<'_>,
) -> usize {
    let mut lines: BTreeMap<&str, Vec<QueueKey>> = BTreeMap::new();
    for q in waiting.iter().chain(std::iter::once(&me)) {
        lines.entry(q.job).or_default().push(q.key);
    }
    for line in lines.values_mut() {
        line.sort_unstable();
        line.dedup();
        // Served from the end.
        line.reverse();
    }
    // The next job served: fewest places taken, then the oldest head.
    let mut turn: BinaryHeap<Reverse<(usize, QueueKey, &str)>> = lines
        .iter()
        .filter_map(|(job, line)| {
            let head = *line.last()?;
            Some(Reverse((taken.get(job).copied().unwrap_or(0), head, *job)))
        })
        .collect();
    let mut served = 0;
    while let Some(Reverse((places, _, job))) = turn.pop() {
        let Some(line) = lines.get_mut(job) else {
            continue;
        };
        let Some(key) = line.pop() else {
            continue;
        };
        if job == me.job && key == me.key {
            return served;
        }
        served += 1;
        if let Some(head) = line.last() {
            turn.push(Reverse((places + 1, *head, job)));
        }
    }
    debug_assert!(false, "the entry asking is in its own job's line");
    served
}

/// `None` when a place among `max` is free for `me`, with `taken` places in all (`by_job`
/// of them per job) and `waiting` entries queued besides it; otherwise how many are
/// served before it.
pub(crate) fn no_place(
    max: u32,
    taken: usize,
    by_job: &HashMap<&str, usize>,
    waiting: &[Queued<'_>],
    me: Queued<'_>,
) -> Option<usize> {
    let free = (max as usize).saturating_sub(taken);
    if free == 0 {
        // Nothing frees up for anyone: the order only tells the reason.
        return Some(ahead_of(by_job, waiting, me));
    }
    let ahead = ahead_of(by_job, waiting, me);
    (ahead >= free).then_some(ahead)
}

/// Why `job` may not queue another run, with `waiting` of its runs waiting to start and
/// at most `bound` allowed; `None` when it may.
pub(crate) fn queue_full(job: &str, waiting: usize, bound: u32) -> Option<String> {
    (waiting >= bound as usize).then(|| {
        format!(
            "queue: {waiting} run(s) of {job} are already waiting to start \
             (max_queued_runs_per_job {bound})"
        )
    })
}

/// An entry of `job` for slot `slot`, run `id` (the tests' shorthand, here and in
/// `shell/throttle.rs`).
#[cfg(test)]
pub(crate) fn q(job: &str, slot: i64, id: u64) -> Queued<'_> {
    Queued {
        job,
        key: (slot, id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken<'a>(pairs: &[(&'a str, usize)]) -> HashMap<&'a str, usize> {
        pairs.iter().copied().collect()
    }

    /// The order in which `waiting` is served.
    fn order<'a>(by_job: &HashMap<&str, usize>, waiting: &[Queued<'a>]) -> Vec<Queued<'a>> {
        let mut all = waiting.to_vec();
        all.sort_by_key(|me| ahead_of(by_job, waiting, *me));
        all
    }

    #[test]
    fn another_job_is_served_before_the_backlog_of_a_busy_one() {
        // hog has 2 places and 5 runs waiting since slots 1..5; other waits since slot 9.
        let mut waiting: Vec<Queued> = (1..=5).map(|s| q("hog", s, s as u64)).collect();
        waiting.push(q("other", 9, 20));
        let by_job = taken(&[("hog", 2)]);
        assert_eq!(ahead_of(&by_job, &waiting, q("other", 9, 20)), 0);
        assert_eq!(ahead_of(&by_job, &waiting, q("hog", 1, 1)), 1);
        // One place frees up: other takes it, whatever hog queued before.
        assert_eq!(no_place(3, 2, &by_job, &waiting, q("other", 9, 20)), None);
        assert_eq!(no_place(3, 2, &by_job, &waiting, q("hog", 1, 1)), Some(1));
        // Before this policy (slot order across jobs) other had 5 ahead of it.
    }

    #[test]
    fn places_are_shared_round_robin_and_each_job_keeps_slot_order() {
        let waiting = [
            q("a", 1, 1),
            q("a", 2, 2),
            q("a", 3, 3),
            q("b", 5, 5),
            q("b", 4, 4),
            q("c", 6, 6),
        ];
        let served = order(&HashMap::new(), &waiting);
        assert_eq!(
            served,
            [
                q("a", 1, 1),
                q("b", 4, 4),
                q("c", 6, 6),
                q("a", 2, 2),
                q("b", 5, 5),
                q("a", 3, 3),
            ]
        );
        // A job with places taken waits for the others to catch up.
        let served = order(&taken(&[("a", 2)]), &waiting);
        assert_eq!(served[..3], [q("b", 4, 4), q("c", 6, 6), q("b", 5, 5)]);
        assert_eq!(served[3], q("a", 1, 1));
    }

    #[test]
    fn one_job_alone_is_served_in_slot_order_up_to_the_limit() {
        let waiting = [q("j", 20, 1), q("j", 5, 9)];
        let none = HashMap::new();
        assert_eq!(no_place(2, 1, &none, &waiting, q("j", 5, 9)), None);
        assert_eq!(no_place(2, 1, &none, &waiting, q("j", 20, 1)), Some(1));
        assert_eq!(no_place(3, 1, &none, &waiting, q("j", 20, 1)), None);
        // The same slot: the lower id first.
        let same = [q("j", 10, 4), q("j", 10, 2)];
        assert_eq!(no_place(1, 0, &none, &same, q("j", 10, 2)), None);
        assert_eq!(no_place(1, 0, &none, &same, q("j", 10, 4)), Some(1));
        // Nothing free: the reason counts those ahead.
        assert_eq!(no_place(1, 1, &none, &[], q("j", 1, 1)), Some(0));
    }

    #[test]
    fn a_full_queue_says_so() {
        assert_eq!(queue_full("hog", 2, 3), None);
        assert_eq!(
            queue_full("hog", 3, 3).as_deref(),
            Some("queue: 3 run(s) of hog are already waiting to start (max_queued_runs_per_job 3)")
        );
    }
}
