//! Coalesced salt launches (docs/salt.md, "One publish per round"): the salt runs whose
//! launches fall in the same round go out as one publish per distinct set of runs a
//! minion needs, instead of one per run.
//!
//! A pre-staged salt run joins the round of its slot when it starts (`join`) and leaves
//! it when its launch is queued or the run ends before (`leave`). Queued launches
//! (`queue`) wait until no run of any round is still on its way (resolving, recording,
//! waiting for its deployment) or [`ROUND_WAIT`] has passed since the first of them;
//! `flush` (the loop's pump) then groups them by (URL, wrapper path) and, within that, by
//! the set of runs each minion needs, and sends one `Launch` per group. A manual run's
//! launch goes at once. `poll` hands each run its part of the answer.

use crate::roles::main::state::run::{Answer, Arrivals, Queued, Rounds};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::roles::main::state::Main;
use crate::wire::link::{
    BlockingRequest, ExecutorKind, LaunchTarget, MinionOutcome, SaltSettings, blocking_calls,
};
use crate::wire::records::{Millis, RunId};
use crate::workflow::WakeKey;

/// Longest a queued launch waits for the other runs of its round.
pub(crate) const ROUND_WAIT: Duration = Duration::from_secs(2);

/// A publish whose wrappers have not all called back by then counts with those that did.
const ARRIVALS_FOR: Duration = Duration::from_secs(300);

impl Rounds {
    pub(crate) fn join(&mut self, slot: Millis) {
        *self.staging.entry(slot).or_insert(0) += 1;
    }

    pub(crate) fn leave(&mut self, slot: Millis) {
        if let Some(n) = self.staging.get_mut(&slot) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.staging.remove(&slot);
            }
        }
    }

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
    fn await_arrivals(&mut self, id: CallId, runs: &[RunId], minions: &[String], sent: Instant) {
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
        let old: Vec<CallId> = self
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

/// The loop's pump, after the Workflows ran: send the rounds that are complete.
pub(crate) fn flush(core: &mut Main, now: Instant) {
    if !core.rounds.due(now, core.flight.stopping) {
        return;
    }
    for g in core.rounds.take_groups() {
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
        // launch: their wrappers' calls are the news, and one that does not call back is
        // judged at the pick-up deadline (which forgets its build: `pickup`). Returns are
        // awaited only where the launch may be the first to find the wrapper missing.
        let await_returns = g
            .minions
            .iter()
            .any(|m| core.fleet.build_of(m, &g.wrapper_path).is_none());
        let minions = g.minions.clone();
        let targets = g
            .minions
            .into_iter()
            .map(|machine| LaunchTarget {
                machine,
                token: None,
            })
            .collect();
        let id = core.blocking_call(BlockingRequest::Launch {
            executor: ExecutorKind::Salt,
            wrapper_path: g.wrapper_path,
            runs: g.runs.clone(),
            url: g.url,
            targets,
            salt: Some(g.settings),
            await_returns,
        });
        core.rounds.publishes += 1;
        core.rounds.await_arrivals(id, &g.runs, &minions, now);
        core.rounds.out.insert(id, (g.runs, now));
    }
    for late in core.rounds.overdue_arrivals(now) {
        core.launcher.record_launch_latency(late);
    }
}

/// The loop's pump, before the Workflows run: hand each run its part of the launches
/// that answered, and wake it.
pub(crate) fn poll(core: &mut Main) {
    let out: Vec<CallId> = core.rounds.out.keys().copied().collect();
    for id in out {
        let Some(reply) = core.take_blocking_reply::<blocking_calls::Launch>(id) else {
            continue;
        };
        if reply.is_err() && core.flight.stopping {
            // Blocking went first in an ordered stop: the launch is handed over to the
            // next start (recovery), not failed.
            core.rounds.out.remove(&id);
            continue;
        }
        let Some((runs, sent)) = core.rounds.out.remove(&id) else {
            continue;
        };
        let took = sent.elapsed();
        core.views.metrics_mut().observe_launch(took);
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
        for run in runs {
            let outcomes = match &failed {
                Some(why) => Err(why.clone()),
                None => Ok(per_run.remove(&run).unwrap_or_default()),
            };
            core.rounds.answers.insert(run, Answer { outcomes });
            core.wake(WakeKey::event(Main::run_event(run)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SaltSettings {
        SaltSettings {
            salt_bin: "salt".into(),
            config_dir: None,
            timeout_s: 20,
            concurrency: 4,
            bridge: true,
        }
    }

    fn q(run: RunId, minions: &[&str]) -> Queued {
        Queued {
            run,
            url: "wss://s/wrapper/v1".into(),
            wrapper_path: "/w".into(),
            minions: minions.iter().map(|m| m.to_string()).collect(),
            settings: settings(),
            urgent: false,
        }
    }

    #[test]
    fn runs_on_the_same_minions_are_one_publish() {
        let all = ["m1", "m2", "m3"];
        let groups = group((1..=20).map(|r| q(r, &all)).collect());
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].runs, (1..=20).collect::<Vec<_>>());
        assert_eq!(groups[0].minions, ["m1", "m2", "m3"]);
    }

    #[test]
    fn one_publish_per_distinct_set_of_runs() {
        let groups = group(vec![
            q(1, &["a", "b"]),
            q(2, &["b", "c"]),
            q(3, &["a", "b"]),
        ]);
        let shape: Vec<(Vec<RunId>, Vec<String>)> =
            groups.into_iter().map(|g| (g.runs, g.minions)).collect();
        assert_eq!(
            shape,
            vec![
                (vec![1, 2, 3], vec!["b".to_string()]),
                (vec![1, 3], vec!["a".to_string()]),
                (vec![2], vec!["c".to_string()]),
            ]
        );
    }

    #[test]
    fn other_urls_paths_or_settings_publish_apart() {
        let mut other_url = q(2, &["a"]);
        other_url.url = "wss://t/wrapper/v1".into();
        let mut other_path = q(3, &["a"]);
        other_path.wrapper_path = "/v".into();
        let mut other_salt = q(4, &["a"]);
        other_salt.settings.timeout_s = 5;
        let groups = group(vec![q(1, &["a"]), other_url, other_path, other_salt]);
        assert_eq!(groups.len(), 4);
    }

    #[test]
    fn a_round_goes_when_complete_urgent_or_overdue() {
        let t0 = Instant::now();
        let mut r = Rounds::default();
        assert!(!r.due(t0, false), "nothing queued");
        r.join(100);
        r.join(100);
        r.leave(100);
        r.queue(q(1, &["a"]), t0);
        assert!(!r.due(t0, false), "a run of the round is still on its way");
        assert!(r.due(t0 + ROUND_WAIT, false), "waited long enough");
        assert!(!r.due(t0 + ROUND_WAIT, true), "an ordered stop holds it");
        r.leave(100);
        assert!(r.due(t0, false), "the round is complete");
        r.join(200);
        let mut manual = q(2, &["a"]);
        manual.urgent = true;
        r.queue(manual, t0);
        assert!(r.due(t0, false), "a manual run does not wait");
        assert_eq!(r.take_groups().len(), 1);
        assert!(r.deadline().is_none());
    }

    #[test]
    fn the_launch_latency_is_the_publish_to_its_last_wrapper() {
        let t0 = Instant::now();
        let mut r = Rounds::default();
        let id: CallId = 7;
        r.await_arrivals(id, &[1], &["a".into(), "b".into()], t0);
        let s = Duration::from_secs(1);
        assert_eq!(r.arrived(1, "a", t0 + s), None, "one of two");
        assert_eq!(
            r.arrived(1, "a", t0 + 2 * s),
            None,
            "a reconnect is not news"
        );
        assert_eq!(r.arrived(1, "b", t0 + 3 * s), Some(3 * s));
        assert!(r.arrivals.is_empty() && r.awaited.is_empty());
        // A minion that never calls back: the publish counts with the last that did.
        r.await_arrivals(id, &[2], &["a".into(), "dead".into()], t0);
        assert_eq!(r.arrived(2, "a", t0 + s), None);
        assert!(r.overdue_arrivals(t0 + s).is_empty(), "not overdue yet");
        assert_eq!(r.overdue_arrivals(t0 + ARRIVALS_FOR), vec![s]);
        assert!(r.arrivals.is_empty() && r.awaited.is_empty());
    }
}
