//! The command while it runs: its pipes, its exit, kill escalation and its timeout.
//!
//! The session owns one [`Running`] between `started` and `exited` and asks it, on every
//! loop iteration, to read its pipes and to check timers and the child. The rules that
//! close the original wrapper's holes live here:
//! - both pipes are read until EOF whatever the hub link does;
//! - after the shell exits, pipes a background process still holds are read for at
//!   most `drain_grace`, then dropped (no blocking read after exit);
//! - kill and timeout send TERM to the whole process group, KILL after the grace, and
//!   the end is reported only once the group is gone or KILL was sent;
//! - the overlap lock is held exactly as long as this value lives;
//! - `suspend` stops the group (STOP), `resume` continues it (CONT); while suspended the
//!   timeout either keeps counting or stands still and then moves by the time spent
//!   suspended (`timeout_counts_suspended`); a kill of a suspended group sends CONT
//!   right after TERM, so the processes can act on the TERM before the KILL.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use mio::unix::pipe::Receiver;
use mio::{Interest, Registry, Token};
use nix::fcntl::Flock;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::command::{self, command_env, exit_fields, kill_group, resolve_user, spawn};
use super::files::{self, OverlapLock};
use super::limits::{Identity, Plan, Way};
use super::outbuf::OutputBuffer;
use crate::wire::wrapper::{ExitReason, JobSpec, Stream};

/// Reads per pipe per loop iteration (one buffer each) before the link gets its turn.
const READS_PER_TURN: usize = 16;

/// Why the command did not start; the text goes to the hub as stderr.
pub(super) enum StartFailure {
    LockBusy(String),
    SpawnFailed(String),
}

/// How the command ended: the fields of `exited`.
pub(super) struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: ExitReason,
}

struct Pipe {
    rx: Receiver,
    stream: Stream,
    ready: bool,
}

struct Kill {
    reason: ExitReason,
    kill_at: Instant,
    killed: bool,
}

pub(super) struct Running {
    child: Child,
    pgid: Pid,
    pipes: Vec<Pipe>,
    status: Option<ExitStatus>,
    kill: Option<Kill>,
    timeout_at: Option<Instant>,
    /// Since when the group is stopped by a `suspend`.
    suspended_since: Option<Instant>,
    /// The job's `timeout_counts_suspended`.
    timeout_counts_suspended: bool,
    drain_until: Option<Instant>,
    /// The job's limits as applied (dropped with `Running`, once the command ended:
    /// that removes its control group).
    limits: Plan,
    _lock: Option<Flock<File>>,
}

/// Identity of the run, for the command's environment and the lock name.
pub(super) struct RunFacts<'a> {
    pub run: u64,
    pub machine: &'a str,
    pub lock_dir: &'a Path,
}

impl Running {
    /// Takes the overlap lock if asked, resolves the user, spawns the command and
    /// registers its pipes under `tokens` (stdout, stderr).
    pub(super) fn start(
        job: &JobSpec,
        facts: &RunFacts<'_>,
        registry: &Registry,
        tokens: (Token, Token),
        now: Instant,
    ) -> Result<Running, StartFailure> {
        let lock = if job.overlap_lock {
            // One lock per job and machine: the local executor runs several machines
            // on one host, and each is its own target.
            let lock_name = format!("{}@{}", job.name, facts.machine);
            match files::try_overlap_lock(facts.lock_dir, &lock_name) {
                Ok(OverlapLock::Held(lock)) => Some(lock),
                Ok(OverlapLock::Busy(path)) => {
                    return Err(StartFailure::LockBusy(format!(
                        "job {:?} is already running on this host (lock {} is held); \
                         not started",
                        job.name,
                        path.display()
                    )));
                }
                Err(e) => return Err(StartFailure::SpawnFailed(e.to_string())),
            }
        } else {
            None
        };
        let run_as = match job
            .user
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(resolve_user)
        {
            Some(Ok(u)) => Some(u),
            Some(Err(e)) => return Err(StartFailure::SpawnFailed(e.to_string())),
            None => None,
        };
        let env = command_env(
            std::env::vars_os(),
            job,
            facts.run,
            facts.machine,
            run_as.as_ref(),
        );
        let identity = run_as.as_ref().map(|u| Identity {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        });
        let limits = Plan::prepare(&job.limits, facts.run, facts.machine, Way::Auto, identity);
        if let Some(text) = &limits.applied {
            log::info!("limits: {text}");
        }
        // On any failure below, dropping `limits` removes the control group made for it.
        let mut sp = spawn(job, env, run_as.as_ref(), &limits)
            .map_err(|e| StartFailure::SpawnFailed(e.to_string()))?;
        if let Err(e) = registry
            .register(&mut sp.stdout, tokens.0, Interest::READABLE)
            .and_then(|()| registry.register(&mut sp.stderr, tokens.1, Interest::READABLE))
        {
            kill_group(sp.pgid, Signal::SIGKILL);
            let _ = sp.child.wait();
            return Err(StartFailure::SpawnFailed(format!(
                "could not watch the output pipes: {e}"
            )));
        }
        let pipe = |rx, stream| Pipe {
            rx,
            stream,
            ready: true,
        };
        Ok(Running {
            child: sp.child,
            pgid: sp.pgid,
            pipes: vec![
                pipe(sp.stdout, Stream::Stdout),
                pipe(sp.stderr, Stream::Stderr),
            ],
            status: None,
            kill: None,
            timeout_at: (job.timeout_s > 0).then(|| now + Duration::from_secs(job.timeout_s)),
            suspended_since: None,
            timeout_counts_suspended: job.timeout_counts_suspended,
            drain_until: None,
            limits,
            _lock: lock,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the job's limits were applied (`None` without limits), for `started`.
    pub(super) fn limits_applied(&self) -> Option<String> {
        self.limits.applied.clone()
    }

    pub(super) fn mark_ready(&mut self, stream: Stream) {
        for p in self.pipes.iter_mut().filter(|p| p.stream == stream) {
            p.ready = true;
        }
    }

    /// Reads what the pipes hold (bounded), appending to `out`; EOF drops a pipe.
    pub(super) fn read_pipes(&mut self, out: &mut OutputBuffer, buf: &mut [u8], now: Instant) {
        self.pipes.retain_mut(|pipe| {
            for _ in 0..READS_PER_TURN {
                if !pipe.ready {
                    break;
                }
                match pipe.rx.read(buf) {
                    Ok(0) => return false,
                    Ok(n) => out.push(pipe.stream, &buf[..n], now),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => pipe.ready = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("reading the command's {:?} failed: {e}", pipe.stream);
                        return false;
                    }
                }
            }
            true
        });
    }

    /// Whether a pipe still has unread data (the loop must not sleep).
    pub(super) fn has_ready_pipe(&self) -> bool {
        self.pipes.iter().any(|p| p.ready)
    }

    pub(super) fn is_killing(&self) -> bool {
        self.kill.is_some()
    }

    /// TERM to the group now, KILL after `grace_s`. A second request can only shorten
    /// the grace. The note goes to the command's stderr stream.
    pub(super) fn begin_kill(
        &mut self,
        now: Instant,
        reason: ExitReason,
        grace_s: u64,
        why: &str,
        out: &mut OutputBuffer,
    ) {
        let kill_at = now + Duration::from_secs(grace_s);
        if let Some(k) = &mut self.kill {
            k.kill_at = k.kill_at.min(kill_at);
            return;
        }
        log::info!(
            "{why}: TERM to process group {}, KILL in {grace_s} s",
            self.pgid
        );
        let note = format!(
            "\n[saltpeter-wrapper: {why}; sending TERM to the job's processes, \
             KILL after {grace_s} s]\n"
        );
        out.push(Stream::Stderr, note.as_bytes(), now);
        kill_group(self.pgid, Signal::SIGTERM);
        if self.suspended_since.is_some() {
            // A stopped process does not act on TERM until it is continued.
            kill_group(self.pgid, Signal::SIGCONT);
            self.suspended_since = None;
        }
        self.kill = Some(Kill {
            reason,
            kill_at,
            killed: false,
        });
    }

    /// KILL to the group at once (the wrapper itself is going away).
    pub(super) fn kill_now(&mut self) {
        kill_group(self.pgid, Signal::SIGKILL);
    }

    /// Whether the group is stopped by a `suspend`.
    pub(super) fn is_suspended(&self) -> bool {
        self.suspended_since.is_some()
    }

    /// `suspend`: STOP to the group. Nothing while it is being killed or already
    /// stopped; returns whether the state changed.
    pub(super) fn suspend(&mut self, now: Instant, out: &mut OutputBuffer) -> bool {
        if self.suspended_since.is_some() || self.kill.is_some() || self.status.is_some() {
            return false;
        }
        log::info!("suspend: STOP to process group {}", self.pgid);
        kill_group(self.pgid, Signal::SIGSTOP);
        self.suspended_since = Some(now);
        let note = "\n[saltpeter-wrapper: suspended by the server (SIGSTOP)]\n";
        out.push(Stream::Stderr, note.as_bytes(), now);
        true
    }

    /// `resume`: CONT to the group; the timeout moves by the time suspended unless the
    /// job counts it. Returns whether the state changed.
    pub(super) fn resume(&mut self, now: Instant, out: &mut OutputBuffer) -> bool {
        let Some(since) = self.suspended_since.take() else {
            return false;
        };
        let stopped = now.saturating_duration_since(since);
        if !self.timeout_counts_suspended {
            self.timeout_at = self.timeout_at.map(|t| t + stopped);
        }
        log::info!(
            "resume: CONT to process group {} after {stopped:?} suspended",
            self.pgid
        );
        kill_group(self.pgid, Signal::SIGCONT);
        let note = format!(
            "\n[saltpeter-wrapper: resumed by the server (SIGCONT) after {:.1} s suspended]\n",
            stopped.as_secs_f64()
        );
        out.push(Stream::Stderr, note.as_bytes(), now);
        true
    }

    /// The timeout deadline as it stands now: none while suspended with a paused clock.
    fn live_timeout(&self) -> Option<Instant> {
        match self.suspended_since {
            Some(_) if !self.timeout_counts_suspended => None,
            _ => self.timeout_at,
        }
    }

    /// Fires due timers; returns true when the job's timeout has just been reached
    /// (the caller then starts the kill with reason `timeout`).
    pub(super) fn on_timers(&mut self, now: Instant) -> bool {
        if let Some(k) = &mut self.kill
            && !k.killed
            && k.kill_at <= now
        {
            log::warn!("grace over: KILL to process group {}", self.pgid);
            kill_group(self.pgid, Signal::SIGKILL);
            k.killed = true;
        }
        if self.drain_until.is_some_and(|t| t <= now) && !self.pipes.is_empty() {
            log::warn!("the command exited but its pipes are still open; stop reading");
            self.pipes.clear();
        }
        self.kill.is_none() && self.live_timeout().is_some_and(|t| t <= now)
    }

    /// The nearest instant this value needs the loop to wake up for.
    pub(super) fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut next = [self.live_timeout(), self.drain_until, None, None];
        if let Some(k) = &self.kill {
            next[2] = (!k.killed).then_some(k.kill_at);
            if self.status.is_some() {
                // Waiting for the rest of the group to die: look again soon.
                next[3] = Some(now + Duration::from_millis(100));
            }
        }
        next.into_iter().flatten().min()
    }

    /// Reaps the child if it exited; returns how the run ended once everything is
    /// settled (pipes drained or given up, and after a kill the group gone or KILLed).
    pub(super) fn check_end(&mut self, now: Instant, drain_grace: Duration) -> Option<Ended> {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    log::info!("command exited: {status}");
                    self.status = Some(status);
                    if !self.pipes.is_empty() {
                        self.drain_until = Some(now + drain_grace);
                    }
                }
                Ok(None) => return None,
                Err(e) => {
                    log::error!("could not wait for the command: {e}");
                    return None;
                }
            }
        }
        let status = self.status?;
        let group_settled = match &self.kill {
            None => true,
            Some(k) => k.killed || !command::group_alive(self.pgid),
        };
        if !self.pipes.is_empty() || !group_settled {
            return None;
        }
        let (code, signal) = exit_fields(status);
        let reason = match &self.kill {
            Some(k) => k.reason,
            // Killed, or a shell whose child was killed (128 + KILL), and the group counts
            // an OOM kill: its memory limit. A command that survived the kill of one of
            // its processes ends as it says.
            None if (signal == Some(9) || code == Some(137)) && self.limits.memory_killed() => {
                log::warn!("the command was killed by its memory limit (memory_max)");
                ExitReason::MemoryLimit
            }
            None => ExitReason::Exit,
        };
        Some(Ended {
            code,
            signal,
            reason,
        })
    }
}
