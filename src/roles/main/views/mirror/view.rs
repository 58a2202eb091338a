//! What the views read of a standby's mirror of the leader's runs: the runs shown as
//! running, a job's newest run, whether a followed run is mirrored and in flight.

use super::Mirror;
use crate::roles::main::views::ui::render::LeaderRuns;
use crate::wire::records::{Millis, RunId, TargetRecord, TargetState};
use crate::wire::ui::{RunningView, TargetView};

fn settled(t: &TargetRecord) -> bool {
    matches!(
        t.state,
        TargetState::Finished | TargetState::SkippedMaintenance
    )
}

impl Mirror {
    /// Whether mirrored `run` is still in flight as far as the mirror knows (`None`: not
    /// mirrored).
    pub(crate) fn in_flight(&self, run: RunId) -> Option<bool> {
        let entry = self.runs.get(&run)?;
        Some(entry.next.as_ref().is_none_or(|n| !n.state.is_final()))
    }

    /// The newest run of `job` in flight on the leader, as mirrored.
    pub(crate) fn newest_of(&self, job: &str) -> Option<RunId> {
        self.runs
            .iter()
            .filter(|(_, e)| {
                e.shown.job == job && e.next.as_ref().is_none_or(|n| !n.state.is_final())
            })
            .map(|(id, _)| *id)
            .max()
    }

    /// Runs mirrored (`status`'s runs in flight on a standby).
    pub(crate) fn count(&self) -> usize {
        self.runs.len()
    }
}

impl LeaderRuns for Mirror {
    /// The dashboard's `status`: the mirrored runs in flight.
    fn running(&self) -> Vec<RunningView> {
        self.runs
            .iter()
            .map(|(id, e)| RunningView {
                job: e.shown.job.clone(),
                run: *id,
                started: e.shown.started.or(e.shown.slot),
                machines: e
                    .shown
                    .targets
                    .iter()
                    .filter(|t| !settled(t))
                    .map(|t| t.machine.clone())
                    .collect(),
            })
            .collect()
    }

    /// A watched job's details: its newest mirrored run, its start, and its targets.
    fn newest_details(&self, job: &str) -> Option<(RunId, Option<Millis>, Vec<TargetView>)> {
        let (id, entry) = self
            .runs
            .iter()
            .filter(|(_, e)| e.shown.job == job)
            .max_by_key(|(id, _)| **id)?;
        let targets = entry
            .shown
            .targets
            .iter()
            .map(|t| TargetView {
                record: t.clone(),
                finished: settled(t),
                last_heartbeat: None,
                wrapper_version: None,
            })
            .collect();
        Some((*id, entry.shown.started.or(entry.shown.slot), targets))
    }
}
