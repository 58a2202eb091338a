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
//! Order (`run/queue.rs`, pure): both queues are served round-robin between jobs (a free
//! place goes to the job with the fewest places taken, ties to its oldest waiting entry),
//! and each job's entries in slot order (a manual run: when it was recorded), then run id.
//! A waiting entry is admitted only when the places taken plus the entries served before
//! it leave room, so a job's later slot never overtakes its earlier one, and one job's
//! backlog never holds another job back for more than the next free place.
//!
//! Bound: a job with `max_queued_runs_per_job` runs waiting queues no more
//! ([`job_queue_full`]): its slot is recorded as skipped with the reason.
//!
//! A machine's place is taken from the launch of a target's wrapper until its command
//! ended (`Launching` and `PickedUp`): a pre-staged salt target waiting for `go` counts,
//! since its command starts at the slot. Places free up when a target leaves those phases
//! or a run ends; `effects::transition` and `finalize` then wake the waiting Workflows
//! (`WakeEvent::Capacity`).
//!
//! The functions of the rules are pure (counts in, decision out); the scans over the runs in
//! flight cost one lookup per run, and are done only when a limit is set.

use std::collections::{BTreeMap, HashMap};

use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::run::queue::{self, Queued};
use crate::roles::main::run::target::Target;
use crate::roles::main::shell::Main;
use crate::wire::records::RunId;

/// What one machine has: places taken (in all and per job), and the targets waiting for
/// it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MachineLoad<'a> {
    pub running: usize,
    pub running_by_job: HashMap<&'a str, usize>,
    pub waiting: Vec<Queued<'a>>,
}

/// May a target `me` start on `machine` now? `Err` holds the reason it waits.
pub(crate) fn target_admission(
    max: u32,
    machine: &str,
    load: &MachineLoad<'_>,
    me: Queued<'_>,
) -> Result<(), String> {
    let Some(ahead) = queue::no_place(max, load.running, &load.running_by_job, &load.waiting, me)
    else {
        return Ok(());
    };
    Err(format!(
        "waiting: {} command(s) already running on {machine}{} \
         (max_running_per_machine {max})",
        load.running,
        queued_ahead(ahead)
    ))
}

/// How many wait ahead, as a reason says it (", 2 queued ahead").
fn queued_ahead(ahead: usize) -> String {
    if ahead > 0 {
        format!(", {ahead} queued ahead")
    } else {
        String::new()
    }
}

/// May a run `me` start now, with `in_flight` runs admitted (`by_job` of them per job)
/// and `waiting` besides it? `Err` holds the reason it waits.
pub(crate) fn run_admission(
    max: u32,
    in_flight: usize,
    by_job: &HashMap<&str, usize>,
    waiting: &[Queued<'_>],
    me: Queued<'_>,
) -> Result<(), String> {
    let Some(ahead) = queue::no_place(max, in_flight, by_job, waiting, me) else {
        return Ok(());
    };
    Err(format!(
        "waiting: {in_flight} run(s) in flight{} (max_runs_in_flight {max})",
        queued_ahead(ahead)
    ))
}

/// What `machine` has across the runs in flight.
pub(crate) fn machine_load<'a>(
    runs: impl Iterator<Item = &'a ActiveRun>,
    machine: &str,
) -> MachineLoad<'a> {
    let mut load = MachineLoad::default();
    for run in runs {
        let Some(t) = run.target(machine) else {
            continue;
        };
        if t.occupies_machine() {
            load.running += 1;
            *load
                .running_by_job
                .entry(run.job().name.as_str())
                .or_default() += 1;
        } else if t.is_throttled() {
            load.waiting.push(queued(run));
        }
    }
    load
}

/// `run`'s entry in the queues.
fn queued(run: &ActiveRun) -> Queued<'_> {
    Queued {
        job: &run.job().name,
        key: run.queue_key(),
    }
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
    let Some(me) = core.run(run).map(queued) else {
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
    let Some(me) = core.run(run).map(queued) else {
        return Ok(());
    };
    let mut in_flight = 0;
    let mut by_job: HashMap<&str, usize> = HashMap::new();
    let mut waiting = Vec::new();
    for other in core.runs().filter(|r| r.id() != run) {
        if other.awaiting_capacity() {
            waiting.push(queued(other));
        } else {
            in_flight += 1;
            *by_job.entry(other.job().name.as_str()).or_default() += 1;
        }
    }
    run_admission(max, in_flight, &by_job, &waiting, me)
}

/// Why `job` may not queue another run now (`max_queued_runs_per_job`); `None` when it
/// may. Only with a throttle set does anything wait: its runs waiting for a place under
/// `max_runs_in_flight`, those with a target waiting for its machine, and those queued
/// or being recorded (which join them unless a place is free).
pub(crate) fn job_queue_full(core: &Main, job: &str) -> Option<String> {
    let s = &core.config.saltpeter;
    if s.max_runs_in_flight.is_none() && !s.max_running_per_machine.is_set() {
        return None;
    }
    let waiting = core
        .runs()
        .filter(|r| r.job().name == job)
        .filter(|r| r.awaiting_capacity() || r.targets().values().any(Target::is_throttled))
        .count()
        + core.flight.busy_count(job);
    queue::queue_full(job, waiting, s.max_queued_runs_per_job)
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
    use crate::roles::main::run::queue::q;

    fn load<'a>(running: &[(&'a str, usize)], waiting: &[Queued<'a>]) -> MachineLoad<'a> {
        MachineLoad {
            running: running.iter().map(|(_, n)| n).sum(),
            running_by_job: running.iter().copied().collect(),
            waiting: waiting.to_vec(),
        }
    }

    #[test]
    fn a_machine_admits_up_to_its_limit() {
        let two = [("a", 2)];
        assert_eq!(
            target_admission(3, "m", &load(&two, &[]), q("a", 10, 1)),
            Ok(())
        );
        let full = target_admission(3, "minion-04", &load(&[("a", 3)], &[]), q("a", 10, 1));
        assert_eq!(
            full,
            Err("waiting: 3 command(s) already running on minion-04 \
                 (max_running_per_machine 3)"
                .to_string())
        );
    }

    #[test]
    fn waiting_targets_of_a_job_start_in_slot_order() {
        // One place free, two waiting: the earlier slot goes first, whatever the run ids.
        let two = [("j", 2)];
        let waiting = [q("j", 10, 7), q("j", 20, 3)];
        assert_eq!(
            target_admission(3, "m", &load(&two, &waiting), q("j", 10, 7)),
            Ok(())
        );
        let later = target_admission(3, "m", &load(&two, &waiting), q("j", 20, 3));
        assert!(later.is_err_and(|r| r.contains("1 queued ahead")));
        // A new target of a later slot does not overtake those waiting.
        assert!(target_admission(3, "m", &load(&two, &waiting), q("j", 30, 9)).is_err());
        // The same slot: the lower run id first.
        let same = [q("j", 10, 4), q("j", 10, 2)];
        assert_eq!(
            target_admission(1, "m", &load(&[], &same), q("j", 10, 2)),
            Ok(())
        );
        assert!(target_admission(1, "m", &load(&[], &same), q("j", 10, 4)).is_err());
    }

    #[test]
    fn a_machine_full_of_one_job_serves_another_job_next() {
        // hog runs 2 commands on m and has 3 more waiting from earlier slots.
        let waiting = [
            q("hog", 1, 1),
            q("hog", 2, 2),
            q("hog", 3, 3),
            q("other", 9, 9),
        ];
        let hog = [("hog", 2)];
        assert_eq!(
            target_admission(3, "m", &load(&hog, &waiting), q("other", 9, 9)),
            Ok(())
        );
        assert!(target_admission(3, "m", &load(&hog, &waiting), q("hog", 1, 1)).is_err());
    }

    #[test]
    fn runs_are_admitted_up_to_the_limit_round_robin_between_jobs() {
        let none = HashMap::new();
        assert_eq!(run_admission(1, 0, &none, &[], q("j", 10, 1)), Ok(()));
        let busy = run_admission(1, 1, &none, &[], q("j", 10, 2));
        assert_eq!(
            busy,
            Err("waiting: 1 run(s) in flight (max_runs_in_flight 1)".to_string())
        );
        let waiting = [q("j", 5, 9), q("j", 20, 1)];
        assert_eq!(run_admission(2, 1, &none, &waiting, q("j", 5, 9)), Ok(()));
        assert!(run_admission(2, 1, &none, &waiting, q("j", 20, 1)).is_err());
        assert_eq!(run_admission(3, 1, &none, &waiting, q("j", 20, 1)), Ok(()));
        // hog holds both places and has two runs waiting: other's run, of a later slot,
        // gets the next place.
        let hog: HashMap<&str, usize> = [("hog", 2)].into_iter().collect();
        let waiting = [q("hog", 1, 1), q("hog", 2, 2), q("other", 3, 3)];
        let other = run_admission(2, 2, &hog, &waiting, q("other", 3, 3));
        assert_eq!(
            other,
            Err("waiting: 2 run(s) in flight (max_runs_in_flight 2)".to_string())
        );
        let one_ended: HashMap<&str, usize> = [("hog", 1)].into_iter().collect();
        assert_eq!(
            run_admission(2, 1, &one_ended, &waiting, q("other", 3, 3)),
            Ok(())
        );
        let hog_next = run_admission(2, 1, &one_ended, &waiting, q("hog", 1, 1));
        assert!(hog_next.is_err_and(|r| r.contains("1 queued ahead")));
    }
}
