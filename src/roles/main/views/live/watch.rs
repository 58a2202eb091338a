//! Run watchers (`run --wait`): a `RunProgress` snapshot, then a `TargetProgress` for each
//! target whose state changes, and the final `Run` through the run's waiters (the run's
//! end, `Message::RunEnded`).
//!
//! A change is looked at in two steps, so that the runs in flight need not be lent to the
//! views while they change: [`Live::progress`] reads which targets moved for whom, and
//! [`Live::progressed`] remembers it and streams it.

use std::collections::BTreeMap;

use super::{Live, Watcher, stream};
use crate::ipc::CallId;
use crate::roles::main::messages::Out;
use crate::roles::main::run::target::Target;
use crate::roles::main::views::seen::RunSeen;
use crate::wire::admin::AdminResponse;
use crate::wire::records::{RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState};

/// What a watcher last heard of a target: state, reason, suspended.
type Seen = (TargetState, Option<TargetReason>, bool);

fn seen_of(t: &TargetRecord) -> Seen {
    (t.state, t.reason, t.suspended)
}

/// The snapshot a watcher starts with: the run in flight as it is now.
pub(crate) fn progress(run: &RunSeen) -> RunRecord {
    RunRecord {
        id: run.id,
        job: run.job.to_string(),
        slot: run.slot,
        trigger: run.trigger,
        state: RunState::Running,
        reason: None,
        started: None,
        ended: None,
        targets: run.targets.iter().map(|(m, t)| t.record(m)).collect(),
        attempts: Vec::new(),
    }
}

impl Live {
    /// `WatchRun` (admin call `call`) of a run in flight, `snapshot` ([`progress`]): stream
    /// it; the changes follow.
    pub(crate) fn watch(&mut self, call: CallId, snapshot: RunRecord) -> Out {
        let mut out = Out::new();
        let run = snapshot.id;
        let seen = snapshot
            .targets
            .iter()
            .map(|t| (t.machine.clone(), seen_of(t)))
            .collect();
        stream(&mut out, call, AdminResponse::RunProgress(snapshot));
        self.watchers
            .entry(run)
            .or_default()
            .push(Watcher { call, seen });
        out
    }

    /// Which targets of `run` (in flight, with `targets`) moved since its watchers last
    /// heard, for whom: what [`Live::progressed`] streams.
    pub(crate) fn progress(
        &self,
        run: RunId,
        targets: &BTreeMap<String, Target>,
    ) -> Vec<(CallId, TargetRecord)> {
        let Some(watchers) = self.watchers.get(&run) else {
            return Vec::new();
        };
        let mut moved = Vec::new();
        for w in watchers {
            for (m, t) in targets {
                let now = (t.state(), t.outcome().and_then(|o| o.reason), t.suspended());
                if w.seen.get(m) != Some(&now) {
                    moved.push((w.call, t.record(m)));
                }
            }
        }
        moved
    }

    /// The watchers of `run` hear what moved ([`Live::progress`]).
    pub(crate) fn progressed(&mut self, run: RunId, moved: Vec<(CallId, TargetRecord)>) -> Out {
        let mut out = Out::new();
        if let Some(watchers) = self.watchers.get_mut(&run) {
            for (call, target) in &moved {
                if let Some(w) = watchers.iter_mut().find(|w| w.call == *call) {
                    w.seen.insert(target.machine.clone(), seen_of(target));
                }
            }
        }
        for (call, target) in moved {
            stream(
                &mut out,
                call,
                AdminResponse::TargetProgress { run, target },
            );
        }
        out
    }

    /// `run` is not in flight (any more): nothing more to watch.
    pub(crate) fn run_gone(&mut self, run: RunId) {
        self.watchers.remove(&run);
    }
}
