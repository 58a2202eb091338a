//! What the views read of a standby's mirror of the leader's runs (`mirror` keeps it):
//! the runs shown as running, a job's newest run, whether a followed run is mirrored.

use crate::roles::main::state::Main;
use crate::roles::main::state::views::Mirrored;
use crate::wire::records::{Millis, RunId, RunRecord, TargetRecord, TargetState};
use crate::wire::ui::{RunningView, TargetView};

pub(crate) fn standby(core: &Main) -> bool {
    core.ha.standby()
}

/// `output -f` or `logs -f` of `record`: whether it is in flight on the leader (the
/// follower then reads as its output is committed), mirrored from now on if it was not.
pub(crate) fn follows(core: &mut Main, record: &RunRecord) -> bool {
    if !standby(core) || record.state.is_final() {
        return false;
    }
    let m = &mut core.views.mirror;
    match m.runs.get(&record.id) {
        Some(entry) => entry.next.as_ref().is_none_or(|n| !n.state.is_final()),
        None => {
            m.runs.insert(
                record.id,
                Mirrored {
                    shown: record.clone(),
                    next: None,
                },
            );
            core.views.ui.job_changed(&record.job);
            true
        }
    }
}

/// The newest run of `job` in flight on the leader, as mirrored.
pub(crate) fn newest_of(core: &Main, job: &str) -> Option<RunId> {
    core.views
        .mirror
        .runs
        .iter()
        .filter(|(_, e)| e.shown.job == job && e.next.as_ref().is_none_or(|n| !n.state.is_final()))
        .map(|(id, _)| *id)
        .max()
}

/// Runs mirrored (`status`'s runs in flight on a standby).
pub(crate) fn count(core: &Main) -> usize {
    core.views.mirror.runs.len()
}

fn settled(t: &TargetRecord) -> bool {
    matches!(
        t.state,
        TargetState::Finished | TargetState::SkippedMaintenance
    )
}

/// The dashboard's `status`: the mirrored runs in flight.
pub(crate) fn running(core: &Main) -> Vec<RunningView> {
    core.views
        .mirror
        .runs
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
pub(crate) fn newest_details(
    core: &Main,
    job: &str,
) -> Option<(RunId, Option<Millis>, Vec<TargetView>)> {
    let (id, entry) = core
        .views
        .mirror
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
