//! The registry: every running workflow, what each one waits on, and the queue of
//! workflows ready to run. The loop calls in with an event and its state; the registry
//! runs the affected workflows until each one waits again or ends.
//!
//! Every registered workflow is in exactly one of three states: waiting (indexed under
//! each of its sources), queued (in `ready`), or running (only inside `run_until_parked`).
//! Between public calls none is queued or running.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::steps::{Flow, Shared, Workflow};
use super::types::{
    Finished, MAX_ALREADY_FIRED_WAITS, MAX_FINISHED_KEPT, Outcome, StallReport, Step, Wake,
    WakeKey, WorkflowError, WorkflowId,
};

/// One source of a wait, after `Wake::Any` has been flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Key(WakeKey),
    At(Instant),
}

fn flatten(wake: &Wake, into: &mut Vec<Source>) {
    let source = match wake {
        Wake::Call(id) => Source::Key(WakeKey::Call(*id)),
        Wake::Event(event) => Source::Key(WakeKey::Event(*event)),
        Wake::At(at) => Source::At(*at),
        Wake::Any(all) => {
            for wake in all {
                flatten(wake, into);
            }
            return;
        }
    };
    if !into.contains(&source) {
        into.push(source);
    }
}

struct Waiting {
    wake: Wake,
    sources: Vec<Source>,
    since: Instant,
}

struct Entry<C> {
    flow: Box<dyn Flow<C>>,
    outcome: Outcome,
    wait: Option<Waiting>,
    queued: bool,
    /// Waits in a row on a deadline that had already passed.
    already_fired_waits: u32,
}

impl<C> Entry<C> {
    fn new(flow: Box<dyn Flow<C>>) -> Self {
        Entry {
            flow,
            outcome: Outcome::Done,
            wait: None,
            queued: false,
            already_fired_waits: 0,
        }
    }
}

/// All running workflows of one process, of any env type, over the caller's state `C`.
pub(crate) struct Registry<C> {
    next_id: u64,
    entries: BTreeMap<WorkflowId, Entry<C>>,
    by_key: HashMap<WakeKey, BTreeSet<WorkflowId>>,
    deadlines: BTreeSet<(Instant, WorkflowId)>,
    ready: VecDeque<WorkflowId>,
    finished: VecDeque<Finished>,
}

impl<C: 'static> Default for Registry<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: 'static> Registry<C> {
    pub(crate) fn new() -> Self {
        Registry {
            next_id: 0,
            entries: BTreeMap::new(),
            by_key: HashMap::new(),
            deadlines: BTreeSet::new(),
            ready: VecDeque::new(),
            finished: VecDeque::new(),
        }
    }

    /// Registers a workflow and runs it until it first waits or ends.
    pub(crate) fn start<E: 'static>(
        &mut self,
        workflow: Workflow<E, C>,
        ctx: &mut C,
        now: Instant,
    ) -> WorkflowId {
        self.next_id += 1;
        let id = WorkflowId(self.next_id);
        log::debug!("workflow {} {id}: started", workflow.name());
        self.entries.insert(id, Entry::new(Box::new(workflow)));
        self.enqueue(id);
        self.drive(ctx, now);
        id
    }

    /// Resumes every workflow waiting on `key`; returns how many.
    pub(crate) fn wake(&mut self, key: &WakeKey, ctx: &mut C, now: Instant) -> usize {
        let ids = self.by_key.remove(key).unwrap_or_default();
        for &id in &ids {
            self.unpark(id);
            self.enqueue(id);
        }
        self.drive(ctx, now);
        ids.len()
    }

    /// Resumes every workflow whose [`Wake::At`] deadline is not after `now`; returns
    /// how many.
    pub(crate) fn due_timers(&mut self, ctx: &mut C, now: Instant) -> usize {
        let mut count = 0;
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.unpark(id);
            self.enqueue(id);
            count += 1;
        }
        self.drive(ctx, now);
        count
    }

    /// The earliest [`Wake::At`] deadline, for the loop's poll timeout.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.entries.is_empty()
    }

    /// The step a running workflow is at (waiting in, between public calls).
    #[cfg(test)]
    pub(crate) fn current_step(&self, id: WorkflowId) -> Option<&str> {
        self.entries.get(&id)?.flow.current_step()
    }

    /// Workflows that look stuck: waiting on nothing, or waiting at least `threshold`
    /// with no live source. The registry cannot know which calls, timers and events the
    /// caller still expects, so `is_pending` tells it (`|_| true` checks only what the
    /// registry knows: empty waits and deadlines overdue by `threshold`).
    pub(crate) fn stalled(
        &self,
        now: Instant,
        threshold: Duration,
        is_pending: impl Fn(&WakeKey) -> bool,
    ) -> Vec<StallReport> {
        let mut reports = Vec::new();
        for (&id, entry) in &self.entries {
            let Some(wait) = &entry.wait else {
                debug_assert!(false, "between public calls every workflow waits");
                continue;
            };
            let live = wait.sources.iter().any(|source| match source {
                Source::Key(key) => is_pending(key),
                Source::At(at) => now.saturating_duration_since(*at) < threshold,
            });
            let waited = now.saturating_duration_since(wait.since);
            if wait.sources.is_empty() || (waited >= threshold && !live) {
                reports.push(StallReport {
                    id,
                    workflow: entry.flow.name().to_owned(),
                    step: entry.flow.current_step().unwrap_or("<none>").to_owned(),
                    waiting_on: wait.wake.clone(),
                    waiting_since: wait.since,
                });
            }
        }
        reports
    }

    /// For the shutdown wait: true once every workflow has ended, or once `now` reaches
    /// `deadline` (the grace period), in which case the workflows left are logged.
    pub(crate) fn shutdown_complete(&self, now: Instant, deadline: Instant) -> bool {
        if self.is_idle() {
            return true;
        }
        if now < deadline {
            return false;
        }
        for entry in self.entries.values() {
            log::warn!(
                "workflow {} still in step {} at the end of the shutdown grace period",
                entry.flow.name(),
                entry.flow.current_step().unwrap_or("<none>")
            );
        }
        true
    }

    /// Takes the ended workflows, oldest first.
    pub(crate) fn drain_finished(&mut self) -> Vec<Finished> {
        self.finished.drain(..).collect()
    }

    fn enqueue(&mut self, id: WorkflowId) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        debug_assert!(
            entry.wait.is_none() && !entry.queued,
            "only a workflow that is neither waiting nor queued can be queued"
        );
        entry.queued = true;
        self.ready.push_back(id);
    }

    /// Removes a workflow's wait from every index.
    fn unpark(&mut self, id: WorkflowId) {
        let Some(wait) = self
            .entries
            .get_mut(&id)
            .and_then(|entry| entry.wait.take())
        else {
            return;
        };
        for source in wait.sources {
            match source {
                Source::Key(key) => {
                    if let Some(ids) = self.by_key.get_mut(&key) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.by_key.remove(&key);
                        }
                    }
                }
                Source::At(at) => {
                    self.deadlines.remove(&(at, id));
                }
            }
        }
    }

    fn park(&mut self, id: WorkflowId, wake: Wake, sources: Vec<Source>, now: Instant) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        debug_assert!(
            entry.wait.is_none(),
            "a workflow waits on one thing at a time"
        );
        for source in &sources {
            match source {
                Source::Key(key) => {
                    self.by_key.entry(key.clone()).or_default().insert(id);
                }
                Source::At(at) => {
                    self.deadlines.insert((*at, id));
                }
            }
        }
        entry.wait = Some(Waiting {
            wake,
            sources,
            since: now,
        });
    }

    fn drive(&mut self, ctx: &mut C, now: Instant) {
        while let Some(id) = self.ready.pop_front() {
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            entry.queued = false;
            self.run_until_parked(id, ctx, now);
        }
        self.check_invariants();
    }

    /// Runs steps of one workflow until it waits on a source that has not fired yet, or
    /// ends.
    fn run_until_parked(&mut self, id: WorkflowId, ctx: &mut C, now: Instant) {
        loop {
            let Some(entry) = self.entries.get_mut(&id) else {
                return;
            };
            if entry.flow.current_step().is_none() {
                self.finish(id);
                return;
            }
            let shared = Shared {
                now,
                outcome: &entry.outcome,
            };
            let step = entry.flow.run_current(ctx, shared);
            log::debug!(
                "workflow {} {id}: step {} -> {step:?}",
                entry.flow.name(),
                entry.flow.current_step().unwrap_or("<none>")
            );
            let step = match step {
                Step::Wait(wake) => {
                    let mut sources = Vec::new();
                    flatten(&wake, &mut sources);
                    // A deadline that has already passed makes the step run again at
                    // once, up to a cap.
                    let passed = (sources.iter())
                        .any(|source| matches!(source, Source::At(at) if *at <= now));
                    if !passed {
                        entry.already_fired_waits = 0;
                        if sources.is_empty() {
                            log::warn!(
                                "workflow {} {id}: step {} waits on nothing",
                                entry.flow.name(),
                                entry.flow.current_step().unwrap_or("<none>")
                            );
                        }
                        self.park(id, wake, sources, now);
                        return;
                    }
                    if entry.already_fired_waits < MAX_ALREADY_FIRED_WAITS {
                        entry.already_fired_waits += 1;
                        continue;
                    }
                    Step::fail(WorkflowError::WaitLoop {
                        workflow: entry.flow.name().to_owned(),
                        step: entry.flow.current_step().unwrap_or("<none>").to_owned(),
                        count: entry.already_fired_waits,
                    })
                }
                other => other,
            };
            entry.already_fired_waits = 0;
            match step {
                Step::Next => entry.flow.advance(false),
                Step::Done => entry.flow.advance(true),
                Step::Fail(reason) => {
                    if entry.outcome == Outcome::Done {
                        entry.outcome = Outcome::Failed(reason);
                    } else {
                        log::warn!(
                            "workflow {} {id}: step {} failed after the workflow was {}: {reason}",
                            entry.flow.name(),
                            entry.flow.current_step().unwrap_or("<none>"),
                            entry.outcome
                        );
                    }
                    entry.flow.advance(true);
                }
                Step::Wait(_) => debug_assert!(false, "waits are handled above"),
            }
        }
    }

    /// Removes an ended workflow and hands its outcome to `drain_finished`.
    fn finish(&mut self, id: WorkflowId) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        debug_assert!(
            entry.wait.is_none() && !entry.queued,
            "an ending workflow neither waits nor is queued"
        );
        let name = entry.flow.name().to_owned();
        log::debug!("workflow {name} {id}: ended, {}", entry.outcome);
        if self.finished.len() >= MAX_FINISHED_KEPT {
            self.finished.pop_front();
        }
        self.finished.push_back(Finished {
            name,
            outcome: entry.outcome,
        });
    }

    #[cfg(debug_assertions)]
    fn check_invariants(&self) {
        debug_assert!(
            self.ready.is_empty(),
            "the ready queue is drained before returning"
        );
        for entry in self.entries.values() {
            debug_assert!(
                entry.wait.is_some() && !entry.queued,
                "between public calls every workflow waits and none is queued"
            );
            debug_assert!(
                entry.flow.current_step().is_some(),
                "a workflow with no step left has been removed"
            );
        }
        for (key, ids) in &self.by_key {
            for id in ids {
                debug_assert!(
                    (self.entries.get(id).and_then(|e| e.wait.as_ref()))
                        .is_some_and(|w| w.sources.contains(&Source::Key(key.clone()))),
                    "the key index lists only workflows waiting on that key"
                );
            }
        }
    }

    #[cfg(not(debug_assertions))]
    fn check_invariants(&self) {}
}
