//! The wrapper's one loop: a run's life from `hello` to `done`.
//!
//! Phases: `AwaitWelcome` -> (`AwaitGo` when pre-staged) -> (`Splay`) -> `Running` ->
//! `Finished` (the `exited` message is kept and resent on every new connection until
//! `done`). Independently the hub link goes down and up: after each loss a reconnect is
//! scheduled with backoff, `hello` presents the `resume_key`, and the `welcome`'s
//! `acked_seq` rewinds the output buffer so exactly the missing frames are resent.
//! Output the server could not store is held on the open link (`output_held`, `hold`)
//! and resent from the seq it names, without a reconnect.
//! Without a server that knows the run, `patience` bounds the wait: a wrapper that has
//! not started its command gives up at its slot plus the stage grace; one whose command
//! runs keeps retrying up to `give_up`. Server messages are handled in `server_msgs`,
//! the link's life in `hub_link`, deadlines in `timers`.
//!
//! No wrapper ever sleeps with nothing to wake it (`standing`): at the end of every
//! iteration it is served (welcomed on an open link), setting a link up (connect,
//! handshake or hello, each with a deadline), waiting for a scheduled reconnect, killing
//! its command before it gives up, or ending. A served link is watched at the
//! application level too: the hub answers pings whatever the server behind it knows, so
//! a `go` owed by the slot plus the grace, or a `done` owed after `exited`, that does not
//! come drops the link and the wrapper asks again (`timers`).
//!
//! Every iteration: poll (timeout = the nearest deadline), note readiness, read the
//! pipes (bounded per iteration so the hub socket is never starved), handle hub
//! messages, fire due timers, reap the child, then pump control messages and frames into
//! the link until its write buffer refuses more. The pipes are read in every phase and
//! whatever the link does, so the command never blocks on a full pipe.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

mod hub_link;
mod server_msgs;
mod standing;
#[cfg(test)]
mod tests;
mod timers;

use super::error::WrapperError;
use super::files;
use super::hold::OutputHold;
use super::link::{Link, LinkEvent};
use super::outbuf::{OutputBuffer, SpoolFactory};
use super::patience::Patience;
use super::rotation::Rotation;
use super::running::{Ended, RunFacts, Running, StartFailure};
use super::settings::{Backoff, Credential, Options, Settings};
use super::spool::Spool;
use crate::wire::records::now_ms;
use crate::wire::wrapper::{ExitReason, JobSpec, ServerMsg, Stream, WrapperMsg};

const WS: Token = Token(0);
const STDOUT: Token = Token(1);
const STDERR: Token = Token(2);
const SIGNALS: Token = Token(3);

/// Runs the whole protocol for one run; `Ok` once the hub answered `done`.
pub fn run(settings: Settings, opts: Options) -> Result<(), WrapperError> {
    Session::new(settings, opts)?.run_loop()
}

enum Phase {
    AwaitWelcome,
    AwaitGo,
    Splay(Instant),
    Running(Box<Running>),
    Finished(Box<WrapperMsg>),
}

struct Session {
    settings: Settings,
    token: Option<String>,
    /// Salt: the minion key that signs each connection's challenge.
    minion_key: Option<std::path::PathBuf>,
    opts: Options,
    poll: Poll,
    link: Link,
    link_events: Vec<LinkEvent>,
    welcomed: bool,
    /// The welcome took `zstd` output frames (`OutputFrame::encode_for_link`).
    compress_output: bool,
    /// A kill, cancel or done that arrived before the welcome (the server may send one as
    /// soon as it accepts the hello, while the welcome waits for the session to be
    /// recorded): acted on right after the welcome.
    early_stop: Option<ServerMsg>,
    hello_deadline: Option<Instant>,
    /// The server dialled (or the link is on) and the delays between attempts.
    rotation: Rotation,
    addrs: Vec<SocketAddr>,
    next_addr: usize,
    reconnect_at: Option<Instant>,
    out: OutputBuffer,
    /// The server could not store output: frames wait (`hold`).
    output_hold: Option<OutputHold>,
    job: Option<JobSpec>,
    resume_key: Option<String>,
    phase: Phase,
    started: Option<WrapperMsg>,
    ctrl: VecDeque<WrapperMsg>,
    heartbeat_at: Option<Instant>,
    exited_sent_at: Option<Instant>,
    /// How long to wait for a lost server (`patience`).
    patience: Patience,
    abandon: Option<WrapperError>,
    outcome: Option<Result<(), WrapperError>>,
    read_buf: Vec<u8>,
}

impl Session {
    fn new(mut settings: Settings, opts: Options) -> Result<Session, WrapperError> {
        let poll = Poll::new().map_err(WrapperError::Poll)?;
        let (token, minion_key) =
            match std::mem::replace(&mut settings.credential, Credential::Token(String::new())) {
                Credential::Token(token) => (Some(token), None),
                Credential::MinionKey(key) => (None, Some(key)),
            };
        let spool_factory: Option<SpoolFactory> = opts.spool_dir.clone().map(|dir| {
            let tag = settings.run.to_string();
            Box::new(move || {
                match files::ensure_private_dir(&dir).and_then(|()| Spool::create_in(&dir, &tag)) {
                    Ok(sp) => Some(sp),
                    Err(e) => {
                        log::warn!("{e}; output beyond the memory cap will be dropped");
                        None
                    }
                }
            }) as SpoolFactory
        });
        let now = Instant::now();
        Ok(Session {
            token,
            minion_key,
            poll,
            link: Link::new(WS, now),
            link_events: Vec::new(),
            welcomed: false,
            compress_output: false,
            early_stop: None,
            hello_deadline: None,
            rotation: Rotation::new(
                settings.hub.clone(),
                settings.other_hubs.clone(),
                Backoff::new(opts.backoff_base, opts.backoff_max),
            ),
            addrs: Vec::new(),
            next_addr: 0,
            reconnect_at: Some(now),
            out: OutputBuffer::new(opts.limits, spool_factory),
            output_hold: None,
            job: None,
            resume_key: None,
            phase: Phase::AwaitWelcome,
            started: None,
            ctrl: VecDeque::new(),
            heartbeat_at: None,
            exited_sent_at: None,
            patience: Patience::new(now, opts.stage_grace),
            abandon: None,
            outcome: None,
            read_buf: vec![0; opts.limits.frame_max.max(4096)],
            settings,
            opts,
        })
    }

    fn run_loop(mut self) -> Result<(), WrapperError> {
        let mut signals = Signals::new([SIGCHLD, SIGTERM, SIGINT]).map_err(WrapperError::Poll)?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(WrapperError::Poll)?;
        let mut events = Events::with_capacity(64);
        loop {
            if let Some(outcome) = self.outcome.take() {
                self.link.close();
                if let Err(WrapperError::GaveUp(_)) = &outcome {
                    self.leave_unsent_output();
                }
                return outcome;
            }
            let timeout = self.poll_timeout(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != ErrorKind::Interrupted
            {
                return Err(WrapperError::Poll(e));
            }
            let now = Instant::now();
            let mut link_ready = false;
            for ev in events.iter() {
                match ev.token() {
                    WS => link_ready = true,
                    SIGNALS => {
                        let pending: Vec<i32> = signals.pending().collect();
                        self.on_signals(now, &pending);
                    }
                    tok => {
                        if let Phase::Running(r) = &mut self.phase {
                            let stream = if tok == STDOUT {
                                Stream::Stdout
                            } else {
                                Stream::Stderr
                            };
                            r.mark_ready(stream);
                        }
                    }
                }
            }
            if link_ready {
                self.link
                    .on_ready(&self.rotation.current().url, now, &mut self.link_events);
            }
            if let Phase::Running(r) = &mut self.phase {
                r.read_pipes(&mut self.out, &mut self.read_buf, now);
            }
            self.handle_link_events(now);
            self.on_timers(now);
            self.check_child(now);
            self.pump(now);
            self.handle_link_events(now);
            self.keep_standing(now);
        }
    }

    fn on_signals(&mut self, now: Instant, pending: &[i32]) {
        for &sig in pending {
            if sig == SIGCHLD {
                continue; // reaping happens in check_child on every iteration
            }
            log::warn!("received signal {sig}");
            let grace = self.kill_grace();
            match &mut self.phase {
                Phase::Running(r) if !r.is_killing() => {
                    let why = "the wrapper was signalled";
                    r.begin_kill(now, ExitReason::Killed, grace, why, &mut self.out);
                }
                Phase::Running(r) => {
                    r.kill_now();
                    self.outcome = Some(Err(WrapperError::Terminated(sig)));
                }
                _ => self.outcome = Some(Err(WrapperError::Terminated(sig))),
            }
        }
    }

    /// The command is stopped by a `suspend`.
    fn is_suspended(&self) -> bool {
        matches!(&self.phase, Phase::Running(r) if r.is_suspended())
    }

    fn kill_grace(&self) -> u64 {
        self.job.as_ref().map_or(10, |j| j.kill_grace_s)
    }

    fn begin_start(&mut self, now: Instant) {
        let splay = self.job.as_ref().map_or(0, |j| j.splay_s);
        if splay > 0 {
            let wait = Duration::from_millis(rand::random_range(0..splay.saturating_mul(1000)));
            log::info!("splay: starting in {wait:?}");
            self.phase = Phase::Splay(now + wait);
        } else {
            self.start_command(now);
        }
        // Out of the staged beat: the next heartbeat within the job's own period.
        let next = now + self.heartbeat_interval();
        self.heartbeat_at = self.heartbeat_at.map(|at| at.min(next));
    }

    fn start_command(&mut self, now: Instant) {
        let Some(job) = self.job.as_ref() else {
            return;
        };
        let facts = RunFacts {
            run: self.settings.run,
            machine: &self.settings.machine,
            lock_dir: &self.opts.lock_dir,
        };
        match Running::start(job, &facts, self.poll.registry(), (STDOUT, STDERR), now) {
            Ok(running) => {
                let pid = running.pid();
                log::info!("started {:?} as pid {pid}", job.command);
                let started = WrapperMsg::Started {
                    pid,
                    at: now_ms(),
                    limits: running.limits_applied(),
                };
                self.ctrl.push_back(started.clone());
                self.started = Some(started);
                self.phase = Phase::Running(Box::new(running));
            }
            Err(StartFailure::LockBusy(text)) => {
                log::warn!("{text}");
                let note = format!("[saltpeter-wrapper: {text}]\n");
                self.out.push(Stream::Stderr, note.as_bytes(), now);
                self.finish(now, None, None, ExitReason::LockBusy);
            }
            Err(StartFailure::SpawnFailed(text)) => {
                log::error!("{text}");
                let note = format!("[saltpeter-wrapper: {text}]\n");
                self.out.push(Stream::Stderr, note.as_bytes(), now);
                self.finish(now, None, None, ExitReason::SpawnFailed);
            }
        }
    }

    fn begin_kill(&mut self, now: Instant, reason: ExitReason, grace_s: u64, why: &str) {
        if let Phase::Running(r) = &mut self.phase {
            r.begin_kill(now, reason, grace_s, why, &mut self.out);
        }
    }

    /// Giving up: what the hub never acknowledged is written to a file beside the spool,
    /// and its path logged, so an operator can still recover the output.
    fn leave_unsent_output(&mut self) {
        let Some(dir) = self.opts.spool_dir.clone() else {
            log::error!("gave up with output the hub never stored, and no spool directory");
            return;
        };
        let path = dir.join(format!(
            "run-{}-{}.unsent",
            self.settings.run,
            super::files::lock_file_name(&self.settings.machine).trim_end_matches(".lock")
        ));
        let saved = super::files::ensure_private_dir(&dir)
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|()| {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(&path)
            })
            .and_then(|mut file| self.out.save_unacked(&mut file));
        match saved {
            Ok(0) => log::error!("gave up; every byte of output had been stored by the hub"),
            Ok(n) => log::error!(
                "gave up; {n} bytes of output the hub never stored are in {}",
                path.display()
            ),
            Err(e) => log::error!(
                "gave up; could not save the unsent output to {}: {e}",
                path.display()
            ),
        }
    }

    /// Stop for good: kill a running command first, then end with `err`.
    fn give_up(&mut self, now: Instant, err: WrapperError) {
        self.link.close();
        self.welcomed = false;
        self.reconnect_at = None;
        if matches!(self.phase, Phase::Running(_)) {
            let grace = self.kill_grace();
            self.begin_kill(now, ExitReason::Killed, grace, &err.to_string());
            self.abandon = Some(err);
        } else {
            self.outcome = Some(Err(err));
        }
    }

    fn check_child(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if let Some(Ended {
            code,
            signal,
            reason,
        }) = r.check_end(now, self.opts.drain_grace)
        {
            if reason == ExitReason::MemoryLimit {
                let note = "[saltpeter-wrapper: the command was killed by its memory limit \
                            (memory_max)]\n";
                self.out.push(Stream::Stderr, note.as_bytes(), now);
            }
            self.finish(now, code, signal, reason);
        }
    }

    fn finish(&mut self, now: Instant, code: Option<i32>, signal: Option<i32>, reason: ExitReason) {
        self.out.flush_due(now, true);
        self.out.finish();
        log::info!(
            "run over: reason {reason:?}, code {code:?}, signal {signal:?}, {} frames, \
             {} bytes lost",
            self.out.end_seq(),
            self.out.lost_total()
        );
        // Dropping `Running` releases the overlap lock and closes the pipes.
        self.phase = Phase::Finished(Box::new(WrapperMsg::Exited {
            end_seq: self.out.end_seq(),
            code,
            signal,
            reason,
            at: now_ms(),
        }));
        self.exited_sent_at = None;
        if let Some(err) = self.abandon.take() {
            self.outcome = Some(Err(err));
        }
    }

    fn pump(&mut self, now: Instant) {
        if !self.link.is_open() || !self.welcomed {
            self.link.flush(&mut self.link_events);
            return;
        }
        while let Some(msg) = self.ctrl.front() {
            if !self.link.send_msg(msg, &mut self.link_events) {
                break;
            }
            self.ctrl.pop_front();
        }
        while self.ctrl.is_empty() {
            if self.output_hold.as_ref().is_some_and(|h| !h.may_send(now)) {
                break;
            }
            let Some(frame) = self.out.next_unsent() else {
                break;
            };
            let seq = frame.seq;
            if !self.link.send_binary(
                frame.encode_for_link(self.compress_output),
                &mut self.link_events,
            ) {
                break;
            }
            self.out.mark_sent(seq);
            if let Some(hold) = &mut self.output_hold {
                hold.sent(now);
            }
        }
        if let Phase::Finished(exited) = &self.phase
            && self.exited_sent_at.is_none()
            && self.ctrl.is_empty()
            && self.out.all_sent()
            && self.link.send_msg(exited, &mut self.link_events)
        {
            self.exited_sent_at = Some(now);
        }
        self.link.flush(&mut self.link_events);
    }
}
