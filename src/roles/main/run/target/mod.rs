//! One target of a run in flight: its phase, and the pure transitions between phases.
//!
//! A target moves through
//!
//! ```text
//! Pending ─launch→ Launching ─hello→ PickedUp ─finish→ Finishing ─recorded→ Finished
//!    │                ↑  (gone before confirming)          ↑                     │
//!    ├─maintenance→ SkippedMaintenance                     └── finish from any ──┘
//!    └─unreachable→ WaitingUnreachable ─came back→ Pending (a new attempt)
//!                      └─window closed, or killed→ finish
//!                                              (lost wrapper back: Finished → PickedUp)
//!                                              (retry of a failure: Finished → Pending)
//! ```
//!
//! Every transition takes the time it happens at and returns the [`Effect`]s the shell
//! (`shell/run/effects.rs`) must perform: messages to the wrapper, writes to db, events.
//! Nothing here touches a socket or a clock, so the rules — a launch token works once,
//! output is acked only once committed, an exit settles only when all its output is
//! stored, silence for three heartbeats is a loss, a kill before pick-up cancels — are unit
//! tested in `tests.rs`.
//!
//! The phase and every other field are private to this module: every change of them is
//! one of the transitions here and in the files beside it (`record.rs` restores a target
//! from db, `retry.rs` starts a new attempt, `suspend.rs` stops and continues its
//! command, `throttle.rs` holds it for `max_running_per_machine`, `unreachable.rs` waits
//! for its minion, `refused.rs` holds its output while db cannot store it); the rest of
//! main reads them through [`Target::phase`], the predicates and the readers of
//! `read.rs`. `exit.rs` says what a wrapper's `exited` means for the outcome.

mod exit;
mod read;
mod record;
#[cfg(test)]
mod record_tests;
mod refusals;
mod refused;
mod retry;
mod silence;
pub(crate) mod suspend;
#[cfg(test)]
mod tests;
mod throttle;
mod unreachable;

use std::time::{Duration, Instant};

pub(crate) use exit::exit_outcome;

use crate::wire::link::ConnId;
use crate::wire::records::{Millis, TargetReason, TargetState};
use crate::wire::wrapper::RejectCode;

/// An `exited` whose output is not all committed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingExit {
    pub end_seq: u64,
    pub reason: TargetReason,
    pub code: Option<i32>,
}

/// How a target ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub reason: Option<TargetReason>,
    pub code: Option<i32>,
}

/// Where a target is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for its batch.
    Pending,
    /// Its wrapper is being started; no wrapper has said hello yet.
    Launching,
    /// A wrapper said hello with a valid credential: from here on its silence counts.
    PickedUp {
        /// The command runs (the wrapper said `started`).
        running: bool,
        /// Server clock of the last frame from its wrapper.
        last_seen: Instant,
        /// After a restart: not lost before this (the wrapper's reconnect backoff).
        grace_until: Option<Instant>,
        /// The wrapper said `exited`; the target settles once output up to it is stored.
        exit: Option<PendingExit>,
    },
    /// Its outcome is being recorded; `was` is the state shown until db confirms.
    Finishing { outcome: Outcome, was: TargetState },
    /// Recorded.
    Finished(Outcome),
    /// Left out: its machine was in maintenance.
    SkippedMaintenance,
    /// Its minion did not answer; waiting until `until` for it to come back
    /// (`retry_unreachable`, `shell/run/unreachable.rs`).
    WaitingUnreachable { until: Instant },
}

/// Whether the single-use launch token has been presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    Unused,
    /// Spent for good: the shell records it durably, with the session's resume key,
    /// before the welcome goes out; it is never accepted again.
    Spent,
}

/// What a wrapper proved in its hello (the shell checks the HMACs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    LaunchToken {
        valid: bool,
    },
    ResumeKey {
        valid: bool,
    },
    /// A signature of a fresh challenge by the minion's accepted Salt key.
    MinionKey {
        valid: bool,
    },
    None,
}

/// What the shell must do after a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Tell the wrapper on this connection to kill its command.
    Kill(ConnId),
    /// Tell the wrapper on this connection to stop (suspend) its command.
    Suspend(ConnId),
    /// Tell the wrapper on this connection to continue its command.
    Resume(ConnId),
    /// Persist the operator's suspend (true) or resume (false) of the target.
    StoreSuspended(bool),
    /// Acknowledge output up to this seq to the wrapper.
    Ack(ConnId, u64),
    /// Tell the wrapper its outcome is recorded.
    Done(ConnId),
    /// Close a connection (replaced by a newer one).
    Close(ConnId),
    /// db could not store output: its wrapper resends from `from_seq` later (`refused.rs`).
    HoldOutput {
        conn: ConnId,
        from_seq: u64,
        retry_after: Duration,
    },
    /// Persist a new state (and start time) of the target.
    StoreState(TargetState, Option<Millis>),
    /// Persist how the job's limits were applied.
    StoreLimits(String),
    /// Persist that the launch token is spent, with the hash of the session's resume key
    /// (the welcome waits for this write).
    StoreTokenSpent,
    /// Record the outcome (the shell writes it and calls [`Target::recorded`]).
    /// `waited`: the exit waited for its output to be stored (so its write is due at
    /// once: it already waited as long as the output's write could be held).
    RecordOutcome {
        outcome: Outcome,
        ended: Millis,
        waited: bool,
    },
    /// The wrapper of a target declared lost came back: reopen it.
    Reconciled,
    /// The run's Workflow should look at its targets again.
    WakeRun,
    /// A failed outcome is retried: persist attempt `attempt` (the target is pending
    /// again, its output bookkeeping restarts) and keep `previous` in the attempts' history.
    StoreRetry { attempt: u32, previous: Outcome },
    /// Its minion did not answer: persist `waiting_unreachable` (reason unreachable,
    /// ended then; the exit code comes with the final outcome or the next attempt).
    StoreWaiting { ended: Millis },
}

/// Why a hello is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: RejectCode,
    pub message: String,
}

/// What a welcome carries besides the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Welcomed {
    pub acked_seq: u64,
    pub effects: Vec<Effect>,
}

/// What a kill request does to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KillAction {
    /// Already settled or being recorded: nothing.
    None,
    /// Sent to its wrapper now.
    Sent(Vec<Effect>),
    /// Picked up once, disconnected now: delivered when it reconnects.
    Deferred,
    /// Never picked up: it will not run at all (recorded as canceled).
    Canceled(Vec<Effect>),
}

/// One target of a run in flight.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    batch: usize,
    phase: Phase,
    /// The connection of its wrapper, while one is open.
    conn: Option<ConnId>,
    token: Token,
    /// SHA-256 (hex) of the resume key created at the token's welcome: a reconnect proves
    /// the session with that key (Salt wrappers sign a new challenge instead).
    resume_hash: Option<String>,
    /// Output up to this seq is committed (and acknowledged).
    acked_seq: u64,
    /// db has refused output since it last stored some (`refused.rs`).
    refusals: Option<refusals::Refusals>,
    /// A user kill is to be delivered (now or when the wrapper reconnects).
    kill_wanted: bool,
    /// Suspended by an operator (`target/suspend.rs`): persisted and shown.
    suspended: bool,
    /// Its wrapper said it can suspend (`hello.capabilities`).
    can_suspend: bool,
    started: Option<Millis>,
    ended: Option<Millis>,
    /// 1 for the first attempt; a retry (`retries`) adds one.
    attempt: u32,
    /// Pending, held back by `max_running_per_machine`: why (`throttle.rs`).
    throttled: Option<String>,
    /// How the job's resource limits were applied, as its wrapper said at `started`.
    limits: Option<String>,
    /// The server whose master launched it (several masters on one database).
    server: Option<String>,
}

fn refuse(code: RejectCode, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

impl Target {
    /// Where it is in its life (changed only by this module's transitions).
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Not launched yet (and not decided).
    pub(crate) fn is_pending(&self) -> bool {
        self.phase == Phase::Pending
    }

    /// A target of batch 0 left out of its run because its machine was in maintenance
    /// when the run was resolved.
    pub(crate) fn in_maintenance() -> Target {
        Target {
            phase: Phase::SkippedMaintenance,
            ..Target::new(0)
        }
    }

    /// Restored while waiting for its minion (`retry_unreachable`): the window starts
    /// over at `now` (its deadline is not stored).
    pub(crate) fn restart_waiting(&mut self, now: Instant, window: Duration) {
        if self.is_waiting() {
            self.phase = Phase::WaitingUnreachable {
                until: now + window,
            };
        }
    }

    pub(crate) fn new(batch: usize) -> Target {
        Target {
            batch,
            phase: Phase::Pending,
            conn: None,
            token: Token::Unused,
            resume_hash: None,
            acked_seq: 0,
            refusals: None,
            kill_wanted: false,
            suspended: false,
            can_suspend: false,
            started: None,
            ended: None,
            attempt: 1,
            throttled: None,
            limits: None,
            server: None,
        }
    }

    /// Launched through `server`'s master (several masters on one database): shown with
    /// the target; the caller stores it.
    pub(crate) fn launched_through(&mut self, server: String) {
        self.server = Some(server);
    }

    /// Settled: finished or never to run.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self.phase, Phase::Finished(_) | Phase::SkippedMaintenance)
    }

    /// Settled or being recorded: no new outcome can be decided.
    pub(crate) fn is_decided(&self) -> bool {
        self.is_settled() || matches!(self.phase, Phase::Finishing { .. })
    }

    /// Server clock of the last frame from its wrapper.
    pub(crate) fn last_seen(&self) -> Option<Instant> {
        match &self.phase {
            Phase::PickedUp { last_seen, .. } => Some(*last_seen),
            _ => None,
        }
    }

    /// No wrapper has picked it up yet (the pick-up deadline applies to it).
    pub(crate) fn awaiting_pickup(&self) -> bool {
        matches!(self.phase, Phase::Pending | Phase::Launching)
            && self.conn.is_none()
            && self.throttled.is_none()
    }

    /// Its batch starts: the wrapper is being launched.
    pub(crate) fn launch(&mut self) -> Vec<Effect> {
        if self.phase != Phase::Pending {
            return Vec::new(); // killed before its batch came, or launched before a restart
        }
        self.phase = Phase::Launching;
        self.throttled = None;
        vec![Effect::StoreState(TargetState::Launching, None)]
    }

    /// Its machine is in maintenance when its batch starts.
    pub(crate) fn skip_for_maintenance(&mut self) -> Vec<Effect> {
        if self.phase != Phase::Pending {
            return Vec::new();
        }
        self.phase = Phase::SkippedMaintenance;
        vec![Effect::StoreState(TargetState::SkippedMaintenance, None)]
    }

    /// A wrapper says hello on `conn` at `now`. A launch token works while it is unused
    /// (or presented on a connection that went away before confirming it); a resume key
    /// always. A wrapper of a target declared lost that proves its session reopens it.
    pub(crate) fn hello(
        &mut self,
        now: Instant,
        conn: ConnId,
        credential: Credential,
    ) -> Result<Welcomed, Refusal> {
        let by_token = matches!(credential, Credential::LaunchToken { .. });
        let authentic = match credential {
            Credential::LaunchToken { valid } => valid && self.token == Token::Unused,
            Credential::ResumeKey { valid } | Credential::MinionKey { valid } => valid,
            Credential::None => false,
        };
        if !authentic {
            return Err(refuse(
                RejectCode::BadToken,
                "the token, resume key or minion key proof is not valid for this run and machine (a launch token works once)",
            ));
        }
        let mut effects = Vec::new();
        // A target declared lost, recorded so or still being recorded, whose wrapper
        // proves its session: reopened (the wrapper resends its exit if it has one).
        let lost = Some(TargetReason::Lost);
        let lost_returning = !by_token
            && match &self.phase {
                Phase::Finished(outcome) => outcome.reason == lost,
                Phase::Finishing { outcome, .. } => outcome.reason == lost,
                _ => false,
            };
        // An outcome decided and not stored yet: its wrapper is welcomed (its resent
        // exit changes nothing) and gets `done` once the outcome is stored.
        let recording = !lost_returning && matches!(self.phase, Phase::Finishing { .. });
        if lost_returning {
            self.phase = Phase::PickedUp {
                running: true,
                last_seen: now,
                grace_until: None,
                exit: None,
            };
            self.ended = None;
            effects.push(Effect::Reconciled);
            effects.push(Effect::StoreState(TargetState::Running, None));
        } else if self.is_decided() && !recording {
            return Err(refuse(
                RejectCode::Finished,
                "the outcome is already recorded",
            ));
        }
        match &mut self.phase {
            Phase::PickedUp { last_seen, .. } => *last_seen = now,
            Phase::Finishing { .. } => {}
            phase => {
                *phase = Phase::PickedUp {
                    running: false,
                    last_seen: now,
                    grace_until: None,
                    exit: None,
                };
                // Visible: a wrapper has the run, its command has not started yet.
                effects.push(Effect::StoreState(TargetState::PickedUp, None));
            }
        }
        if by_token {
            self.token = Token::Spent;
            effects.push(Effect::StoreTokenSpent);
        } else if matches!(credential, Credential::MinionKey { .. }) {
            // No token exists; a session was opened (recorded with the welcome).
            self.token = Token::Spent;
        }
        if let Some(old) = self.conn.replace(conn) {
            effects.push(Effect::Close(old));
        }
        if self.kill_wanted {
            effects.push(Effect::Kill(conn));
        }
        Ok(Welcomed {
            acked_seq: self.acked_seq,
            effects,
        })
    }

    /// Any frame from the wrapper: its liveness clock.
    pub(crate) fn heard(&mut self, now: Instant) -> Vec<Effect> {
        if let Phase::PickedUp { last_seen, .. } = &mut self.phase {
            *last_seen = now;
        }
        Vec::new()
    }

    /// The token welcome created a session: the hash of its resume key, proven by a
    /// reconnect (`welcome.rs`).
    pub(crate) fn session_opened(&mut self, resume_hash: String) -> Vec<Effect> {
        self.resume_hash = Some(resume_hash);
        Vec::new()
    }

    /// The spent token and its session could not be recorded, so no welcome went out:
    /// the token may be presented again.
    pub(crate) fn session_not_stored(&mut self, conn: ConnId) {
        self.token = Token::Unused;
        self.resume_hash = None;
        if self.conn == Some(conn) {
            self.conn = None;
        }
        if matches!(self.phase, Phase::PickedUp { running: false, .. }) {
            self.phase = Phase::Launching;
        }
    }

    /// The wrapper started the command at `now_ms`.
    /// The command started at `now_ms`, its limits applied as `limits` says.
    pub(crate) fn command_started(
        &mut self,
        now_ms: Millis,
        limits: Option<String>,
    ) -> Vec<Effect> {
        let Phase::PickedUp { running, .. } = &mut self.phase else {
            return Vec::new();
        };
        *running = true;
        let started = *self.started.get_or_insert(now_ms);
        let mut effects = vec![
            Effect::StoreState(TargetState::Running, Some(started)),
            Effect::WakeRun,
        ];
        if let Some(text) = limits.filter(|l| self.limits.as_ref() != Some(l)) {
            self.limits = Some(text.clone());
            effects.push(Effect::StoreLimits(text));
        }
        effects
    }

    /// The wrapper on `conn` says its command ended; the target settles once the output up
    /// to `exit.end_seq` is stored.
    pub(crate) fn exited(
        &mut self,
        conn: ConnId,
        exit: PendingExit,
        now_ms: Millis,
    ) -> Vec<Effect> {
        if self.is_settled() {
            // Already recorded (a resent `exited`): confirm again.
            return vec![Effect::Done(conn)];
        }
        if let Phase::PickedUp { exit: pending, .. } = &mut self.phase {
            *pending = Some(exit);
        }
        self.settle_if_complete(now_ms)
    }

    /// db committed the output up to `contiguous`.
    pub(crate) fn output_stored(&mut self, contiguous: u64, now_ms: Millis) -> Vec<Effect> {
        let mut effects = Vec::new();
        if contiguous > self.acked_seq {
            self.acked_seq = contiguous;
            self.output_stored_again();
            if let Some(conn) = self.conn {
                effects.push(Effect::Ack(conn, contiguous));
            }
        }
        effects.extend(
            self.settle_if_complete(now_ms)
                .into_iter()
                .map(|e| match e {
                    Effect::RecordOutcome { outcome, ended, .. } => Effect::RecordOutcome {
                        outcome,
                        ended,
                        waited: true,
                    },
                    other => other,
                }),
        );
        effects
    }

    fn settle_if_complete(&mut self, now_ms: Millis) -> Vec<Effect> {
        match &self.phase {
            Phase::PickedUp {
                exit: Some(exit), ..
            } if self.acked_seq >= exit.end_seq => {
                let (reason, code) = (exit.reason, exit.code);
                self.finish(reason, code, now_ms)
            }
            _ => Vec::new(),
        }
    }

    /// The connection `conn` closed.
    pub(crate) fn gone(&mut self, conn: ConnId) {
        if self.conn == Some(conn) {
            self.conn = None;
        }
    }

    /// Decide the outcome: the one way into `Finishing`. Nothing once decided.
    pub(crate) fn finish(
        &mut self,
        reason: TargetReason,
        code: Option<i32>,
        now_ms: Millis,
    ) -> Vec<Effect> {
        if self.is_decided() {
            return Vec::new();
        }
        let outcome = Outcome {
            reason: Some(reason),
            code,
        };
        self.phase = Phase::Finishing {
            outcome,
            was: self.state(),
        };
        self.suspended = false;
        self.ended = Some(now_ms);
        vec![Effect::RecordOutcome {
            outcome,
            ended: now_ms,
            waited: false,
        }]
    }

    /// An operator kills this target.
    pub(crate) fn kill(&mut self, now_ms: Millis) -> KillAction {
        if self.is_decided() {
            return KillAction::None;
        }
        self.kill_wanted = true;
        match (self.conn, &self.phase) {
            (Some(conn), _) => KillAction::Sent(vec![Effect::Kill(conn)]),
            (None, Phase::PickedUp { .. }) => KillAction::Deferred,
            // Its command never started: recorded as canceled, not killed (no exit code).
            (None, _) => KillAction::Canceled(self.finish(TargetReason::Canceled, None, now_ms)),
        }
    }
}
