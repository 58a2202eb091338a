//! Coalesced salt launches (docs/salt.md, "One publish per round"): the salt runs whose
//! launches fall in the same round go out as one publish per distinct set of runs a
//! minion needs, instead of one per run.
//!
//! A pre-staged salt run joins the round of its slot when it starts (`join`) and leaves
//! it when its launch is queued or the run ends before (`leave`). Queued launches
//! (`queue`) wait until no run of any round is still on its way (resolving, recording,
//! waiting for its deployment) or [`ROUND_WAIT`] has passed since the first of them;
//! `flush` (at the end of the loop's turn) then groups them by (URL, wrapper path) and,
//! within that, by the set of runs each minion needs, and sends one `Launch` per group. A
//! manual run's launch goes at once. Its answer comes back as
//! `Message::LaunchAnswered`: `answered` hands each run its part of it.
//!
//! The part keeps its state private; its methods take the time and what they need of
//! the other parts, and return what is to be done (`Out`). The glue that reads `Main`
//! is in `shell/rounds.rs`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::ipc::rpc::Call;
use crate::roles::main::messages::{BlockingResult, Message, Out};
use crate::wire::link::{
    BlockingRequest, ExecutorKind, LaunchTarget, MinionOutcome, SaltSettings, blocking_calls,
};
use crate::wire::records::{Millis, RunId};

#[cfg(test)]
mod tests;

/// One run's launch, queued for its round.
pub(crate) struct Queued {
    pub run: RunId,
    pub url: String,
    pub wrapper_path: String,
    pub minions: Vec<String>,
    pub settings: SaltSettings,
    /// Not pre-staged (a manual run): its round goes at once.
    pub urgent: bool,
}

/// A run's part of a round's answer.
pub(crate) struct Answer {
    pub outcomes: Result<Vec<MinionOutcome>, String>,
}

/// A publish's id, to match the hellos of its wrappers (`arrived`).
type PublishId = u64;

/// Salt launches coalesced per round.
#[derive(Default)]
pub(crate) struct Rounds {
    /// Pre-staged salt runs per slot still on their way to their launch.
    staging: HashMap<Millis, usize>,
    queued: Vec<Queued>,
    first_queued: Option<Instant>,
    answers: HashMap<RunId, Answer>,
    /// Publishes sent, for the log and `/metrics`; the newest one's id.
    publishes: u64,
    /// Each (run, minion) launched, by its publish: what the launch latency is measured
    /// on (`arrived`).
    awaited: HashMap<(RunId, String), PublishId>,
    arrivals: HashMap<PublishId, Arrivals>,
}

/// The wrappers of one publish calling back.
struct Arrivals {
    sent: Instant,
    expected: usize,
    arrived: usize,
    latest: Option<Instant>,
}

/// A launch's answer handed to its runs (`Rounds::answered`).
#[derive(Debug, PartialEq)]
pub(crate) struct Answered {
    /// From the publish to its answer (`/metrics`).
    pub took: Duration,
    /// The runs whose part of the answer waits for them, to wake.
    pub runs: Vec<RunId>,
}

/// Longest a queued launch waits for the other runs of its round.
pub(crate) const ROUND_WAIT: Duration = Duration::from_secs(2);

/// A publish whose wrappers have not all called back by then counts with those that did.
const ARRIVALS_FOR: Duration = Duration::from_secs(300);

impl Rounds {
    /// Publishes sent so far.
    pub(crate) fn publishes(&self) -> u64 {
        self.publishes
    }

    /// A pre-staged salt run of `slot` started: its round waits for it.
    pub(crate) fn join(&mut self, slot: Millis) {
        *self.staging.entry(slot).or_insert(0) += 1;
    }

    /// A run of `slot` queued its launch or ended before.
    pub(crate) fn leave(&mut self, slot: Millis) {
        if let Some(n) = self.staging.get_mut(&slot) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.staging.remove(&slot);
            }
        }
    }

    /// A run's launch waits for its round from `now`.
    pub(crate) fn queue(&mut self, launch: Queued, now: Instant) {
        self.first_queued.get_or_insert(now);
        self.queued.push(launch);
    }

    /// When the queued launches go even if their round is not complete.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.first_queued.map(|t| t + ROUND_WAIT)
    }

    /// Publish `id` (sent at `sent`) started a wrapper for each of `runs` on each of
    /// `minions`: their hellos are awaited (`arrived`).
    fn await_arrivals(&mut self, id: PublishId, runs: &[RunId], minions: &[String], sent: Instant) {
        self.arrivals.insert(
            id,
            Arrivals {
                sent,
                expected: runs.len() * minions.len(),
                arrived: 0,
                latest: None,
            },
        );
        for run in runs {
            for m in minions {
                self.awaited.insert((*run, m.clone()), id);
            }
        }
    }

    /// The wrapper of (`run`, `machine`) said hello: when the last of its publish's
    /// wrappers arrives, the launch latency (publish to last wrapper) to fold into the
    /// pre-staging lead. A launch without returns answers at once, so its answer says
    /// nothing of how long the wrappers take to start.
    pub(crate) fn arrived(&mut self, run: RunId, machine: &str, now: Instant) -> Option<Duration> {
        let id = self.awaited.remove(&(run, machine.to_string()))?;
        let a = self.arrivals.get_mut(&id)?;
        a.arrived += 1;
        a.latest = Some(now);
        if a.arrived < a.expected {
            return None;
        }
        let a = self.arrivals.remove(&id)?;
        Some(now.saturating_duration_since(a.sent))
    }

    /// Publishes older than [`ARRIVALS_FOR`] whose wrappers did not all call back: the
    /// latency to the last that did (a minion down must not hold the estimate).
    fn overdue_arrivals(&mut self, now: Instant) -> Vec<Duration> {
        let old: Vec<PublishId> = self
            .arrivals
            .iter()
            .filter(|(_, a)| now.saturating_duration_since(a.sent) >= ARRIVALS_FOR)
            .map(|(id, _)| *id)
            .collect();
        if old.is_empty() {
            return Vec::new();
        }
        self.awaited.retain(|_, id| !old.contains(id));
        old.iter()
            .filter_map(|id| self.arrivals.remove(id))
            .filter_map(|a| a.latest.map(|t| t.saturating_duration_since(a.sent)))
            .collect()
    }

    /// The answer for `run`, once its round's launch answered.
    pub(crate) fn take_answer(&mut self, run: RunId) -> Option<Answer> {
        self.answers.remove(&run)
    }

    fn due(&self, now: Instant, stopping: bool) -> bool {
        // An ordered stop holds what has not gone out: the runs stay as recorded and the
        // next start recovers and launches them.
        !self.queued.is_empty()
            && !stopping
            && (self.staging.is_empty()
                || self.queued.iter().any(|q| q.urgent)
                || self.deadline().is_some_and(|d| d <= now))
    }

    /// Take the queued launches grouped into publishes: per (URL, wrapper path, salt
    /// settings), one group per distinct set of runs a minion needs.
    fn take_groups(&mut self) -> Vec<Group> {
        self.first_queued = None;
        group(std::mem::take(&mut self.queued))
    }
}

/// One publish: these runs on these minions.
#[derive(Debug, PartialEq)]
pub(crate) struct Group {
    pub url: String,
    pub wrapper_path: String,
    pub settings: SaltSettings,
    pub runs: Vec<RunId>,
    pub minions: Vec<String>,
}

/// Pure: the publishes for a set of queued launches.
pub(crate) fn group(queued: Vec<Queued>) -> Vec<Group> {
    type Head = (String, String, SaltSettings);
    let mut by_head: BTreeMap<Head, BTreeMap<String, Vec<RunId>>> = BTreeMap::new();
    for q in queued {
        let minions = by_head
            .entry((q.url, q.wrapper_path, q.settings))
            .or_default();
        for m in q.minions {
            let runs = minions.entry(m).or_default();
            if !runs.contains(&q.run) {
                runs.push(q.run);
            }
        }
    }
    let mut groups = Vec::new();
    for ((url, wrapper_path, settings), minions) in by_head {
        let mut by_runs: BTreeMap<Vec<RunId>, Vec<String>> = BTreeMap::new();
        for (minion, mut runs) in minions {
            runs.sort_unstable();
            by_runs.entry(runs).or_default().push(minion);
        }
        for (runs, minions) in by_runs {
            groups.push(Group {
                url: url.clone(),
                wrapper_path: wrapper_path.clone(),
                settings: settings.clone(),
                runs,
                minions,
            });
        }
    }
    groups
}

impl Rounds {
    /// At the end of the loop's turn (every launch the turn's steps queued is in): send
    /// the rounds that are complete, as of `now`. `returns_needed(minion, path)`: the
    /// fleet has not seen the wrapper at `path` on `minion`. Also the launch latencies of
    /// the publishes whose wrappers did not all call back in time, to fold into the
    /// pre-staging lead.
    pub(crate) fn flush(
        &mut self,
        now: Instant,
        stopping: bool,
        returns_needed: impl Fn(&str, &str) -> bool,
    ) -> (Out, Vec<Duration>) {
        let mut out = Out::new();
        if !self.due(now, stopping) {
            return (out, Vec::new());
        }
        for g in self.take_groups() {
            log::info!(
                "launching run(s) {} on {} minion(s) in one publish",
                g.runs
                    .iter()
                    .map(RunId::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                g.minions.len()
            );
            // Minions whose wrapper at this path the fleet has seen need no return of the
            // launch: their wrappers' calls are the news, and one that does not call back
            // is judged at the pick-up deadline (which forgets its build: `pickup`).
            // Returns are awaited only where the launch may be the first to find the
            // wrapper missing.
            let await_returns = g.minions.iter().any(|m| returns_needed(m, &g.wrapper_path));
            let minions = g.minions.clone();
            let targets = g
                .minions
                .into_iter()
                .map(|machine| LaunchTarget {
                    machine,
                    token: None,
                })
                .collect();
            let runs = g.runs.clone();
            out.blocking(
                BlockingRequest::Launch {
                    executor: ExecutorKind::Salt,
                    wrapper_path: g.wrapper_path,
                    runs: g.runs.clone(),
                    url: g.url,
                    targets,
                    salt: Some(g.settings),
                    await_returns,
                },
                move |result| Message::LaunchAnswered {
                    runs,
                    sent: now,
                    result,
                },
            );
            self.publishes += 1;
            self.await_arrivals(self.publishes, &g.runs, &minions, now);
        }
        let late = self.overdue_arrivals(now);
        (out, late)
    }

    /// The launch of `runs` sent at `sent` answered at `now`: each run's part of the
    /// answer, kept for it (`take_answer`); the runs to wake. None in an ordered stop
    /// whose blocking went first: the launch is handed over to the next start
    /// (recovery), not failed.
    pub(crate) fn answered(
        &mut self,
        runs: Vec<RunId>,
        sent: Instant,
        result: BlockingResult,
        stopping: bool,
        now: Instant,
    ) -> Option<Answered> {
        let reply = blocking_calls::Launch::take(result);
        if reply.is_err() && stopping {
            return None;
        }
        let took = now.saturating_duration_since(sent);
        let mut per_run: HashMap<RunId, Vec<MinionOutcome>> = HashMap::new();
        let failed = match reply {
            Ok(outcomes) => {
                for (run, o) in outcomes {
                    per_run.entry(run).or_default().push(o);
                }
                None
            }
            Err(e) => Some(e.to_string()),
        };
        for run in &runs {
            let outcomes = match &failed {
                Some(why) => Err(why.clone()),
                None => Ok(per_run.remove(run).unwrap_or_default()),
            };
            self.answers.insert(*run, Answer { outcomes });
        }
        Some(Answered { took, runs })
    }
}
