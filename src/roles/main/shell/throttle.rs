//! Throttling: `max_running_per_machine` (Saltpeter commands at once on one machine,
//! across all jobs) and `max_runs_in_flight` (runs at once on this server).
//!
//! Nothing new is queued beside the runs: the queues are read off the runs in flight.
//! - A run over `max_runs_in_flight` is recorded as usual and then waits in its Workflow's
//!   `await_capacity` step (before any wrapper is deployed or launched), shown as a
//!   `queued` run with the reason; `RunPhase::AwaitingCapacity` marks it.
//! - A target over `max_running_per_machine` stays `Phase::Pending` when its batch is
//!   launched (`launch_batch` asks [`target_admission`]): it is not launched at all, so no
//!   wrapper waits on the minion and its timeout clock, which starts with the command, does
//!   not run. `Target::throttled` holds the reason; the target shows as `queued`. Its run's
//!   `collect_batch` launches it again once it may start ([`any_admitted`]).
//!
//! Order: both queues are served in slot order (a manual run: when it was recorded), then
//! run id ([`QueueKey`]). A waiting entry is admitted only when the places taken plus the
//! entries waiting ahead of it leave room, so a later slot never overtakes an earlier one.
//!
//! A machine's place is taken from the launch of a target's wrapper until its command
//! ended (`Launching` and `PickedUp`): a pre-staged salt target waiting for `go` counts,
//! since its command starts at the slot. Places free up when a target leaves those phases
//! or a run ends; `effects::transition` and `finalize` then wake the waiting Workflows
//! (`WakeEvent::Capacity`).
//!
//! The functions of the rules are pure (counts in, decision out); the scans over the runs in
//! flight cost one lookup per run, and are done only when a limit is set.

use std::collections::BTreeMap;

use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::target::Target;
use crate::roles::main::shell::Main;
use crate::wire::records::RunId;

pub(crate) use crate::roles::main::run::active::QueueKey;

/// What one machine has: places taken, and the keys of the targets waiting for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MachineLoad {
    pub running: usize,
    pub waiting: Vec<QueueKey>,
}

/// May a target with key `me` start on `machine` now? `Err` holds the reason it waits.
pub(crate) fn target_admission(
    max: u32,
    machine: &str,
    load: &MachineLoad,
    me: QueueKey,
) -> Result<(), String> {
    let Some(queued) = no_place(max, load.running, &load.waiting, me) else {
        return Ok(());
    };
    Err(format!(
        "waiting: {} command(s) already running on {machine}{queued} \
         (max_running_per_machine {max})",
        load.running
    ))
}

/// `None` when `taken` places and those waiting ahead of `me` leave one of `max` for
/// it; otherwise how many wait ahead, as the reason says it (", 2 queued ahead").
fn no_place(max: u32, taken: usize, waiting: &[QueueKey], me: QueueKey) -> Option<String> {
    let ahead = waiting.iter().filter(|k| **k < me).count();
    if taken + ahead < max as usize {
        return None;
    }
    Some(if ahead > 0 {
        format!(", {ahead} queued ahead")
    } else {
        String::new()
    })
}

/// May a run with key `me` start now, with `in_flight` runs admitted and the keys of those
/// waiting in `waiting`? `Err` holds the reason it waits.
pub(crate) fn run_admission(
    max: u32,
    in_flight: usize,
    waiting: &[QueueKey],
    me: QueueKey,
) -> Result<(), String> {
    let Some(queued) = no_place(max, in_flight, waiting, me) else {
        return Ok(());
    };
    Err(format!(
        "waiting: {in_flight} run(s) in flight{queued} (max_runs_in_flight {max})"
    ))
}

/// What `machine` has across the runs in flight.
pub(crate) fn machine_load<'a>(
    runs: impl Iterator<Item = &'a ActiveRun>,
    machine: &str,
) -> MachineLoad {
    let mut load = MachineLoad::default();
    for run in runs {
        let Some(t) = run.target(machine) else {
            continue;
        };
        if t.occupies_machine() {
            load.running += 1;
        } else if t.is_throttled() {
            load.waiting.push(run.queue_key());
        }
    }
    load
}

/// May the pending target of `run` on `machine` start now (`max_running_per_machine`)?
pub(crate) fn may_start(core: &Main, run: RunId, machine: &str) -> Result<(), String> {
    let Some(max) = core
        .config
        .saltpeter
        .max_running_per_machine
        .cap_for(machine)
    else {
        return Ok(());
    };
    let Some(me) = core.run(run).map(ActiveRun::queue_key) else {
        return Ok(());
    };
    let load = machine_load(core.runs().filter(|r| r.id() != run), machine);
    target_admission(max, machine, &load, me)
}

/// Whether a throttled target among `batch` of `run` may start now.
pub(crate) fn any_admitted(core: &Main, run: RunId, batch: &[String]) -> bool {
    let Some(active) = core.run(run) else {
        return false;
    };
    batch_targets(active, batch).any(|(m, t)| t.is_throttled() && may_start(core, run, m).is_ok())
}

/// Whether `batch` of `run` has throttled targets (the batch waits for places).
pub(crate) fn has_throttled(core: &Main, run: RunId, batch: &[String]) -> bool {
    core.run(run)
        .is_some_and(|a| batch_targets(a, batch).any(|(_, t)| t.is_throttled()))
}

/// The targets of `batch` (machines of `active`). A batch as large as the run is all of
/// it, walked without a lookup per machine: these checks run on every wake of the run,
/// and hashing 10,000 names each time was a tenth of main's CPU in a 10,000-target
/// firing.
fn batch_targets<'a>(
    active: &'a ActiveRun,
    batch: &'a [String],
) -> Box<dyn Iterator<Item = (&'a String, &'a Target)> + 'a> {
    if batch.len() == active.targets().len() {
        Box::new(active.targets().iter())
    } else {
        Box::new(
            batch
                .iter()
                .filter_map(|m| active.targets().get_key_value(m)),
        )
    }
}

/// May `run` start now (`max_runs_in_flight`)?
pub(crate) fn run_may_start(core: &Main, run: RunId) -> Result<(), String> {
    let Some(max) = core.config.saltpeter.max_runs_in_flight else {
        return Ok(());
    };
    let Some(me) = core.run(run).map(ActiveRun::queue_key) else {
        return Ok(());
    };
    let others = || core.runs().filter(|r| r.id() != run);
    let in_flight = others().filter(|r| !r.awaiting_capacity()).count();
    let waiting: Vec<QueueKey> = others()
        .filter(|r| r.awaiting_capacity())
        .map(ActiveRun::queue_key)
        .collect();
    run_admission(max, in_flight, &waiting, me)
}

/// The reasons of the throttled targets of `run`, by machine (for the run's view).
pub(crate) fn reasons(core: &Main, run: RunId) -> BTreeMap<String, String> {
    core.run(run)
        .map(|a| {
            a.targets()
                .iter()
                .filter(|(_, t)| t.is_throttled())
                .filter_map(|(m, t)| Some((m.clone(), t.throttled()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(running: usize, waiting: &[QueueKey]) -> MachineLoad {
        MachineLoad {
            running,
            waiting: waiting.to_vec(),
        }
    }

    #[test]
    fn a_machine_admits_up_to_its_limit() {
        assert_eq!(target_admission(3, "m", &load(2, &[]), (10, 1)), Ok(()));
        let full = target_admission(3, "minion-04", &load(3, &[]), (10, 1));
        assert_eq!(
            full,
            Err("waiting: 3 command(s) already running on minion-04 \
                 (max_running_per_machine 3)"
                .to_string())
        );
    }

    #[test]
    fn waiting_targets_start_in_slot_order() {
        // One place free, two waiting: the earlier slot goes first, whatever the run ids.
        let waiting = [(10, 7), (20, 3)];
        assert_eq!(
            target_admission(3, "m", &load(2, &waiting), (10, 7)),
            Ok(())
        );
        let later = target_admission(3, "m", &load(2, &waiting), (20, 3));
        assert!(later.is_err_and(|r| r.contains("1 queued ahead")));
        // A new target of a later slot does not overtake those waiting.
        assert!(target_admission(3, "m", &load(2, &waiting), (30, 9)).is_err());
        // The same slot: the lower run id first.
        let same = [(10, 4), (10, 2)];
        assert_eq!(target_admission(1, "m", &load(0, &same), (10, 2)), Ok(()));
        assert!(target_admission(1, "m", &load(0, &same), (10, 4)).is_err());
    }

    #[test]
    fn runs_are_admitted_in_slot_order_up_to_the_limit() {
        assert_eq!(run_admission(1, 0, &[], (10, 1)), Ok(()));
        let busy = run_admission(1, 1, &[], (10, 2));
        assert_eq!(
            busy,
            Err("waiting: 1 run(s) in flight (max_runs_in_flight 1)".to_string())
        );
        let waiting = [(5, 9), (20, 1)];
        assert_eq!(run_admission(2, 1, &waiting, (5, 9)), Ok(()));
        assert!(run_admission(2, 1, &waiting, (20, 1)).is_err());
        assert_eq!(run_admission(3, 1, &waiting, (20, 1)), Ok(()));
    }
}
