//! The pure rules of a run as a whole: how targets are cut into batches, when a job
//! counts as busy (the overlap rule), what a pre-staged run does at its slot, and which
//! targets missed the pick-up deadline. The run Workflow (`shell/run/`, `prestage`) calls
//! these and performs what they decide; `rules_tests.rs` tests them without sockets
//! or clocks.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::roles::main::run::target::Target;
use crate::wire::records::{Millis, RunId, RunState};

/// The runnable machines cut into batches: at most `number_of_targets` of them (chosen by
/// `pick`, which shuffles), in batches of `batch_size` (all at once when absent or 0).
pub(crate) fn cut_batches(
    mut runnable: Vec<String>,
    number_of_targets: Option<usize>,
    batch_size: Option<usize>,
    pick: impl FnOnce(&mut [String]),
) -> Vec<Vec<String>> {
    if let Some(n) = number_of_targets
        && n < runnable.len()
    {
        pick(&mut runnable);
        runnable.truncate(n);
        runnable.sort();
    }
    let size = batch_size
        .filter(|b| *b > 0)
        .unwrap_or(runnable.len().max(1));
    runnable.chunks(size).map(|c| c.to_vec()).collect()
}

/// The batches left of a recovered run, from its open targets (machine, not launched
/// yet): those launched before the restart are one batch, awaited first; the rest are cut
/// by `batch_size` again, so a `batch_size: 1` run still starts one target at a time.
pub(crate) fn recovered_batches(
    open: Vec<(String, bool)>,
    batch_size: Option<usize>,
) -> Vec<Vec<String>> {
    let (pending, launched): (Vec<_>, Vec<_>) = open.into_iter().partition(|(_, p)| *p);
    let launched: Vec<String> = launched.into_iter().map(|(m, _)| m).collect();
    let pending: Vec<String> = pending.into_iter().map(|(m, _)| m).collect();
    let mut batches = Vec::new();
    if !launched.is_empty() {
        batches.push(launched);
    }
    if !pending.is_empty() {
        batches.extend(cut_batches(pending, None, batch_size, |_| {}));
    }
    if batches.is_empty() {
        batches.push(Vec::new());
    }
    batches
}

/// A run of a job, as the overlap rule sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunView {
    pub id: RunId,
    /// Launched ahead of its slot.
    pub prestaged: bool,
    /// Its slot came and its wrappers were told to go.
    pub go_sent: bool,
}

/// Whether a job is busy besides run `except`: a run queued or being recorded, or one in
/// flight that is not a pre-staged run still waiting for its slot.
pub(crate) fn job_busy(
    queued: usize,
    runs: impl IntoIterator<Item = RunView>,
    except: Option<RunId>,
) -> bool {
    queued > 0
        || runs
            .into_iter()
            .any(|r| Some(r.id) != except && (!r.prestaged || r.go_sent))
}

/// What becomes of a due slot, as the job's controls decide (pause, skips, maintenance
/// windows: `jobctl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hold {
    Run,
    /// Record it as skipped with this reason.
    Skip(String),
    /// Deferred to a window's end: nothing to record now.
    Deferred,
}

/// What a pre-staged run does when its slot comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AtSlot {
    /// Tell the waiting wrappers to go.
    Go,
    /// Cancel it, recorded in this state for this reason.
    Refuse(RunState, String),
}

/// A run of a job as the launch backlog rule sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LaunchView {
    pub slot: Option<Millis>,
    /// Its launch is out, for this long.
    pub out_for: Option<std::time::Duration>,
    /// Staged and not launched yet.
    pub waiting: bool,
}

/// Launches have fallen behind for good at slot `due`: a launch has been out for more
/// than a whole period (`due` minus the job's latest slot before it) and the backlog is
/// growing — at least three of the job's launches out or staged (`queued` runs not
/// started yet count too). Launches slower than the period but running side by side keep
/// two in flight and make their slots late, not skipped; one slow launch never skips.
pub(crate) fn launches_behind(runs: &[LaunchView], due: Millis, queued: usize) -> bool {
    let Some(previous) = runs
        .iter()
        .filter_map(|r| r.slot)
        .filter(|s| *s < due)
        .max()
    else {
        return false;
    };
    let period = u128::from(due.saturating_sub(previous).max(0) as u64);
    let late = runs
        .iter()
        .any(|r| r.out_for.is_some_and(|out| out.as_millis() > period));
    let backlog = queued
        + runs
            .iter()
            .filter(|r| r.waiting || r.out_for.is_some())
            .count();
    late && backlog >= 3
}

/// The decision at the slot, in order of precedence: killed before its slot, global
/// maintenance, the overlap rule.
pub(crate) fn at_slot(
    job: &str,
    kill_requested: bool,
    global_maintenance: bool,
    overlap_forbidden_and_busy: bool,
) -> AtSlot {
    if kill_requested {
        AtSlot::Refuse(RunState::Canceled, "killed before its slot".to_string())
    } else if global_maintenance {
        AtSlot::Refuse(
            RunState::Skipped,
            "maintenance: global maintenance is on".to_string(),
        )
    } else if overlap_forbidden_and_busy {
        AtSlot::Refuse(
            RunState::Skipped,
            format!("overlap: the previous run of {job} is still going"),
        )
    } else {
        AtSlot::Go
    }
}

/// A batch's state against its pick-up deadline.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pickup {
    /// Some target of the batch is not settled.
    pub open: bool,
    /// Targets that never picked the run up and whose deadline passed (254).
    pub overdue: Vec<String>,
    /// Some target still waits to be picked up before the deadline.
    pub waiting: bool,
}

pub(crate) fn check_pickup(
    targets: &BTreeMap<String, Target>,
    batch: &[String],
    deadline: Option<Instant>,
    now: Instant,
) -> Pickup {
    let in_batch = batch.iter().filter_map(|m| targets.get_key_value(m));
    check_pickup_of(in_batch, deadline, now)
}

/// [`check_pickup`] over the targets of the batch given directly (a run of one batch:
/// all its targets, without a lookup each).
pub(crate) fn check_pickup_of<'a>(
    batch: impl Iterator<Item = (&'a String, &'a Target)>,
    deadline: Option<Instant>,
    now: Instant,
) -> Pickup {
    let passed = deadline.is_some_and(|d| now >= d);
    let mut pickup = Pickup::default();
    for (machine, t) in batch {
        if t.is_settled() {
            continue;
        }
        pickup.open = true;
        if t.awaiting_pickup() {
            if passed {
                pickup.overdue.push(machine.clone());
            } else {
                pickup.waiting = true;
            }
        }
    }
    pickup
}
