//! What the wrapper does with each message from the server: `welcome` (first, or again
//! after a reconnect), `go`, `cancel`, `kill`, `suspend`, `resume`, `ack`, `done` and
//! rejections. `suspend` and `resume` act on a running command in any phase of the link
//! (a server reconciling the state may send them before its welcome) and are answered
//! with a heartbeat saying the new state. A rejection
//! saying the server does not know the run ends a wrapper that has not started its
//! command, but not one whose command runs (`patience`). Servers tell every hello that
//! proved nothing `unknown_run` with one wording, whatever the reason (older servers said
//! `bad_token` for a wrong credential): the two codes are handled alike, so a wrapper
//! acts the same with either server. No message that ends the run
//! for the server is ignored in any phase: `done` before `exited` ends the wrapper too
//! (a running command is killed), and one before the welcome is acted on after it.

use std::time::{Duration, Instant};

use super::{Phase, Session};
use crate::wire::wrapper::{ExitReason, JobSpec, KillReason, RejectCode, ServerMsg, WrapperMsg};
use crate::wrapper::error::WrapperError;
use crate::wrapper::hold::OutputHold;

impl Session {
    pub(super) fn on_message(&mut self, now: Instant, msg: ServerMsg) {
        match msg {
            ServerMsg::Challenge { nonce } => self.on_challenge(now, &nonce),
            ServerMsg::Welcome {
                job,
                resume_key,
                acked_seq,
                wait_for_go,
                slot_in_ms,
                compression,
            } => {
                // Each welcome says it anew: a reconnect may reach another server.
                self.compress_output = compression.is_some();
                let staged = wait_for_go.then(|| slot_in_ms.map(Duration::from_millis));
                self.on_welcome(now, *job, resume_key, acked_seq, staged)
            }
            ServerMsg::Reject { code, message } => {
                if code.is_transient() {
                    self.link_down(now, &format!("hub asks to retry later: {message}"));
                } else if self.started.is_some()
                    && matches!(code, RejectCode::UnknownRun | RejectCode::BadToken)
                {
                    // Another server (another state directory, another secret) may
                    // answer on this address for a while; the command's output is only
                    // safe with the server that launched it, so keep it and retry. (A
                    // server that knows the run and has recorded its outcome says
                    // `finished` to this wrapper, which proves its session: that ends it.)
                    let why = format!(
                        "the server does not know run {} ({code:?}: {message}); the \
                         command keeps its output and the wrapper retries",
                        self.settings.run
                    );
                    self.link_down(now, &why);
                } else {
                    log::error!("rejected by the hub ({code:?}): {message}");
                    self.give_up(now, WrapperError::Rejected { code, message });
                }
            }
            ServerMsg::Kill { .. } | ServerMsg::Cancel { .. } | ServerMsg::Done {}
                if !self.welcomed =>
            {
                log::info!("{msg:?} before the welcome: acted on once welcomed");
                self.early_stop = Some(msg);
            }
            ServerMsg::Suspend {} => self.set_suspended(now, true),
            ServerMsg::Resume {} => self.set_suspended(now, false),
            _ if !self.welcomed => log::warn!("ignoring {msg:?} before welcome"),
            ServerMsg::Ack { seq } => self.on_ack(now, seq),
            ServerMsg::OutputHeld {
                from_seq,
                retry_after_ms,
            } => self.on_output_held(now, from_seq, Duration::from_millis(retry_after_ms)),
            ServerMsg::Go {} => {
                if matches!(self.phase, Phase::AwaitGo) {
                    self.begin_start(now);
                }
            }
            ServerMsg::Cancel { reason } => {
                log::info!("canceled by the hub: {reason}");
                match &self.phase {
                    Phase::AwaitGo | Phase::Splay(_) => {
                        self.finish(now, None, None, ExitReason::Canceled)
                    }
                    Phase::Running(_) => {
                        let grace = self.kill_grace();
                        self.begin_kill(now, ExitReason::Killed, grace, "canceled by the hub");
                    }
                    _ => {}
                }
            }
            ServerMsg::Kill { reason, grace_s } => {
                let why = match reason {
                    KillReason::Timeout => ExitReason::Timeout,
                    KillReason::User | KillReason::Maintenance => ExitReason::Killed,
                };
                match &self.phase {
                    Phase::AwaitGo | Phase::Splay(_) => self.finish(now, None, None, why),
                    Phase::Running(_) => {
                        self.begin_kill(now, why, grace_s, &format!("kill ({reason:?})"))
                    }
                    _ => {}
                }
            }
            ServerMsg::Done {} => self.on_done(now),
        }
    }

    /// `ack`: output up to `seq` is stored; one that moves on ends an output hold.
    fn on_ack(&mut self, now: Instant, seq: u64) {
        let before = self.out.acked();
        self.out.ack(seq);
        if self.out.acked() > before
            && let Some(hold) = self.output_hold.take()
        {
            log::info!(
                "the server stores output again (held for {:?})",
                hold.held_for(now)
            );
        }
    }

    /// `output_held`: the server could not store output from `from_seq` on. Keep it,
    /// send it again from there once the wait is over (`hold`); the link stays.
    fn on_output_held(&mut self, now: Instant, from_seq: u64, retry_after: Duration) {
        self.out.rewind(from_seq.saturating_sub(1));
        match &mut self.output_hold {
            Some(hold) => {
                log::debug!(
                    "output from seq {from_seq} still not stored; again in {retry_after:?}"
                );
                hold.renew(now, retry_after);
            }
            None => {
                let (mem, spooled) = self.out.buffered_bytes();
                log::warn!(
                    "the server could not store output from seq {from_seq}; keeping it \
                     ({mem} bytes in memory, {spooled} spooled) and sending it again in \
                     {retry_after:?}"
                );
                self.output_hold = Some(OutputHold::new(now, retry_after));
            }
        }
    }

    /// `suspend` (`true`) or `resume`: stop or continue a running command, then say the
    /// state at once (a heartbeat), also when nothing changed, so the server learns it.
    fn set_suspended(&mut self, now: Instant, suspend: bool) {
        let Phase::Running(r) = &mut self.phase else {
            log::info!("ignoring a suspend or resume: no command is running");
            return;
        };
        if suspend {
            r.suspend(now, &mut self.out);
        } else {
            r.resume(now, &mut self.out);
        }
        let suspended = r.is_suspended();
        self.ctrl.push_back(WrapperMsg::Heartbeat {
            at: crate::wire::records::now_ms(),
            suspended,
        });
    }

    /// `done`: the server has recorded this target's outcome and takes nothing more for
    /// it. After `exited` that is the normal end. Before it, the server decided the
    /// outcome without the wrapper (a launch it counted as failed, a pick-up deadline): a
    /// command not started never starts, a running one is killed, and the wrapper ends.
    /// Ignoring it would leave the wrapper on a link whose server no longer serves the
    /// run, kept open by the hub's answers to its pings.
    fn on_done(&mut self, now: Instant) {
        let run = self.settings.run;
        let finished = |message: String| WrapperError::Rejected {
            code: RejectCode::Finished,
            message,
        };
        match &self.phase {
            Phase::Finished(_) => {
                if self.exited_sent_at.is_some() {
                    log::info!("the hub recorded the exit; done");
                } else {
                    log::warn!("the hub recorded an outcome before this exit reached it; done");
                }
                self.outcome = Some(Ok(()));
            }
            Phase::Running(_) => {
                let why = format!(
                    "the server recorded the outcome of run {run} while its command ran; \
                     the command is stopped"
                );
                log::warn!("{why}");
                self.give_up(now, finished(why));
            }
            Phase::AwaitWelcome | Phase::AwaitGo | Phase::Splay(_) => {
                let why = format!(
                    "the server recorded the outcome of run {run} before its command \
                     started; nothing was run"
                );
                log::warn!("{why}");
                self.give_up(now, finished(why));
            }
        }
    }

    /// Sign the hub's challenge with the minion key and send the proof. A key that
    /// cannot sign ends the wrapper: no server would ever accept it.
    fn on_challenge(&mut self, now: Instant, nonce: &str) {
        let Some(key) = self.minion_key.clone() else {
            log::warn!("ignoring a challenge: this wrapper proves itself with a token");
            return;
        };
        match crate::minion_key::sign_proof(&key, nonce, self.settings.run, &self.settings.machine)
        {
            Ok(signature) => {
                let proof = WrapperMsg::Proof { signature };
                self.link.send_msg(&proof, &mut self.link_events);
                self.link.flush(&mut self.link_events);
            }
            Err(e) => self.give_up(now, WrapperError::MinionKey(e)),
        }
    }

    /// `staged` is `Some(time to the slot, if the server said)` for `wait_for_go`.
    fn on_welcome(
        &mut self,
        now: Instant,
        job: JobSpec,
        resume_key: String,
        acked_seq: u64,
        staged: Option<Option<Duration>>,
    ) {
        let wait_for_go = staged.is_some();
        self.patience
            .welcomed(now, wait_for_go, staged.and_then(|slot_in| slot_in));
        log::info!(
            "welcome: job {:?}, hub holds output up to seq {acked_seq}",
            job.name
        );
        self.welcomed = true;
        self.hello_deadline = None;
        self.resume_key = Some(resume_key);
        self.token = None;
        self.rotation.welcomed();
        self.out.rewind(acked_seq);
        self.output_hold = None;
        self.ctrl.clear();
        self.exited_sent_at = None;
        if let Some(started) = &self.started {
            // The hub may have missed it; it is a fact, so resending is harmless.
            self.ctrl.push_back(started.clone());
        }
        if self.job.is_none() {
            self.job = Some(job);
            self.heartbeat_at = Some(now);
            if wait_for_go {
                self.phase = Phase::AwaitGo;
            } else {
                self.begin_start(now);
            }
        } else if !wait_for_go && matches!(self.phase, Phase::AwaitGo) {
            // The slot came while the link was down: `go` went to nobody, and a server
            // that no longer asks this wrapper to wait means start.
            log::info!("welcomed back after the slot without waiting: starting");
            self.begin_start(now);
        }
        if let Some(stop) = self.early_stop.take() {
            self.on_message(now, stop);
        }
    }
}
