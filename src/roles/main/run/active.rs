//! A run in flight as main keeps it (`ActiveRun`): its targets, where it is in its life
//! (`RunPhase`, changed only by the transitions here), and what it answers — its final
//! state, its place in the throttling queues, how soon its writes are due.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::config::Job;
use crate::ipc::CallId;
use crate::ipc::rpc::Due;
use crate::roles::main::run::target::Target;
use crate::wire::records::{
    Millis, RunId, RunState, TargetReason, TargetRecord, TargetState, Trigger, settle_run_state,
};

/// How long before its slot a pre-staged run's held writes are committed.
const STAGED_WRITES_LEAD_MS: i64 = 1_000;
/// A run of this many targets or more lets db hold the writes of its stream (commands
/// started, output, exits) for up to [`STREAM_HOLD_MS`], so that one commit covers
/// them all (see [`ActiveRun::write_due`]).
const STREAM_TARGETS: usize = 100;
const STREAM_HOLD_MS: i64 = 1_000;
/// How long such a run's exit that waited for its output to be stored may wait more:
/// the exits its output's commit released come in a burst, and one commit covers it.
const RELEASED_EXIT_HOLD_MS: i64 = 100;

/// A place in a throttling queue: slot (or when a manual run was recorded), then run id.
pub(crate) type QueueKey = (Millis, RunId);

/// Where a run in flight is in its life.
///
/// ```text
/// recorded ─(pre-staged)→ Staged ──go at the slot──→ Released
///    │  └──(at once)────→ Immediate
///    └─no place under max_runs_in_flight→ AwaitingCapacity ─admitted→ Staged | Immediate
/// ```
///
/// A batch launch out (`launching`, since when) is part of the three launching states:
/// the Workflow waits for a place before it launches anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunPhase {
    /// Recorded, waiting for a place under `max_runs_in_flight` (`shell/run/capacity.rs`);
    /// `staged`: launched ahead of its slot once admitted.
    AwaitingCapacity { staged: bool },
    /// Launched ahead of its slot: its wrappers wait for `go` (`shell/run/prestage.rs`).
    Staged { launching: Option<Instant> },
    /// Pre-staged, and `go` went out at `go_at` (server clock, unix ms): no command of
    /// the run starts before.
    Released {
        go_at: Millis,
        launching: Option<Instant>,
    },
    /// Not pre-staged: its commands start as their wrappers are launched.
    Immediate { launching: Option<Instant> },
}

/// A run in flight.
pub(crate) struct ActiveRun {
    id: RunId,
    job: Arc<Job>,
    slot: Option<Millis>,
    trigger: Trigger,
    /// Its targets by machine: added when the run is recorded (or recovered), never
    /// removed while it is in flight.
    targets: BTreeMap<String, Target>,
    phase: RunPhase,
    /// An operator killed the whole run. Not a phase: a kill may come in any of them
    /// (staged: canceled at its slot; waiting for a place: admitted to end at once;
    /// launching or running: its targets are killed) and does not move the run by itself.
    kill_requested: bool,
    /// Admin calls (`run --wait`) to answer when the run ends.
    waiters: Vec<CallId>,
    /// When the run was recorded: its place in the throttling queues when it has no slot
    /// (a manual run).
    recorded_at: Millis,
}

impl ActiveRun {
    /// A run just recorded (or recovered), its targets still to add: pre-staged ones
    /// wait for `go`.
    pub(crate) fn new(
        id: RunId,
        job: Arc<Job>,
        slot: Option<Millis>,
        trigger: Trigger,
        prestaged: bool,
        recorded_at: Millis,
    ) -> ActiveRun {
        ActiveRun {
            id,
            job,
            slot,
            trigger,
            targets: BTreeMap::new(),
            phase: if prestaged {
                RunPhase::Staged { launching: None }
            } else {
                RunPhase::Immediate { launching: None }
            },
            kill_requested: false,
            waiters: Vec::new(),
            recorded_at,
        }
    }

    /// The run with its targets (the run is recorded, or recovered, with them).
    pub(crate) fn with_targets(mut self, targets: BTreeMap<String, Target>) -> ActiveRun {
        self.targets = targets;
        self
    }

    /// The run's id.
    pub(crate) fn id(&self) -> RunId {
        self.id
    }

    /// The job it runs.
    pub(crate) fn job(&self) -> &Arc<Job> {
        &self.job
    }

    /// Its slot (unix ms); a manual run has none.
    pub(crate) fn slot(&self) -> Option<Millis> {
        self.slot
    }

    /// What started it.
    pub(crate) fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// Its targets by machine.
    pub(crate) fn targets(&self) -> &BTreeMap<String, Target> {
        &self.targets
    }

    /// A target of it.
    pub(crate) fn target(&self, machine: &str) -> Option<&Target> {
        self.targets.get(machine)
    }

    /// A target of it, to move.
    pub(crate) fn target_mut(&mut self, machine: &str) -> Option<&mut Target> {
        self.targets.get_mut(machine)
    }

    /// Its targets by machine, to move (none is added or removed).
    pub(crate) fn targets_mut(&mut self) -> impl Iterator<Item = (&String, &mut Target)> {
        self.targets.iter_mut()
    }

    /// An admin call (`run --wait`, a watch) is answered when the run ends.
    pub(crate) fn add_waiter(&mut self, call: CallId) {
        self.waiters.push(call);
    }

    /// The admin calls to answer when the run ends.
    pub(crate) fn waiters(&self) -> &[CallId] {
        &self.waiters
    }

    /// Launched ahead of its slot (whether or not `go` went out since).
    pub(crate) fn is_prestaged(&self) -> bool {
        match self.phase {
            RunPhase::AwaitingCapacity { staged } => staged,
            RunPhase::Staged { .. } | RunPhase::Released { .. } => true,
            RunPhase::Immediate { .. } => false,
        }
    }

    /// `go` went out: waiting wrappers were released.
    pub(crate) fn go_sent(&self) -> bool {
        self.go_at().is_some()
    }

    /// When `go` went out (server clock, unix ms).
    pub(crate) fn go_at(&self) -> Option<Millis> {
        match self.phase {
            RunPhase::Released { go_at, .. } => Some(go_at),
            _ => None,
        }
    }

    /// Pre-staged and `go` not sent: its wrappers wait, nothing of it runs yet.
    pub(crate) fn awaiting_go(&self) -> bool {
        self.is_prestaged() && !self.go_sent()
    }

    /// Waiting for a place under `max_runs_in_flight`.
    pub(crate) fn awaiting_capacity(&self) -> bool {
        matches!(self.phase, RunPhase::AwaitingCapacity { .. })
    }

    /// A batch launch is out and not answered yet: since when.
    pub(crate) fn launching(&self) -> Option<Instant> {
        match self.phase {
            RunPhase::Staged { launching }
            | RunPhase::Released { launching, .. }
            | RunPhase::Immediate { launching } => launching,
            RunPhase::AwaitingCapacity { .. } => None,
        }
    }

    /// An operator killed the whole run.
    pub(crate) fn kill_requested(&self) -> bool {
        self.kill_requested
    }

    /// An operator kills the whole run.
    pub(crate) fn request_kill(&mut self) {
        self.kill_requested = true;
    }

    /// No place under `max_runs_in_flight`: it waits (`shell/run/capacity.rs`).
    pub(crate) fn wait_for_capacity(&mut self) {
        let staged = self.is_prestaged();
        self.phase = RunPhase::AwaitingCapacity { staged };
    }

    /// A place was found: on to its launch.
    pub(crate) fn admitted(&mut self) {
        if let RunPhase::AwaitingCapacity { staged } = self.phase {
            self.phase = if staged {
                RunPhase::Staged { launching: None }
            } else {
                RunPhase::Immediate { launching: None }
            };
        }
    }

    /// A batch launch went out at `now`.
    pub(crate) fn launch_out(&mut self, now: Instant) {
        self.set_launching(Some(now));
    }

    /// The batch launch was answered (or nothing was launched).
    pub(crate) fn launch_answered(&mut self) {
        self.set_launching(None);
    }

    fn set_launching(&mut self, at: Option<Instant>) {
        match &mut self.phase {
            RunPhase::Staged { launching }
            | RunPhase::Released { launching, .. }
            | RunPhase::Immediate { launching } => *launching = at,
            // The Workflow launches only once admitted.
            RunPhase::AwaitingCapacity { .. } => {}
        }
    }

    /// The slot came and `go` went out at `now_ms`.
    pub(crate) fn go(&mut self, now_ms: Millis) {
        if let RunPhase::Staged { launching } = self.phase {
            self.phase = RunPhase::Released {
                go_at: now_ms,
                launching,
            };
        }
    }

    /// How soon db must store a write of this run (its targets' states, output and
    /// exits) at `now` (unix ms). A pre-staged run's writes before `go` (its wrappers
    /// connecting, proven and waiting) are needed only by its slot: db holds them until
    /// shortly before it and commits them together, instead of as the stream of
    /// connections goes (a commit per window: the commits of a firing grew with its
    /// targets). Lost in a crash, they cost nothing: the wrappers reconnect and prove
    /// themselves again. A run of [`STREAM_TARGETS`] or more then lets its stream wait
    /// up to [`STREAM_HOLD_MS`]: the commands of 10,000 targets start, print and exit
    /// over a second or more, and db's growing window alone made that one commit per
    /// doubling (the commits of a firing grew with its targets' spread). A wrapper's
    /// exit is then acknowledged (and the run ends) up to a second later, and a held
    /// write is answered as soon as any write due now comes: nothing is lost in a crash
    /// either (a wrapper resends what was not acknowledged). Smaller runs keep every
    /// write due at once, for the live views' latency.
    pub(crate) fn write_due(&self, now: Millis) -> Due {
        match self.slot {
            // Those of wrappers that come in the last second wait for the slot itself
            // (`go`'s own write takes them along).
            Some(slot) if self.awaiting_go() => Due::By(if now < slot - STAGED_WRITES_LEAD_MS {
                slot - STAGED_WRITES_LEAD_MS
            } else {
                slot
            }),
            _ if self.targets.len() >= STREAM_TARGETS => Due::By(now + STREAM_HOLD_MS),
            _ => Due::Soon,
        }
    }

    /// How soon db must store the outcome of a target of this run at `now`; `waited`:
    /// its exit waited for its output's write, already held as long as
    /// [`write_due`](Self::write_due) allows, so it may wait only for the burst of
    /// exits that commit released.
    pub(crate) fn exit_due(&self, now: Millis, waited: bool) -> Due {
        match self.write_due(now) {
            Due::By(_) if waited => Due::By(now + RELEASED_EXIT_HOLD_MS),
            due => due,
        }
    }

    /// Its place in the throttling queues: slot order (a manual run: when recorded), then
    /// run id.
    pub(crate) fn queue_key(&self) -> QueueKey {
        (self.slot.unwrap_or(self.recorded_at), self.id)
    }

    /// Final state once every target is settled.
    pub(crate) fn final_state(&self) -> RunState {
        let records: Vec<TargetRecord> = self.targets.iter().map(|(m, t)| t.record(m)).collect();
        let state = settle_run_state(&records);
        let all_stopped_by_user = !records.is_empty()
            && records.iter().all(|t| {
                matches!(
                    t.reason,
                    Some(TargetReason::Killed) | Some(TargetReason::Canceled)
                ) || t.state == TargetState::SkippedMaintenance
            });
        if self.kill_requested && all_stopped_by_user {
            RunState::Canceled
        } else {
            state
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Arc<Job> {
        let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n";
        let loaded = crate::config::check_yaml(yaml, chrono::Utc::now());
        match loaded.valid_jobs().next() {
            Some(j) => Arc::new(j.clone()),
            None => panic!("no job: {:?}", loaded.diagnostics),
        }
    }

    fn run(prestaged: bool) -> ActiveRun {
        ActiveRun::new(1, job(), Some(60_000), Trigger::Schedule, prestaged, 0)
    }

    #[test]
    fn a_staged_run_waits_for_go_and_its_writes_wait_for_the_slot() {
        let mut r = run(true);
        assert!(r.is_prestaged() && r.awaiting_go() && !r.go_sent());
        assert_eq!(r.write_due(0), Due::By(59_000));
        let now = Instant::now();
        r.launch_out(now);
        assert_eq!(r.launching(), Some(now));
        r.go(60_010);
        assert_eq!(r.go_at(), Some(60_010));
        assert!(r.is_prestaged() && !r.awaiting_go());
        assert_eq!(r.launching(), Some(now), "a launch out stays out across go");
        assert_eq!(r.write_due(0), Due::Soon);
        r.launch_answered();
        assert_eq!(r.launching(), None);
    }

    #[test]
    fn a_large_run_lets_its_stream_wait_a_second_a_small_one_does_not() {
        for prestaged in [true, false] {
            let mut r = run(prestaged);
            for i in 0..STREAM_TARGETS - 1 {
                r.targets.insert(format!("m{i}"), Target::new(0));
            }
            r.go(60_000);
            assert_eq!(r.write_due(60_100), Due::Soon, "99 targets");
            assert_eq!(r.exit_due(60_100, true), Due::Soon);
            r.targets.insert("last".into(), Target::new(0));
            assert_eq!(r.write_due(60_100), Due::By(61_100), "100 targets");
            assert_eq!(r.exit_due(60_100, false), Due::By(61_100));
            assert_eq!(r.exit_due(60_100, true), Due::By(60_200));
        }
        // Before go, a staged run's writes wait for its slot whatever its size.
        let mut r = run(true);
        for i in 0..STREAM_TARGETS {
            r.targets.insert(format!("m{i}"), Target::new(0));
        }
        assert_eq!(r.write_due(10_000), Due::By(59_000));
        assert_eq!(r.write_due(59_500), Due::By(60_000), "in the last second");
    }

    #[test]
    fn waiting_for_capacity_keeps_whether_the_run_is_staged() {
        for staged in [true, false] {
            let mut r = run(staged);
            r.wait_for_capacity();
            assert!(r.awaiting_capacity());
            assert_eq!(r.is_prestaged(), staged);
            assert_eq!(r.awaiting_go(), staged);
            r.admitted();
            assert!(!r.awaiting_capacity());
            assert_eq!(r.is_prestaged(), staged);
        }
    }

    #[test]
    fn a_run_started_at_once_is_never_released() {
        let mut r = run(false);
        r.go(1);
        assert!(!r.go_sent() && !r.awaiting_go());
        assert_eq!(r.write_due(0), Due::Soon);
        assert!(!r.kill_requested());
        r.request_kill();
        assert!(r.kill_requested());
    }
}
