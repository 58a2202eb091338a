//! The supervisor: starts the four children, watches them, stops them in order.
//!
//! Outline:
//! 1. `preflight`: check the directories, claim the admin socket, bind the listeners
//!    (errors: one line, exit 2, nothing started).
//! 2. `spawn`: socketpairs for hub-main, main-db, main-blocking and one control link per
//!    child; exec the daemon binary once per role.
//! 3. Loop: a child's `Ready` on its control link; when all four are ready, `READY=1` to
//!    systemd and the process table to main. SIGHUP asks main to reload.
//! 4. Once running, the watchdog (`watchdog`): every child is pinged on its control link;
//!    one that stops answering for `saltpeter_config.watchdog` seconds is killed and the
//!    daemon stops with exit 1; `WATCHDOG=1` goes to systemd while all of them answer.
//! 5. Stop (SIGTERM/SIGINT, or any child exiting unexpectedly): level by level — hub and
//!    blocking, then main, then db — each gets `Shutdown`, then SIGTERM after the grace,
//!    then SIGKILL. Exit 0 after a requested stop, 1 after a child failure, 2 when a child
//!    reported a configuration error at start.

pub(crate) mod lock;
pub(crate) mod notify;
pub(crate) mod preflight;
pub(crate) mod spawn;
pub(crate) mod start_error;
pub(crate) mod startup;
pub(crate) mod watchdog;

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use mio::Interest;
use mio::event::Event;
use mio::unix::SourceFd;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::evloop::{Ctx, EventLoop, Flow, Forward, Listener, signals};
use crate::ipc::Role;
use crate::ipc::{Channel, ChannelError};
use crate::wire::link::{ControlDown, ControlUp, ProcessInfo};
use preflight::{Prepared, StartError};
use spawn::NamedFd;
use watchdog::Watchdog;

/// Stop order: each level is stopped only after the previous one has exited.
pub(crate) const STOP_LEVELS: [&[Role]; 3] =
    [&[Role::Hub, Role::Blocking], &[Role::Main], &[Role::Db]];

/// Exit status of a child that found the configuration unusable at start.
pub(crate) const EXIT_BAD_CONFIG: i32 = 2;

/// Timing of supervision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// From `Shutdown` to SIGTERM, and from SIGTERM to SIGKILL.
    pub stop_grace: Duration,
    /// All children must be ready within this.
    pub start_timeout: Duration,
    /// A child silent this long on its control link is hung (zero: not checked).
    pub watchdog: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            stop_grace: Duration::from_secs(10),
            start_timeout: Duration::from_secs(60),
            watchdog: Duration::from_secs(120),
        }
    }
}

type ControlChannel = Channel<mio::net::UnixStream, ControlDown, ControlUp>;

struct Slot {
    role: Role,
    child: Child,
    control: Option<ControlChannel>,
    ready: bool,
    status: Option<ExitStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Running,
    Stopping { level: usize },
}

struct Supervisor {
    slots: Vec<Slot>,
    phase: Phase,
    exit_code: i32,
    policy: Policy,
    started_at: i64,
    wrapper_port: u16,
    api_port: u16,
    watchdog: Option<Watchdog>,
    /// systemd asked for `WATCHDOG=1` (`WatchdogSec=`, `$WATCHDOG_USEC`).
    systemd_watchdog: bool,
}

impl Supervisor {
    fn slot(&mut self, role: Role) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.role == role)
    }

    fn alive(&self, role: Role) -> bool {
        self.slots
            .iter()
            .any(|s| s.role == role && s.status.is_none())
    }

    fn send(&mut self, role: Role, msg: ControlDown) {
        if let Some(slot) = self.slot(role)
            && let Some(control) = slot.control.as_mut()
            && let Err(e) = control.send(&msg)
        {
            log::warn!("could not send {msg:?} to {role}: {e}");
        }
    }
}

/// Run the daemon's supervisor until it stops; returns the exit code.
pub(crate) fn run(
    mut prepared: Prepared,
    exe: &std::path::Path,
    debug: bool,
    policy: Policy,
) -> i32 {
    let dirs = prepared.dirs.clone();
    let socket_id = prepared.socket_id;
    // Held to the end: released only after the runtime files are gone.
    let _lock = prepared.lock.take();
    let code = match supervise(prepared, exe, debug, policy) {
        Ok(code) => code,
        Err(e) => {
            log::error!("{e}");
            2
        }
    };
    preflight::remove_runtime_files(&dirs, socket_id);
    code
}

fn supervise(
    prepared: Prepared,
    exe: &std::path::Path,
    debug: bool,
    policy: Policy,
) -> Result<i32, StartError> {
    let mut ev: EventLoop<Supervisor> = EventLoop::new().map_err(StartError::Loop)?;
    let mut sup = Supervisor {
        slots: Vec::new(),
        phase: Phase::Starting,
        exit_code: 0,
        policy,
        started_at: crate::wire::records::now_ms(),
        wrapper_port: prepared
            .wrappers
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(0),
        api_port: prepared
            .api
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port())
            .unwrap_or(0),
        watchdog: None,
        systemd_watchdog: notify::watchdog_asked().is_some(),
    };
    // Signals first, so a SIGTERM during start-up is not lost.
    signals::watch(
        ev.ctx(),
        &[
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ],
        on_signal,
    )
    .map_err(StartError::Loop)?;

    let dirs = prepared.dirs.clone();
    for (role, control, fds) in link_plan(prepared).map_err(StartError::Loop)? {
        let child = spawn::spawn_role(exe, role, &dirs, debug, fds).map_err(|source| {
            StartError::Spawn {
                role: role.name().to_string(),
                source,
            }
        })?;
        log::info!("started {role} process, pid {}", child.id());
        let pidfd = crate::evloop::child::pidfd_open(child.id()).map_err(StartError::Loop)?;
        let raw = pidfd.as_raw_fd();
        ev.ctx()
            .register(
                &mut SourceFd(&raw),
                Interest::READABLE,
                ExitWatch {
                    role,
                    _pidfd: pidfd,
                },
            )
            .map_err(StartError::Loop)?;
        let stream = std::os::unix::net::UnixStream::from(control);
        stream.set_nonblocking(true).map_err(StartError::Loop)?;
        let mut stream = mio::net::UnixStream::from_std(stream);
        ev.ctx()
            .register(
                &mut stream,
                Interest::READABLE | Interest::WRITABLE,
                Forward::new(role, on_control),
            )
            .map_err(StartError::Loop)?;
        let control =
            Channel::new(stream, Role::Supervisor, role).map_err(|e| StartError::Spawn {
                role: role.name().to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
        sup.slots.push(Slot {
            role,
            child,
            control: Some(control),
            ready: false,
            status: None,
        });
    }
    let start_timeout = sup.policy.start_timeout;
    ev.ctx()
        .after(start_timeout, move |sup: &mut Supervisor, ctx| {
            if sup.phase == Phase::Starting {
                let late: Vec<&str> = sup
                    .slots
                    .iter()
                    .filter(|s| !s.ready)
                    .map(|s| s.role.name())
                    .collect();
                log::error!("not ready within {start_timeout:?}: {}", late.join(", "));
                sup.exit_code = 1;
                begin_stop(sup, ctx);
            }
        });
    ev.run(&mut sup).map_err(StartError::Loop)?;
    Ok(sup.exit_code)
}

/// Socketpairs and inherited descriptors of every child:
/// `(role, supervisor's end of its control link, what the child inherits)`.
fn link_plan(p: Prepared) -> std::io::Result<Vec<(Role, OwnedFd, Vec<NamedFd>)>> {
    use std::os::unix::net::UnixStream;
    let pair = || -> std::io::Result<(OwnedFd, OwnedFd)> {
        let (a, b) = UnixStream::pair()?;
        Ok((a.into(), b.into()))
    };
    let (hub_main, main_hub) = pair()?;
    let (main_db, db_main) = pair()?;
    let (main_blocking, blocking_main) = pair()?;
    let named = |name: &'static str, fd: OwnedFd| NamedFd { name, fd };
    let mut hub = vec![
        named("main", hub_main),
        named("admin", p.admin.into()),
        named("wrappers", p.wrappers.into()),
    ];
    if let Some(api) = p.api {
        hub.push(named("api", api.into()));
    }
    let plan = [
        (Role::Hub, hub),
        (
            Role::Main,
            vec![
                named("hub", main_hub),
                named("db", main_db),
                named("blocking", main_blocking),
            ],
        ),
        (Role::Db, vec![named("main", db_main)]),
        (Role::Blocking, vec![named("main", blocking_main)]),
    ];
    let mut out = Vec::new();
    for (role, mut fds) in plan {
        let (mine, theirs) = pair()?;
        fds.insert(0, named("control", theirs));
        out.push((role, mine, fds));
    }
    Ok(out)
}

/// Becomes readable when the child exits.
struct ExitWatch {
    role: Role,
    _pidfd: OwnedFd,
}

impl Listener<Supervisor> for ExitWatch {
    fn handle_event(&mut self, sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>, _: &Event) -> Flow {
        let role = self.role;
        let Some(slot) = sup.slot(role) else {
            return Flow::Close;
        };
        let status = match slot.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return Flow::Continue,
            Err(e) => {
                log::error!("could not collect the {role} process: {e}");
                return Flow::Continue;
            }
        };
        slot.status = Some(status);
        slot.control = None;
        let was_ready = slot.ready;
        let bad_start = !was_ready && status.code() == Some(EXIT_BAD_CONFIG);
        match sup.phase {
            Phase::Stopping { .. } => {
                log::info!("{role} process stopped ({status})");
                // A child that found its start files unusable decides the exit code even
                // when a sibling went down first (it saw that child's link close).
                if bad_start {
                    sup.exit_code = EXIT_BAD_CONFIG;
                }
            }
            _ => {
                log::error!("the {role} process exited unexpectedly ({status}); stopping");
                sup.exit_code = if bad_start { EXIT_BAD_CONFIG } else { 1 };
                begin_stop(sup, ctx);
            }
        }
        advance_stop(sup, ctx);
        Flow::Close
    }
}

fn on_control(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>, role: Role, event: &Event) -> Flow {
    let Some(slot) = sup.slot(role) else {
        return Flow::Close;
    };
    let Some(control) = slot.control.as_mut() else {
        return Flow::Close;
    };
    if event.is_writable()
        && let Err(e) = control.on_writable()
    {
        log::debug!("control link to {role}: {e}");
    }
    if !event.is_readable() && !event.is_read_closed() {
        return Flow::Continue;
    }
    match control.receive() {
        Ok(msgs) => {
            let mut answered = false;
            for msg in msgs {
                match msg {
                    ControlUp::Ready => {
                        slot.ready = true;
                        log::debug!("{role} is ready");
                    }
                    ControlUp::Pong(_) => answered = true,
                }
            }
            if answered && let Some(dog) = sup.watchdog.as_mut() {
                dog.answered(role, Instant::now());
            }
            if sup.phase == Phase::Starting && sup.slots.iter().all(|s| s.ready) {
                all_ready(sup, ctx);
            }
            Flow::Continue
        }
        // The exit watch reports the child's end; the link alone says nothing more.
        Err(ChannelError::PeerGone(_)) => Flow::Close,
        Err(e) => {
            log::error!("control link to {role}: {e}; stopping");
            sup.exit_code = 1;
            begin_stop(sup, ctx);
            Flow::Close
        }
    }
}

fn all_ready(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>) {
    sup.phase = Phase::Running;
    let mut processes = vec![ProcessInfo {
        role: Role::Supervisor.name().to_string(),
        pid: std::process::id(),
    }];
    processes.extend(sup.slots.iter().map(|s| ProcessInfo {
        role: s.role.name().to_string(),
        pid: s.child.id(),
    }));
    let (started_at, wrapper_port, api_port) = (sup.started_at, sup.wrapper_port, sup.api_port);
    sup.send(
        Role::Main,
        ControlDown::Processes {
            started_at,
            processes,
            wrapper_port,
            api_port,
        },
    );
    if let Err(e) = notify::send(notify::State::Ready) {
        log::warn!("could not notify systemd: {e}");
    }
    log::info!("ready: all processes are up");
    let roles: Vec<Role> = sup.slots.iter().map(|s| s.role).collect();
    sup.watchdog = Watchdog::new(sup.policy.watchdog, &roles, Instant::now());
    if sup.watchdog.is_some() {
        watch(sup, ctx);
    }
}

/// One turn of the watchdog, then the next one `watchdog::TURN` later, while running.
fn watch(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>) {
    if sup.phase != Phase::Running {
        return;
    }
    let Some(dog) = sup.watchdog.as_mut() else {
        return;
    };
    let turn = dog.turn(Instant::now());
    if let Some(n) = turn.ping {
        for role in sup.slots.iter().map(|s| s.role).collect::<Vec<_>>() {
            sup.send(role, ControlDown::Ping(n));
        }
    }
    if turn.healthy
        && sup.systemd_watchdog
        && let Err(e) = notify::send(notify::State::Watchdog)
    {
        log::debug!("could not notify systemd's watchdog: {e}");
    }
    if let Some((role, silence)) = turn.hung {
        hung(sup, ctx, role, silence);
        return;
    }
    ctx.after(watchdog::TURN, watch);
}

/// A child stopped answering: it cannot stop in order, so it is killed at once; the rest
/// stop in order and the daemon exits 1 (systemd restarts it; runs in flight are
/// recovered at the next start like after any crash).
fn hung(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>, role: Role, silence: Duration) {
    let limit = sup.policy.watchdog.as_secs();
    let pid = sup.slot(role).map(|s| s.child.id()).unwrap_or(0);
    log::error!(
        "the {role} process (pid {pid}) has not answered the supervisor for {}s \
         (saltpeter_config.watchdog: {limit}s): it is hung; killing it and stopping the daemon",
        silence.as_secs()
    );
    if pid != 0 {
        let _ = signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    sup.exit_code = 1;
    begin_stop(sup, ctx);
}

fn on_signal(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>, signal: i32) {
    match signal {
        signal_hook::consts::SIGHUP => {
            log::info!("SIGHUP: asking main to reload the configuration");
            sup.send(Role::Main, ControlDown::Reload);
        }
        _ => {
            log::info!("signal {signal}: stopping");
            begin_stop(sup, ctx);
        }
    }
}

fn begin_stop(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>) {
    if matches!(sup.phase, Phase::Stopping { .. }) {
        return;
    }
    if let Err(e) = notify::send(notify::State::Stopping) {
        log::debug!("could not notify systemd: {e}");
    }
    sup.phase = Phase::Stopping { level: 0 };
    // main first learns that blocking is going, so it launches nothing into it.
    if sup.alive(Role::Main) {
        sup.send(Role::Main, ControlDown::Stopping);
    }
    stop_level(sup, ctx, 0);
    advance_stop(sup, ctx);
}

/// Ask a level to stop; escalate to SIGTERM, then SIGKILL, if it does not. A child that
/// never said `Ready` (db still waiting for its database) has no loop to stop in order
/// and nothing to finish: it gets SIGTERM at once.
fn stop_level(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>, level: usize) {
    for role in STOP_LEVELS[level] {
        if !sup.alive(*role) {
            continue;
        }
        match sup.slot(*role) {
            Some(slot) if !slot.ready => {
                log::info!("{role} was not ready yet; sending SIGTERM");
                let _ = signal::kill(Pid::from_raw(slot.child.id() as i32), Signal::SIGTERM);
            }
            _ => sup.send(*role, ControlDown::Shutdown),
        }
    }
    let grace = sup.policy.stop_grace;
    ctx.after(grace, move |sup: &mut Supervisor, ctx| {
        escalate(sup, level, Signal::SIGTERM);
        ctx.after(grace, move |sup: &mut Supervisor, _| {
            escalate(sup, level, Signal::SIGKILL)
        });
    });
}

fn escalate(sup: &mut Supervisor, level: usize, sig: Signal) {
    if sup.phase != (Phase::Stopping { level }) {
        return;
    }
    for slot in sup.slots.iter().filter(|s| s.status.is_none()) {
        if STOP_LEVELS[level].contains(&slot.role) {
            log::warn!("{} did not stop in time; sending {sig}", slot.role);
            let _ = signal::kill(Pid::from_raw(slot.child.id() as i32), sig);
        }
    }
}

/// Move to the next level once the current one has exited; stop the loop after the last.
fn advance_stop(sup: &mut Supervisor, ctx: &mut Ctx<Supervisor>) {
    while let Phase::Stopping { level } = sup.phase {
        if STOP_LEVELS[level].iter().any(|r| sup.alive(*r)) {
            return;
        }
        if level + 1 == STOP_LEVELS.len() {
            log::info!("all processes stopped");
            ctx.stop();
            return;
        }
        sup.phase = Phase::Stopping { level: level + 1 };
        stop_level(sup, ctx, level + 1);
    }
}
