//! The wrapper's one loop: a run's life from `hello` to `done`.
//!
//! Phases: `AwaitWelcome` -> (`AwaitGo` when pre-staged) -> (`Splay`) -> `Running` ->
//! `Finished` (the `exited` message is kept and resent on every new connection until
//! `done`). Independently the hub link goes down and up: after each loss a reconnect is
//! scheduled with backoff, `hello` presents the `resume_key`, and the `welcome`'s
//! `acked_seq` rewinds the output buffer so exactly the missing frames are resent.
//!
//! Every iteration: poll (timeout = the nearest deadline), note readiness, read the
//! pipes (bounded per iteration so the hub socket is never starved), handle hub
//! messages, fire due timers, reap the child, then pump control messages and frames into
//! the link until its write buffer refuses more. The pipes are read in every phase and
//! whatever the link does, so the command never blocks on a full pipe.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::unix::pipe::Receiver;
use mio::{Events, Interest, Poll, Token};
use nix::fcntl::Flock;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use super::WrapperError;
use super::command::{self, command_env, exit_fields, kill_group, resolve_user, spawn};
use super::files::{self, OverlapLock};
use super::link::{Link, LinkEvent};
use super::outbuf::{Limits, OutputBuffer, SpoolFactory};
use super::settings::{Backoff, Settings};
use super::spool::Spool;
use crate::wire::wrapper::{
    ExitReason, JobSpec, KillReason, PROTOCOL_VERSION, ServerMsg, Stream, WrapperMsg,
};

const WS: Token = Token(0);
const STDOUT: Token = Token(1);
const STDERR: Token = Token(2);
const SIGNALS: Token = Token(3);
/// Reads per pipe per loop iteration (64 KiB each) before the link gets its turn.
const READS_PER_TURN: usize = 16;
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
const EXITED_RESEND: Duration = Duration::from_secs(30);

/// Tunables; the defaults are the production values.
#[derive(Debug, Clone)]
pub struct Options {
    pub limits: Limits,
    /// Spool directory (default [`files::spool_dir`]); `None` inside means no spool.
    pub spool_dir: Option<PathBuf>,
    pub lock_dir: PathBuf,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long to wait for `welcome` after `hello`.
    pub hello_timeout: Duration,
    /// After the command exits, how long to keep reading pipes a background process
    /// still holds open.
    pub drain_grace: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            limits: Limits::default(),
            spool_dir: Some(files::spool_dir()),
            lock_dir: files::lock_dir(),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(30),
            drain_grace: Duration::from_secs(2),
        }
    }
}

/// Runs the whole protocol for one run; `Ok` once the hub answered `done`.
pub fn run(settings: Settings, opts: Options) -> Result<(), WrapperError> {
    Session::new(settings, opts)?.run_loop()
}

enum Phase {
    AwaitWelcome,
    AwaitGo,
    Splay(Instant),
    Running(Box<Running>),
    Finished(WrapperMsg),
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

struct Running {
    child: Child,
    pgid: Pid,
    pipes: Vec<Pipe>,
    status: Option<ExitStatus>,
    kill: Option<Kill>,
    timeout_at: Option<Instant>,
    drain_until: Option<Instant>,
    _lock: Option<Flock<File>>,
}

struct Session {
    settings: Settings,
    token: Option<String>,
    opts: Options,
    poll: Poll,
    _signals: Signals,
    link: Link,
    link_events: Vec<LinkEvent>,
    welcomed: bool,
    hello_deadline: Option<Instant>,
    addrs: Vec<SocketAddr>,
    next_addr: usize,
    backoff: Backoff,
    reconnect_at: Option<Instant>,
    out: OutputBuffer,
    job: Option<JobSpec>,
    resume_key: Option<String>,
    phase: Phase,
    started: Option<WrapperMsg>,
    ctrl: VecDeque<WrapperMsg>,
    heartbeat_at: Option<Instant>,
    exited_sent_at: Option<Instant>,
    abandon: Option<WrapperError>,
    outcome: Option<Result<(), WrapperError>>,
    read_buf: Vec<u8>,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Session {
    fn new(mut settings: Settings, opts: Options) -> Result<Session, WrapperError> {
        let poll = Poll::new().map_err(WrapperError::Poll)?;
        let mut signals = Signals::new([SIGCHLD, SIGTERM, SIGINT]).map_err(WrapperError::Poll)?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)
            .map_err(WrapperError::Poll)?;
        let token = Some(std::mem::take(&mut settings.token));
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
            poll,
            _signals: signals,
            link: Link::new(WS, now),
            link_events: Vec::new(),
            welcomed: false,
            hello_deadline: None,
            addrs: Vec::new(),
            next_addr: 0,
            backoff: Backoff::new(opts.backoff_base, opts.backoff_max),
            reconnect_at: Some(now),
            out: OutputBuffer::new(opts.limits, spool_factory),
            job: None,
            resume_key: None,
            phase: Phase::AwaitWelcome,
            started: None,
            ctrl: VecDeque::new(),
            heartbeat_at: None,
            exited_sent_at: None,
            abandon: None,
            outcome: None,
            read_buf: vec![0; opts.limits.frame_max.max(4096)],
            settings,
            opts,
        })
    }

    fn run_loop(mut self) -> Result<(), WrapperError> {
        let mut events = Events::with_capacity(64);
        loop {
            if let Some(outcome) = self.outcome.take() {
                self.link.close();
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
                    SIGNALS => self.on_signals(now),
                    tok => self.mark_pipe_ready(tok),
                }
            }
            if link_ready {
                self.link
                    .on_ready(&self.settings.hub.url, now, &mut self.link_events);
            }
            self.read_pipes(now);
            self.handle_link_events(now);
            self.on_timers(now);
            self.check_child(now);
            self.pump(now);
            self.handle_link_events(now);
        }
    }

    fn heartbeat_interval(&self) -> Duration {
        self.job.as_ref().map_or(DEFAULT_HEARTBEAT, |j| {
            Duration::from_secs(j.heartbeat_s.max(1))
        })
    }

    fn liveness_limit(&self) -> Duration {
        (self.heartbeat_interval() * 4).max(Duration::from_secs(20))
    }

    fn poll_timeout(&self, now: Instant) -> Option<Duration> {
        let mut next: Vec<Option<Instant>> = vec![
            self.out.flush_deadline(),
            self.heartbeat_at,
            self.reconnect_at,
            self.hello_deadline,
            self.link.setup_deadline(),
            Some(self.link.last_rx + self.settings.give_up),
            self.exited_sent_at.map(|t| t + EXITED_RESEND),
        ];
        if self.link.is_open() {
            next.push(Some(self.link.last_rx + self.liveness_limit()));
        }
        match &self.phase {
            Phase::Splay(until) => next.push(Some(*until)),
            Phase::Running(r) => {
                if r.pipes.iter().any(|p| p.ready) {
                    return Some(Duration::ZERO);
                }
                next.extend([r.timeout_at, r.drain_until]);
                if let Some(k) = &r.kill {
                    next.push((!k.killed).then_some(k.kill_at));
                    if r.status.is_some() {
                        // Waiting for the rest of the group to die: look again soon.
                        next.push(Some(now + Duration::from_millis(100)));
                    }
                }
            }
            _ => {}
        }
        next.into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(now))
    }

    fn on_signals(&mut self, now: Instant) {
        let pending: Vec<i32> = self._signals.pending().collect();
        for sig in pending {
            if sig == SIGCHLD {
                continue; // reaping happens in check_child on every iteration
            }
            log::warn!("received signal {sig}");
            let grace = self.job.as_ref().map_or(10, |j| j.kill_grace_s);
            match &mut self.phase {
                Phase::Running(r) if r.kill.is_none() => {
                    self.begin_kill(now, ExitReason::Killed, grace, "the wrapper was signalled");
                }
                Phase::Running(r) => {
                    kill_group(r.pgid, Signal::SIGKILL);
                    self.outcome = Some(Err(WrapperError::Terminated(sig)));
                }
                _ => self.outcome = Some(Err(WrapperError::Terminated(sig))),
            }
        }
    }

    fn mark_pipe_ready(&mut self, tok: Token) {
        if let Phase::Running(r) = &mut self.phase {
            let stream = if tok == STDOUT {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            for p in r.pipes.iter_mut().filter(|p| p.stream == stream) {
                p.ready = true;
            }
        }
    }

    fn read_pipes(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let mut closed = Vec::new();
        for (idx, pipe) in r.pipes.iter_mut().enumerate() {
            for _ in 0..READS_PER_TURN {
                if !pipe.ready {
                    break;
                }
                match pipe.rx.read(&mut self.read_buf) {
                    Ok(0) => {
                        closed.push(idx);
                        break;
                    }
                    Ok(n) => self.out.push(pipe.stream, &self.read_buf[..n], now),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => pipe.ready = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("reading the command's {:?} failed: {e}", pipe.stream);
                        closed.push(idx);
                        break;
                    }
                }
            }
        }
        for idx in closed.into_iter().rev() {
            r.pipes.remove(idx);
        }
    }

    fn handle_link_events(&mut self, now: Instant) {
        while !self.link_events.is_empty() {
            let events = std::mem::take(&mut self.link_events);
            for ev in events {
                match ev {
                    LinkEvent::Open => self.send_hello(now),
                    LinkEvent::Message(msg) => self.on_message(now, msg),
                    LinkEvent::Closed(reason) => self.link_down(now, &reason),
                }
            }
        }
    }

    fn send_hello(&mut self, now: Instant) {
        log::info!("connected to {}", self.settings.hub.url);
        let resuming = self.resume_key.is_some();
        let hello = WrapperMsg::Hello {
            v: PROTOCOL_VERSION,
            run: self.settings.run,
            machine: self.settings.machine.clone(),
            token: if resuming { None } else { self.token.clone() },
            resume_key: self.resume_key.clone(),
            wrapper_version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            resume_from: resuming.then(|| self.out.acked()),
        };
        self.link.send_msg(&hello, &mut self.link_events);
        self.link.flush(&mut self.link_events);
        self.hello_deadline = Some(now + self.opts.hello_timeout);
    }

    fn link_down(&mut self, now: Instant, reason: &str) {
        let (mem, spooled) = self.out.buffered_bytes();
        log::warn!("{reason} ({mem} bytes buffered in memory, {spooled} spooled)");
        self.link.close();
        self.welcomed = false;
        self.hello_deadline = None;
        self.ctrl.clear();
        if self.abandon.is_none() && self.outcome.is_none() {
            let delay = self.backoff.next_delay(rand::random::<f64>());
            log::info!("reconnecting in {delay:?}");
            self.reconnect_at = Some(now + delay);
        }
    }

    fn dial(&mut self, now: Instant) {
        self.reconnect_at = None;
        if self.abandon.is_some() {
            return;
        }
        let running = matches!(&self.phase, Phase::Running(_));
        // Name resolution blocks; do it again only while no command needs its pipes read.
        if self.addrs.is_empty() || (self.next_addr >= self.addrs.len() && !running) {
            let hub = &self.settings.hub;
            match (hub.host.as_str(), hub.port).to_socket_addrs() {
                Ok(addrs) => self.addrs = addrs.collect(),
                Err(e) => log::warn!("could not resolve hub host {}: {e}", hub.host),
            }
            self.next_addr = 0;
        }
        if self.addrs.is_empty() {
            return self.link_down(now, "no address for the hub");
        }
        let addr = self.addrs[self.next_addr % self.addrs.len()];
        self.next_addr += 1;
        if let Err(reason) = self.link.connect(self.poll.registry(), addr, now) {
            self.link_down(now, &reason);
        }
    }

    fn on_message(&mut self, now: Instant, msg: ServerMsg) {
        match msg {
            ServerMsg::Welcome {
                job,
                resume_key,
                acked_seq,
                wait_for_go,
            } => self.on_welcome(now, job, resume_key, acked_seq, wait_for_go),
            _ if !self.welcomed => log::warn!("ignoring {msg:?} before welcome"),
            ServerMsg::Ack { seq } => self.out.ack(seq),
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
                        let grace = self.job.as_ref().map_or(10, |j| j.kill_grace_s);
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
            ServerMsg::Reject { code, message } => {
                if code.is_transient() {
                    self.link_down(now, &format!("hub asks to retry later: {message}"));
                } else {
                    log::error!("rejected by the hub ({code:?}): {message}");
                    self.give_up(now, WrapperError::Rejected { code, message });
                }
            }
            ServerMsg::Done {} => {
                if matches!(self.phase, Phase::Finished(_)) && self.exited_sent_at.is_some() {
                    log::info!("the hub recorded the exit; done");
                    self.outcome = Some(Ok(()));
                } else {
                    log::warn!("ignoring done before exited was sent");
                }
            }
        }
    }

    fn on_welcome(
        &mut self,
        now: Instant,
        job: JobSpec,
        resume_key: String,
        acked_seq: u64,
        wait_for_go: bool,
    ) {
        log::info!(
            "welcome: job {:?}, hub holds output up to seq {acked_seq}",
            job.name
        );
        self.welcomed = true;
        self.hello_deadline = None;
        self.resume_key = Some(resume_key);
        self.token = None;
        self.backoff.reset();
        self.out.rewind(acked_seq);
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
        }
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
    }

    fn start_command(&mut self, now: Instant) {
        let Some(job) = self.job.clone() else {
            return;
        };
        let lock = if job.overlap_lock {
            // One lock per job and machine: the local executor runs several machines
            // on one host, and each is its own target.
            let lock_name = format!("{}@{}", job.name, self.settings.machine);
            match files::try_overlap_lock(&self.opts.lock_dir, &lock_name) {
                Ok(OverlapLock::Held(lock)) => Some(lock),
                Ok(OverlapLock::Busy(path)) => {
                    let note = format!(
                        "[saltpeter-wrapper: job {:?} is already running on this host \
                         (lock {} is held); not started]\n",
                        job.name,
                        path.display()
                    );
                    self.out.push(Stream::Stderr, note.as_bytes(), now);
                    return self.finish(now, None, None, ExitReason::LockBusy);
                }
                Err(e) => return self.spawn_failed(now, &e.to_string()),
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
            Some(Err(text)) => return self.spawn_failed(now, &text),
            None => None,
        };
        let env = command_env(
            std::env::vars_os(),
            &job,
            self.settings.run,
            &self.settings.machine,
            run_as.as_ref(),
        );
        let mut sp = match spawn(&job, env, run_as.as_ref()) {
            Ok(sp) => sp,
            Err(text) => return self.spawn_failed(now, &text),
        };
        let registry = self.poll.registry();
        if let Err(e) = registry
            .register(&mut sp.stdout, STDOUT, Interest::READABLE)
            .and_then(|()| registry.register(&mut sp.stderr, STDERR, Interest::READABLE))
        {
            kill_group(sp.pgid, Signal::SIGKILL);
            let _ = sp.child.wait();
            return self.spawn_failed(now, &format!("could not watch the output pipes: {e}"));
        }
        let pid = sp.child.id();
        log::info!("started {:?} as pid {pid}", job.command);
        let started = WrapperMsg::Started { pid, at: unix_ms() };
        self.ctrl.push_back(started.clone());
        self.started = Some(started);
        self.phase = Phase::Running(Box::new(Running {
            child: sp.child,
            pgid: sp.pgid,
            pipes: vec![
                Pipe {
                    rx: sp.stdout,
                    stream: Stream::Stdout,
                    ready: true,
                },
                Pipe {
                    rx: sp.stderr,
                    stream: Stream::Stderr,
                    ready: true,
                },
            ],
            status: None,
            kill: None,
            timeout_at: (job.timeout_s > 0).then(|| now + Duration::from_secs(job.timeout_s)),
            drain_until: None,
            _lock: lock,
        }));
    }

    fn spawn_failed(&mut self, now: Instant, text: &str) {
        log::error!("{text}");
        self.out.push(
            Stream::Stderr,
            format!("[saltpeter-wrapper: {text}]\n").as_bytes(),
            now,
        );
        self.finish(now, None, None, ExitReason::SpawnFailed);
    }

    fn begin_kill(&mut self, now: Instant, reason: ExitReason, grace_s: u64, why: &str) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let kill_at = now + Duration::from_secs(grace_s);
        match &mut r.kill {
            Some(k) => k.kill_at = k.kill_at.min(kill_at),
            None => {
                log::info!(
                    "{why}: TERM to process group {}, KILL in {grace_s} s",
                    r.pgid
                );
                let note = format!(
                    "\n[saltpeter-wrapper: {why}; sending TERM to the job's processes, \
                     KILL after {grace_s} s]\n"
                );
                self.out.push(Stream::Stderr, note.as_bytes(), now);
                kill_group(r.pgid, Signal::SIGTERM);
                r.kill = Some(Kill {
                    reason,
                    kill_at,
                    killed: false,
                });
            }
        }
    }

    /// Stop for good: kill a running command first, then end with `err`.
    fn give_up(&mut self, now: Instant, err: WrapperError) {
        self.link.close();
        self.welcomed = false;
        self.reconnect_at = None;
        if matches!(self.phase, Phase::Running(_)) {
            let grace = self.job.as_ref().map_or(10, |j| j.kill_grace_s);
            self.begin_kill(now, ExitReason::Killed, grace, &err.to_string());
            self.abandon = Some(err);
        } else {
            self.outcome = Some(Err(err));
        }
    }

    fn on_timers(&mut self, now: Instant) {
        self.out.flush_due(now, false);
        if let Phase::Splay(until) = self.phase
            && until <= now
        {
            self.start_command(now);
        }
        let mut timed_out = None;
        if let Phase::Running(r) = &mut self.phase {
            if r.kill.is_none() && r.timeout_at.is_some_and(|t| t <= now) {
                timed_out = self.job.as_ref().map(|j| (j.timeout_s, j.kill_grace_s));
            }
            if let Some(k) = &mut r.kill
                && !k.killed
                && k.kill_at <= now
            {
                log::warn!("grace over: KILL to process group {}", r.pgid);
                kill_group(r.pgid, Signal::SIGKILL);
                k.killed = true;
            }
            if r.drain_until.is_some_and(|t| t <= now) && !r.pipes.is_empty() {
                log::warn!("the command exited but its pipes are still open; stop reading");
                r.pipes.clear();
            }
        }
        if let Some((timeout_s, grace)) = timed_out {
            let why = format!("timeout of {timeout_s} s reached");
            self.begin_kill(now, ExitReason::Timeout, grace, &why);
        }
        if self.heartbeat_at.is_some_and(|t| t <= now) {
            if self.welcomed {
                self.ctrl.push_back(WrapperMsg::Heartbeat { at: unix_ms() });
                self.link.send_ping(&mut self.link_events);
            }
            self.heartbeat_at = Some(now + self.heartbeat_interval());
        }
        if self
            .exited_sent_at
            .is_some_and(|t| t + EXITED_RESEND <= now)
        {
            self.exited_sent_at = None; // no done yet: send exited again
        }
        if self.link.is_down() && self.reconnect_at.is_some_and(|t| t <= now) {
            self.dial(now);
        }
        if self.link.setup_deadline().is_some_and(|t| t <= now) {
            self.link_down(now, "connecting to the hub timed out");
        }
        if self.hello_deadline.is_some_and(|t| t <= now) {
            self.link_down(now, "no welcome from the hub in time");
        }
        if self.link.is_open() && self.link.last_rx + self.liveness_limit() <= now {
            self.link_down(now, "the hub went silent");
        }
        if self.abandon.is_none() && self.link.last_rx + self.settings.give_up <= now {
            let limit = self.settings.give_up;
            log::error!("no contact with the hub for {limit:?}; giving up");
            self.give_up(now, WrapperError::GaveUp(limit));
        }
    }

    fn check_child(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if r.status.is_none() {
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    log::info!("command exited: {status}");
                    r.status = Some(status);
                    if !r.pipes.is_empty() {
                        r.drain_until = Some(now + self.opts.drain_grace);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    log::error!("could not wait for the command: {e}");
                    return;
                }
            }
        }
        let Some(status) = r.status else {
            return;
        };
        let group_settled = match &r.kill {
            None => true,
            Some(k) => k.killed || !command::group_alive(r.pgid),
        };
        if !r.pipes.is_empty() || !group_settled {
            return;
        }
        let reason = r.kill.as_ref().map_or(ExitReason::Exit, |k| k.reason);
        let (code, signal) = exit_fields(status);
        self.finish(now, code, signal, reason);
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
        self.phase = Phase::Finished(WrapperMsg::Exited {
            end_seq: self.out.end_seq(),
            code,
            signal,
            reason,
            at: unix_ms(),
        });
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
            let Some(frame) = self.out.next_unsent() else {
                break;
            };
            let seq = frame.seq;
            if !self.link.send_binary(frame.encode(), &mut self.link_events) {
                break;
            }
            self.out.mark_sent(seq);
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
