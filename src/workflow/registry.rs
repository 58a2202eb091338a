//! The registry: every running workflow, what each one waits on, and the queue of
//! workflows ready to run. The loop calls in with an event and its state; the registry
//! runs the affected workflows until each one waits again or ends.
//!
//! Every registered workflow is in exactly one of three states: waiting (indexed under
//! each of its sources), queued (in `ready`), or running (only inside `run_until_parked`).
//! Between public calls none is queued or running.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::steps::{Flow, Ran, Shared, Workflow};
use super::types::{
    Finished, Fired, MAX_ALREADY_FIRED_WAITS, MAX_FINISHED_KEPT, Outcome, StallReport, Step, Wake,
    WakeKey, WorkflowError, WorkflowId,
};

/// One source of a wait, after `Wake::Any` has been flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Key(WakeKey),
    At(Instant),
    Children,
}

fn flatten(wake: &Wake, into: &mut Vec<Source>) {
    let source = match wake {
        Wake::Call(id) => Source::Key(WakeKey::Call(*id)),
        Wake::Timer(id) => Source::Key(WakeKey::Timer(*id)),
        Wake::Event(event) => Source::Key(WakeKey::Event(*event)),
        Wake::At(at) => Source::At(*at),
        Wake::Children => Source::Children,
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
    parent: Option<WorkflowId>,
    children: BTreeSet<WorkflowId>,
    child_outcomes: Vec<Finished>,
    outcome: Outcome,
    wait: Option<Waiting>,
    queued: bool,
    /// What fired for the queued run; dropped if an interrupt skips the waiting step.
    fired: Option<Fired>,
    /// Waits in a row on a source that had already fired.
    already_fired_waits: u32,
}

impl<C> Entry<C> {
    fn new(flow: Box<dyn Flow<C>>, parent: Option<WorkflowId>) -> Self {
        Entry {
            flow,
            parent,
            children: BTreeSet::new(),
            child_outcomes: Vec::new(),
            outcome: Outcome::Done,
            wait: None,
            queued: false,
            fired: None,
            already_fired_waits: 0,
        }
    }
}

/// All running workflows of one process, of any env type, over the caller's state `C`.
pub struct Registry<C> {
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
    pub fn new() -> Self {
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
    pub fn start<E: 'static>(
        &mut self,
        workflow: Workflow<E, C>,
        ctx: &mut C,
        now: Instant,
    ) -> WorkflowId {
        self.next_id += 1;
        let id = WorkflowId(self.next_id);
        log::debug!("workflow {} {id}: started", workflow.name());
        self.entries
            .insert(id, Entry::new(Box::new(workflow), None));
        self.enqueue(id, None);
        self.drive(ctx, now);
        id
    }

    /// Resumes every workflow waiting on `key`; returns how many.
    pub fn wake(&mut self, key: &WakeKey, ctx: &mut C, now: Instant) -> usize {
        let ids = self.by_key.remove(key).unwrap_or_default();
        for &id in &ids {
            self.unpark(id);
            self.enqueue(id, Some(Fired::from(key.clone())));
        }
        self.drive(ctx, now);
        ids.len()
    }

    /// Resumes every workflow whose [`Wake::At`] deadline is not after `now`; returns
    /// how many.
    pub fn due_timers(&mut self, ctx: &mut C, now: Instant) -> usize {
        let mut count = 0;
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.unpark(id);
            self.enqueue(id, Some(Fired::At(at)));
            count += 1;
        }
        self.drive(ctx, now);
        count
    }

    /// The earliest [`Wake::At`] deadline, for the loop's poll timeout.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Ends the normal steps of a workflow (and of its children): a waiting normal step
    /// is dropped and the `always` steps run now. A cleanup step already running is
    /// left to finish. The first reason (failure or interrupt) is the outcome.
    pub fn interrupt(
        &mut self,
        id: WorkflowId,
        reason: impl Into<String>,
        ctx: &mut C,
        now: Instant,
    ) -> Result<(), WorkflowError> {
        if !self.entries.contains_key(&id) {
            return Err(WorkflowError::NotRunning(id));
        }
        self.interrupt_tree(id, &reason.into());
        self.drive(ctx, now);
        Ok(())
    }

    /// Interrupts every top-level workflow (children follow their parent); returns how
    /// many.
    pub fn interrupt_all(&mut self, reason: &str, ctx: &mut C, now: Instant) -> usize {
        let roots: Vec<WorkflowId> = (self.entries.iter())
            .filter(|(_, entry)| entry.parent.is_none())
            .map(|(&id, _)| id)
            .collect();
        for &id in &roots {
            self.interrupt_tree(id, reason);
        }
        self.drive(ctx, now);
        roots.len()
    }

    /// Workflows registered and not ended, children included.
    pub fn running(&self) -> usize {
        self.entries.len()
    }

    pub fn is_idle(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, id: WorkflowId) -> bool {
        self.entries.contains_key(&id)
    }

    /// The step a running workflow is at (waiting in, between public calls).
    pub fn current_step(&self, id: WorkflowId) -> Option<&str> {
        self.entries.get(&id)?.flow.current_step()
    }

    /// Workflows that look stuck: waiting on nothing, or waiting at least `threshold`
    /// with no live source. The registry cannot know which calls, timers and events the
    /// caller still expects, so `is_pending` tells it (`|_| true` checks only what the
    /// registry knows: empty waits and deadlines overdue by `threshold`).
    pub fn stalled(
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
                Source::Children => !entry.children.is_empty(),
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
    pub fn shutdown_complete(&self, now: Instant, deadline: Instant) -> bool {
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

    /// Takes the ended top-level workflows (children go to their parent instead).
    pub fn drain_finished(&mut self) -> Vec<Finished> {
        self.finished.drain(..).collect()
    }

    fn enqueue(&mut self, id: WorkflowId, fired: Option<Fired>) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        debug_assert!(
            entry.wait.is_none() && !entry.queued,
            "only a workflow that is neither waiting nor queued can be queued"
        );
        entry.queued = true;
        entry.fired = fired;
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
                Source::Children => {}
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
                Source::Children => {}
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
            let fired = entry.fired.take();
            self.run_until_parked(id, fired, ctx, now);
        }
        self.check_invariants();
    }

    /// Runs steps of one workflow until it waits on a source that has not fired yet, or
    /// ends.
    fn run_until_parked(
        &mut self,
        id: WorkflowId,
        mut fired: Option<Fired>,
        ctx: &mut C,
        now: Instant,
    ) {
        loop {
            let Some(entry) = self.entries.get_mut(&id) else {
                return;
            };
            if entry.flow.current_step().is_none() {
                self.finish(id);
                return;
            }
            let shared = Shared {
                id,
                now,
                fired: fired.take(),
                outcome: &entry.outcome,
                children_running: entry.children.len(),
                child_outcomes: &mut entry.child_outcomes,
                next_id: &mut self.next_id,
            };
            let Ran {
                step,
                spawned,
                interrupt_children,
            } = entry.flow.run_current(ctx, shared);
            log::debug!(
                "workflow {} {id}: step {} -> {step:?}",
                entry.flow.name(),
                entry.flow.current_step().unwrap_or("<none>")
            );
            if let Some(reason) = interrupt_children {
                let children: Vec<WorkflowId> = entry.children.iter().copied().collect();
                for child in children {
                    self.interrupt_tree(child, &reason);
                }
            }
            for (child, flow) in spawned {
                log::debug!("workflow {} {child}: started by {id}", flow.name());
                self.entries.insert(child, Entry::new(flow, Some(id)));
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.children.insert(child);
                }
                self.enqueue(child, None);
            }
            let Some(entry) = self.entries.get_mut(&id) else {
                return;
            };
            let step = match step {
                Step::Wait(wake) => {
                    let mut sources = Vec::new();
                    flatten(&wake, &mut sources);
                    match already_fired(&sources, entry.children.is_empty(), now) {
                        None => {
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
                        Some(now_fired) if entry.already_fired_waits < MAX_ALREADY_FIRED_WAITS => {
                            entry.already_fired_waits += 1;
                            fired = Some(now_fired);
                            continue;
                        }
                        Some(_) => Step::fail(WorkflowError::WaitLoop {
                            workflow: entry.flow.name().to_owned(),
                            step: entry.flow.current_step().unwrap_or("<none>").to_owned(),
                            count: entry.already_fired_waits,
                        }),
                    }
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

    /// Interrupts a workflow and all its descendants.
    fn interrupt_tree(&mut self, id: WorkflowId, reason: &str) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let children: Vec<WorkflowId> = entry.children.iter().copied().collect();
        if !entry.flow.in_cleanup() {
            debug_assert!(
                entry.outcome == Outcome::Done,
                "a workflow still in its normal steps has neither failed nor been interrupted"
            );
            log::debug!("workflow {} {id}: interrupted: {reason}", entry.flow.name());
            entry.outcome = Outcome::Interrupted(reason.to_owned());
            if entry.flow.interrupt() {
                if entry.queued {
                    entry.fired = None;
                } else {
                    debug_assert!(entry.wait.is_some(), "an idle workflow is waiting");
                    self.unpark(id);
                    self.enqueue(id, None);
                }
            }
        }
        for child in children {
            self.interrupt_tree(child, reason);
        }
    }

    /// Removes an ended workflow and hands its outcome to its parent or to
    /// `drain_finished`.
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
        for &child in &entry.children {
            log::warn!("workflow {name} {id}: ended before its child {child}; interrupting it");
            if let Some(child_entry) = self.entries.get_mut(&child) {
                child_entry.parent = None;
            }
            self.interrupt_tree(child, &format!("parent workflow {name} {id} ended"));
        }
        let finished = Finished {
            id,
            name,
            outcome: entry.outcome,
            env: entry.flow.into_env(),
        };
        let Some(parent) = entry
            .parent
            .and_then(|parent| self.entries.get_mut(&parent))
        else {
            if self.finished.len() >= MAX_FINISHED_KEPT {
                self.finished.pop_front();
            }
            self.finished.push_back(finished);
            return;
        };
        parent.children.remove(&id);
        parent.child_outcomes.push(finished);
        let joined = parent.children.is_empty()
            && (parent.wait.as_ref()).is_some_and(|wait| wait.sources.contains(&Source::Children));
        if joined && let Some(parent_id) = entry.parent {
            self.unpark(parent_id);
            self.enqueue(parent_id, Some(Fired::Children));
        }
    }

    #[cfg(debug_assertions)]
    fn check_invariants(&self) {
        debug_assert!(
            self.ready.is_empty(),
            "the ready queue is drained before returning"
        );
        for (id, entry) in &self.entries {
            debug_assert!(
                entry.wait.is_some() && !entry.queued,
                "between public calls every workflow waits and none is queued"
            );
            debug_assert!(
                entry.flow.current_step().is_some(),
                "a workflow with no step left has been removed"
            );
            if let Some(parent) = entry.parent {
                debug_assert!(
                    (self.entries.get(&parent)).is_some_and(|p| p.children.contains(id)),
                    "a child's parent is registered and lists it"
                );
            }
            for child in &entry.children {
                debug_assert!(
                    (self.entries.get(child)).is_some_and(|c| c.parent == Some(*id)),
                    "a listed child is registered and names its parent"
                );
            }
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

/// The source of a wait that has already fired, if any: a join with no child left, or
/// a deadline not after `now`.
fn already_fired(sources: &[Source], no_children: bool, now: Instant) -> Option<Fired> {
    sources.iter().find_map(|source| match source {
        Source::Children if no_children => Some(Fired::Children),
        Source::At(at) if *at <= now => Some(Fired::At(*at)),
        _ => None,
    })
}
