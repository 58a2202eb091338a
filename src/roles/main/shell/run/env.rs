//! The run Workflow's env: what was asked (`RunRequest`), the one call a step has out,
//! and the run's stage — planned ([`RunPlan`]) until `record_run` has its id from db,
//! recorded ([`RecordedRun`]) from then on.
//!
//! A run id exists only in a [`RecordedRun`], and a `RecordedRun` is made only by the
//! two ways a run gets one: db recording the plan ([`RunEnv::record`], which consumes the
//! plan) or a restart recovering a run in flight ([`RunEnv::recovered`]). So no step
//! holds an `Option<RunId>`: a step of the recorded run asks [`RunEnv::recorded`] and, if
//! it were ever reached before `record_run`, fails the run with a message naming it
//! ([`not_recorded`]) instead of acting on run 0.
//!
//! Why an enum of stages inside one env rather than one type per state whose steps
//! consume it (as rustls' `client/hs.rs` does): the Workflow engine drives a flat list of
//! named steps over a single env type `E` (`StepFn<E, C>`), a stuck run is reported by
//! the name of its step, and the cleanup step `finalize` runs on every path, whichever
//! stage the run reached. A type per state would need one Workflow per stage and a
//! hand-over between them (a new workflow id, the cleanup split in two). Inside the one
//! env the transition still consumes the plan ([`RunPlan::record`]) and the stage is
//! private: steps reach it only through the accessors, which say `None` in the wrong
//! stage.
//!
//! A step's call to db (or blocking) is one call, not two halves: [`RunEnv::db`] sends it
//! on the step's first run and hands the reply over when the step is woken.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::run::target::Target;
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::{DbReply, DbRequest, NewRun};
use crate::wire::link::LaunchTarget;
use crate::wire::records::{Millis, RunId, RunState, TargetState};
use crate::workflow::{Step, StepCtx, Wake};

/// A step of a run's Workflow is handed this.
pub(crate) type Sc<'a> = StepCtx<'a, RunEnv, Main>;

/// The env of a run's Workflow.
pub(crate) struct RunEnv {
    /// What was asked.
    pub(super) req: RunRequest,
    /// The call the step running now has out (`call`, `db`).
    call: Option<CallId>,
    stage: Stage,
}

enum Stage {
    /// Resolving the targets, cutting the batches, recording the run.
    Planned(RunPlan),
    /// Recorded with its id: admitted, launched, collected, finalized.
    Recorded(RecordedRun),
}

/// A run before db has recorded it.
#[derive(Default)]
pub(crate) struct RunPlan {
    /// Live targets found by resolution (before maintenance and `number_of_targets`).
    pub(super) live: Vec<String>,
    /// Matched but silent: recorded as unreachable (255) with the reason.
    pub(super) unreachable: Vec<(String, String)>,
    /// Why no target could be resolved at all (salt failed, nothing matched).
    pub(super) unresolved: Option<(RunState, String)>,
    pub(super) batches: Vec<Vec<String>>,
    /// Targets in maintenance: recorded as skipped.
    pub(super) maintenance: Vec<String>,
    /// Counted busy in `Flight` (`queue_start`) until recorded.
    pub(super) counted: bool,
    /// The launch round (its slot) this pre-staged salt run belongs to until its launch
    /// is queued (`rounds/`).
    pub(super) round: Option<Millis>,
}

/// A run db has recorded: every step from `await_capacity` on works on this.
pub(crate) struct RecordedRun {
    id: RunId,
    pub(super) batches: Vec<Vec<String>>,
    pub(super) batch: usize,
    /// Why the run did not run (nothing resolved, refused at its slot): its final state
    /// and reason.
    pub(super) unresolved: Option<(RunState, String)>,
    /// See [`RunPlan::round`].
    pub(super) round: Option<Millis>,
    pub(super) pickup_deadline: Option<Instant>,
    pub(super) launch_started: Option<Instant>,
    /// A batch's wrappers, held until db has committed their `launching` state (the
    /// launch barrier, `launch_batch`): a server that dies in between must not leave them
    /// `pending` for the next leader to launch a second time.
    pub(super) held: Vec<LaunchTarget>,
    /// A local batch's launch out (from `launch_batch` to `await_launch`).
    pub(super) launch: Option<CallId>,
    /// Targets of the current batch waiting for their next attempt (`retry.rs`).
    pub(super) retry_at: BTreeMap<String, Instant>,
    /// Salt's word on minions that did not return the launch (used if their wrapper
    /// never calls back before the pick-up deadline).
    pub(super) silent: BTreeMap<String, String>,
    /// The ping of minions waited for (`unreachable.rs`), and when the next one is due.
    pub(super) probe: Option<CallId>,
    pub(super) next_probe: Option<Instant>,
    /// The run's start was recorded (a later launch does not move it).
    pub(super) start_recorded: bool,
    /// Its launch waits in its round or for the round's answer.
    pub(super) launch_queued: bool,
    /// Since when the batch waits for its minions' wrapper deployment (`fleet.rs`).
    pub(super) deploy_since: Option<Instant>,
    /// The ping of targets whose wrappers never called back by the pick-up deadline: its
    /// call and those targets (255 only if the minion does not answer either).
    pub(super) pickup_probe: Option<(CallId, Vec<String>)>,
    /// Since when the run waits for a place under `max_runs_in_flight` (`capacity.rs`).
    pub(super) capacity_since: Option<Instant>,
    /// Its end as decided, and how often its write failed (`finalize`).
    pub(super) end: Option<RunEnd>,
}

/// A run's end, written until stored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunEnd {
    pub at: Millis,
    pub failures: u32,
}

impl RunEnd {
    /// The wait before the next write: 0.5 s, twice as long each time, up to 10 s.
    pub(crate) fn retry_in(&self) -> Duration {
        let first = crate::roles::main::health::storage::FIRST_RETRY;
        let shift = self.failures.saturating_sub(1).min(5);
        (first * (1 << shift)).min(crate::roles::main::health::storage::LAST_RETRY)
    }
}

/// What a step of the recorded run returns when the run has no id yet: it was reached
/// out of order, and the run fails saying so.
pub(super) fn not_recorded(s: &Sc) -> Step {
    Step::fail(format!(
        "step {} was reached before the run was recorded",
        s.step()
    ))
}

/// What a step of the plan returns once the run is recorded.
pub(super) fn not_planned(s: &Sc) -> Step {
    Step::fail(format!(
        "step {} was reached after the run was recorded",
        s.step()
    ))
}

impl RunEnv {
    /// The one place a run's env is made.
    fn new(req: RunRequest, stage: Stage) -> RunEnv {
        RunEnv {
            req,
            call: None,
            stage,
        }
    }

    /// A run to plan and record: until recorded it counts as busy for the overlap rule,
    /// unless pre-staged (see `Flight::queue_start`).
    pub(super) fn plan(req: RunRequest) -> RunEnv {
        let plan = RunPlan {
            counted: !req.prestaged,
            ..RunPlan::default()
        };
        RunEnv::new(req, Stage::Planned(plan))
    }

    /// A run recovered after a restart: recorded already, its batches cut again, its
    /// start recorded; the wrappers launched before the restart have until
    /// `reconnect_until` to reconnect before the pick-up deadline can judge them.
    pub(super) fn recovered(
        req: RunRequest,
        id: RunId,
        batches: Vec<Vec<String>>,
        reconnect_until: Instant,
    ) -> RunEnv {
        let run = RecordedRun {
            pickup_deadline: Some(reconnect_until),
            start_recorded: true,
            ..RecordedRun::new(id, batches)
        };
        RunEnv::new(req, Stage::Recorded(run))
    }

    /// What was asked and the plan; `None` once the run is recorded.
    pub(super) fn planned(&mut self) -> Option<(&RunRequest, &mut RunPlan)> {
        match &mut self.stage {
            Stage::Planned(plan) => Some((&self.req, plan)),
            Stage::Recorded(_) => None,
        }
    }

    /// What was asked and the recorded run; `None` before `record_run`.
    pub(super) fn recorded(&mut self) -> Option<(&RunRequest, &mut RecordedRun)> {
        match &mut self.stage {
            Stage::Recorded(run) => Some((&self.req, run)),
            Stage::Planned(_) => None,
        }
    }

    /// db recorded the run as `id`: the plan becomes the recorded run. Hands back the
    /// targets resolution found unreachable, to be recorded now; `None` (and nothing
    /// changes) when the run was recorded already.
    pub(super) fn record(&mut self, id: RunId) -> Option<Vec<(String, String)>> {
        let Stage::Planned(plan) = &mut self.stage else {
            return None;
        };
        let (run, unreachable) = std::mem::take(plan).record(id);
        self.stage = Stage::Recorded(run);
        Some(unreachable)
    }

    /// The run leaves its launch round, if it is in one: the slot to leave.
    pub(super) fn leave_round(&mut self) -> Option<Millis> {
        match &mut self.stage {
            Stage::Planned(plan) => plan.round.take(),
            Stage::Recorded(run) => run.round.take(),
        }
    }

    /// Whether the run counted as busy for the overlap rule; it no longer does (a
    /// recorded run never counts: the run itself shows the job busy).
    pub(super) fn uncount(&mut self) -> bool {
        match &mut self.stage {
            Stage::Planned(plan) => std::mem::take(&mut plan.counted),
            Stage::Recorded(_) => false,
        }
    }

    /// The step's one call: sent on the step's first run (`ask` sends it and says its
    /// id, or decides the step's return without one), its reply taken (`take`) when the
    /// step runs again. `Err` is what the step returns meanwhile: the wait for the reply,
    /// or what `ask` decided.
    pub(super) fn call<R>(
        &mut self,
        core: &mut Main,
        ask: impl FnOnce(&mut RunEnv, &mut Main) -> Result<CallId, Step>,
        take: impl FnOnce(&mut Main, CallId) -> Option<R>,
    ) -> Result<R, Step> {
        let Some(id) = self.call else {
            let id = ask(self, core)?;
            self.call = Some(id);
            return Err(Step::Wait(Wake::Call(id)));
        };
        match take(core, id) {
            Some(reply) => {
                self.call = None;
                Ok(reply)
            }
            None => Err(Step::Wait(Wake::Call(id))),
        }
    }

    /// The step's one db call (see [`RunEnv::call`]): `ask` builds the request.
    pub(super) fn db<C: Call<DbReply>>(
        &mut self,
        core: &mut Main,
        ask: impl FnOnce(&mut RunEnv, &mut Main) -> Result<DbRequest, Step>,
    ) -> Result<Result<C::Reply, CallError>, Step> {
        self.call(
            core,
            |env, core| {
                let req = ask(env, core)?;
                Ok(core.db_call(req, DbWait::step()))
            },
            |core, id| core.links.take_db_reply::<C>(id),
        )
    }
}

impl RunPlan {
    /// The run as db is to record it: its targets (those after the first batch queued,
    /// those in maintenance skipped, the unreachable pending) and its state with the
    /// reason — the failure or skip of an unresolved run, skipped without targets,
    /// `queued` for a pre-staged run (until `go`, `prestage.rs`), else `dispatching`.
    pub(super) fn new_run(&self, req: &RunRequest, now: Millis) -> NewRun {
        let mut targets = planned_targets(&self.batches);
        targets.extend(
            self.maintenance
                .iter()
                .map(|m| (m.clone(), TargetState::SkippedMaintenance)),
        );
        targets.extend(
            self.unreachable
                .iter()
                .map(|(m, _)| (m.clone(), TargetState::Pending)),
        );
        let (state, reason) = if let Some((state, why)) = &self.unresolved {
            (*state, Some(why.clone()))
        } else if self.batches.iter().all(Vec::is_empty) && self.unreachable.is_empty() {
            let why = if self.maintenance.is_empty() {
                "no targets"
            } else {
                "no target left: all are in maintenance"
            };
            (RunState::Skipped, Some(why.to_string()))
        } else {
            let state = if req.prestaged {
                RunState::Queued
            } else {
                RunState::Dispatching
            };
            (state, req.reason.clone())
        };
        NewRun {
            job: req.job.name.clone(),
            slot: req.slot,
            trigger: req.trigger,
            state,
            reason,
            targets,
            now,
        }
    }

    /// The targets of the run in flight: by batch, in maintenance, and the unreachable
    /// (decided right after, `record_unreachable`).
    pub(super) fn targets(&self) -> BTreeMap<String, Target> {
        let mut targets = BTreeMap::new();
        for (i, batch) in self.batches.iter().enumerate() {
            for m in batch {
                targets.insert(m.clone(), Target::new(i));
            }
        }
        for m in &self.maintenance {
            targets.insert(m.clone(), Target::in_maintenance());
        }
        for (m, _) in &self.unreachable {
            targets.insert(m.clone(), Target::new(0));
        }
        targets
    }

    /// db recorded the plan as `id`: the recorded run, and the unreachable targets still
    /// to record.
    fn record(self, id: RunId) -> (RecordedRun, Vec<(String, String)>) {
        let run = RecordedRun {
            unresolved: self.unresolved,
            round: self.round,
            ..RecordedRun::new(id, self.batches)
        };
        (run, self.unreachable)
    }
}

/// The targets of the batches as first recorded: those after the first batch are queued
/// (they wait for their turn).
fn planned_targets(batches: &[Vec<String>]) -> Vec<(String, TargetState)> {
    batches
        .iter()
        .enumerate()
        .flat_map(|(i, batch)| {
            let state = if i == 0 {
                TargetState::Pending
            } else {
                TargetState::Queued
            };
            batch.iter().map(move |m| (m.clone(), state))
        })
        .collect()
}

impl RecordedRun {
    fn new(id: RunId, batches: Vec<Vec<String>>) -> RecordedRun {
        RecordedRun {
            id,
            batches,
            batch: 0,
            unresolved: None,
            round: None,
            pickup_deadline: None,
            launch_started: None,
            held: Vec::new(),
            launch: None,
            retry_at: BTreeMap::new(),
            silent: BTreeMap::new(),
            probe: None,
            next_probe: None,
            start_recorded: false,
            launch_queued: false,
            deploy_since: None,
            pickup_probe: None,
            capacity_since: None,
            end: None,
        }
    }

    /// The run's id, as db recorded it.
    pub(super) fn id(&self) -> RunId {
        self.id
    }

    /// The machines of the batch going on.
    pub(super) fn current_batch(&self) -> &[String] {
        self.batches.get(self.batch).map_or(&[], Vec::as_slice)
    }

    /// The pick-up deadline moves to `at`, never earlier than it stands (after a restart
    /// it starts at the wrappers' reconnect grace).
    pub(super) fn extend_pickup(&mut self, at: Instant) {
        self.pickup_deadline = Some(self.pickup_deadline.map_or(at, |d| d.max(at)));
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
