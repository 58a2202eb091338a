//! Child processes whose stdout and stderr are drained while they run.
//!
//! `spawn` starts a command with both pipes registered in the loop (non-blocking) and a
//! pidfd that becomes readable when the process exits, so nothing waits and a chatty child
//! never blocks on a full pipe. When the process has exited and both pipes reached EOF the
//! callback gets the status and the captured output. A grandchild that keeps a pipe open
//! after the child exited cannot hold the callback back for more than `LINGER`.
//!
//! `spawn_detached` is for a child that goes on alone (the local executor's wrapper),
//! forked without waiting for its exec (`fork_exec`): it says it has started by writing
//! to stdout and then closing stdout and stderr while it runs. Its callback comes at that point ([`Start::Running`]), or at its exit if it
//! never got there ([`Start::Exited`]). The loop keeps only its pidfd afterwards and
//! reaps it when it exits, so it never stays a zombie; it no longer counts as running
//! here and cannot be signalled through [`signal`].

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::Duration;

use mio::Interest;
use mio::event::Event;
use mio::unix::SourceFd;
use mio::unix::pipe::Receiver;

pub(crate) use super::children::{ChildId, ChildOutput, Start};
use super::children::{Pipe, Proc, Report, Running};
use super::ctx::{Ctx, Flow, Listener};
use super::fork_exec::{self, Exec};

/// Captured per stream at most; the rest is counted, not kept.
pub(crate) const CAPTURE_LIMIT: usize = 8 * 1024 * 1024;
/// How long pipes may stay open after the process exited.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

struct PipeListener {
    id: ChildId,
    pipe: Pipe,
    rx: Receiver,
}

struct ExitListener {
    id: ChildId,
    pidfd: OwnedFd,
}

/// Start `cmd` with drained pipes; `on_exit` runs in the loop when it is done.
pub(crate) fn spawn<S: 'static>(
    ctx: &mut Ctx<S>,
    cmd: Command,
    on_exit: impl FnOnce(&mut S, &mut Ctx<S>, ChildOutput) + 'static,
) -> io::Result<ChildId> {
    spawn_with_stdin(ctx, cmd, Stdio::null(), on_exit)
}

/// [`spawn`] with `stdin` as the child's input (a file already written, e.g. a memfd:
/// nothing is written to the child from the loop).
pub(crate) fn spawn_with_stdin<S: 'static>(
    ctx: &mut Ctx<S>,
    cmd: Command,
    stdin: Stdio,
    on_exit: impl FnOnce(&mut S, &mut Ctx<S>, ChildOutput) + 'static,
) -> io::Result<ChildId> {
    start(ctx, cmd, stdin, Report::Exit(Box::new(on_exit)))
}

/// Start `exec`, a child that goes on alone once started (see the module note), with
/// stdin on `/dev/null`, without waiting for its exec (`fork_exec`: an exec error is
/// its stderr and exit 127); `on_start` runs in the loop when it started or exited.
pub(crate) fn spawn_detached<S: 'static>(
    ctx: &mut Ctx<S>,
    exec: &Exec,
    on_start: impl FnOnce(&mut S, &mut Ctx<S>, Start) + 'static,
) -> io::Result<ChildId> {
    let forked = fork_exec::spawn(exec)?;
    let pipes = [
        Some(Receiver::from(forked.stdout)),
        Some(Receiver::from(forked.stderr)),
    ];
    let report = Report::Start(Box::new(on_start));
    let pid = forked.pid;
    watch(ctx, Proc::Forked(pid), pipes, report).inspect_err(|_| {
        // Unwatched, it would never be reaped: it goes now, before it is started.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    })
}

fn start<S: 'static>(
    ctx: &mut Ctx<S>,
    mut cmd: Command,
    stdin: Stdio,
    report: Report<S, Ctx<S>>,
) -> io::Result<ChildId> {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pipes = [
        child.stdout.take().map(Receiver::from),
        child.stderr.take().map(Receiver::from),
    ];
    watch(ctx, Proc::Command(child), pipes, report)
}

/// Register a started child's pipes and exit in the loop.
fn watch<S: 'static>(
    ctx: &mut Ctx<S>,
    child: Proc,
    [stdout, stderr]: [Option<Receiver>; 2],
    report: Report<S, Ctx<S>>,
) -> io::Result<ChildId> {
    let id = ctx.children.next_id;
    ctx.children.next_id += 1;
    let pidfd = pidfd_open(child.id())?;
    let mut pipe_tokens = Vec::new();
    let pipes = [(Pipe::Stdout, stdout), (Pipe::Stderr, stderr)];
    for (pipe, rx) in pipes {
        let Some(rx) = rx else { continue };
        rx.set_nonblocking(true)?;
        let token = ctx.add(PipeListener { id, pipe, rx }, Interest::READABLE, |l| {
            &mut l.rx
        })?;
        pipe_tokens.push((pipe, token));
    }
    let raw = pidfd.as_raw_fd();
    let exit_token = ctx.register(
        &mut SourceFd(&raw),
        Interest::READABLE,
        ExitListener { id, pidfd },
    )?;
    ctx.children.running.insert(
        id,
        Running {
            child,
            stdout: Vec::new(),
            stderr: Vec::new(),
            dropped: 0,
            pipe_tokens,
            exit_token: Some(exit_token),
            status: None,
            report,
        },
    );
    Ok(id)
}

/// Send `signal` to a running child.
pub(crate) fn signal<S>(ctx: &mut Ctx<S>, id: ChildId, signal: nix::sys::signal::Signal) -> bool {
    match ctx.children.running.get(&id) {
        Some(r) if r.status.is_none() && !matches!(r.report, Report::Reaped) => {
            let pid = nix::unistd::Pid::from_raw(r.child.id() as i32);
            nix::sys::signal::kill(pid, signal).is_ok()
        }
        _ => false,
    }
}

/// Send `signal` to the process group a running child leads (started with
/// `process_group(0)`), so what it started goes too.
pub(crate) fn signal_group<S>(
    ctx: &mut Ctx<S>,
    id: ChildId,
    signal: nix::sys::signal::Signal,
) -> bool {
    match ctx.children.running.get(&id) {
        Some(r) if r.status.is_none() && !matches!(r.report, Report::Reaped) => {
            let pid = nix::unistd::Pid::from_raw(r.child.id() as i32);
            nix::sys::signal::killpg(pid, signal).is_ok()
        }
        _ => false,
    }
}

pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is shared.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl<S: 'static> Listener<S> for PipeListener {
    fn handle_event(&mut self, state: &mut S, ctx: &mut Ctx<S>, _event: &Event) -> Flow {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match self.rx.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(r) = ctx.children.running.get_mut(&self.id) {
                        let sink = match self.pipe {
                            Pipe::Stdout => &mut r.stdout,
                            Pipe::Stderr => &mut r.stderr,
                        };
                        let room = CAPTURE_LIMIT.saturating_sub(sink.len()).min(n);
                        sink.extend_from_slice(&buf[..room]);
                        r.dropped += n - room;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("reading a child's pipe failed: {e}");
                    break;
                }
            }
        }
        // EOF (or a broken pipe): this pipe is done.
        let _ = state;
        Flow::Close
    }

    fn close(&mut self, state: &mut S, ctx: &mut Ctx<S>) {
        if let Some(r) = ctx.children.running.get_mut(&self.id) {
            r.pipe_tokens.retain(|(pipe, _)| *pipe != self.pipe);
        }
        finish_if_done(state, ctx, self.id);
    }
}

impl<S: 'static> Listener<S> for ExitListener {
    fn handle_event(&mut self, state: &mut S, ctx: &mut Ctx<S>, _event: &Event) -> Flow {
        let _ = &self.pidfd;
        let Some(r) = ctx.children.running.get_mut(&self.id) else {
            return Flow::Close;
        };
        match r.child.try_wait() {
            Ok(Some(status)) => {
                r.status = Some(status);
                r.exit_token = None;
                let id = self.id;
                if !r.pipe_tokens.is_empty() {
                    ctx.after(LINGER, move |state: &mut S, ctx: &mut Ctx<S>| {
                        let tokens = ctx
                            .children
                            .running
                            .get_mut(&id)
                            .map(|r| std::mem::take(&mut r.pipe_tokens))
                            .unwrap_or_default();
                        for (_, token) in tokens {
                            ctx.remove(token);
                        }
                        finish_if_done(state, ctx, id);
                    });
                }
                finish_if_done(state, ctx, id);
                Flow::Close
            }
            Ok(None) => Flow::Continue, // spurious wake-up
            Err(e) => {
                log::warn!("waiting for child {} failed: {e}", r.child.id());
                Flow::Continue
            }
        }
    }
}

fn finish_if_done<S>(state: &mut S, ctx: &mut Ctx<S>, id: ChildId) {
    let Some(r) = ctx.children.running.get_mut(&id) else {
        return;
    };
    if !r.pipe_tokens.is_empty() {
        return;
    }
    // A detached child that wrote to stdout and closed its pipes has started, whether
    // or not it has exited since.
    if matches!(r.report, Report::Start(_)) && !r.stdout.is_empty() {
        let Report::Start(on_start) = std::mem::replace(&mut r.report, Report::Reaped) else {
            return;
        };
        let started = Start::Running {
            pid: r.child.id(),
            stdout: std::mem::take(&mut r.stdout),
            stderr: std::mem::take(&mut r.stderr),
        };
        if r.status.is_some() {
            ctx.children.running.remove(&id);
        }
        on_start(state, ctx, started);
        return;
    }
    if r.status.is_none() {
        return;
    }
    let Some(r) = ctx.children.running.remove(&id) else {
        return;
    };
    let Some(status) = r.status else { return };
    let out = ChildOutput {
        pid: r.child.id(),
        status,
        stdout: r.stdout,
        stderr: r.stderr,
        dropped: r.dropped,
    };
    match r.report {
        Report::Exit(on_exit) => on_exit(state, ctx, out),
        Report::Start(on_start) => on_start(state, ctx, Start::Exited(out)),
        Report::Reaped => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evloop::EventLoop;
    use std::path::Path;

    #[derive(Default)]
    struct Seen {
        outputs: Vec<ChildOutput>,
        starts: Vec<Start>,
    }

    /// Runs `script` detached (with `env`) until its start is reported; the loop, to go
    /// on with.
    fn start_detached(
        program: &str,
        script: &str,
        env: &[(&str, &str)],
    ) -> (EventLoop<Seen>, Seen) {
        let mut ev: EventLoop<Seen> = EventLoop::new().unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let exec = Exec::new(Path::new(program), &["-c".into(), script.into()], &env).unwrap();
        spawn_detached(ev.ctx(), &exec, |s: &mut Seen, _ctx, start| {
            s.starts.push(start)
        })
        .unwrap();
        let mut seen = Seen::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while seen.starts.is_empty() {
            assert!(std::time::Instant::now() < deadline, "no start reported");
            ev.run_once(&mut seen, Some(Duration::from_millis(100)))
                .unwrap();
        }
        (ev, seen)
    }

    fn is_zombie_or_gone(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    #[test]
    fn detached_child_is_reported_running_once_it_closed_its_pipes_then_reaped() {
        let (mut ev, mut seen) = start_detached(
            "sh",
            "echo started $GREETING; exec >/dev/null 2>&1; sleep 1",
            &[("GREETING", "hi")],
        );
        let Some(Start::Running { pid, stdout, .. }) = seen.starts.pop() else {
            panic!("expected a running start");
        };
        assert_eq!(stdout, b"started hi\n");
        assert!(!is_zombie_or_gone(pid), "still running when reported");
        assert!(
            ev.ctx().children().is_empty(),
            "a started child is no longer owned"
        );
        assert!(!signal(ev.ctx(), 1, nix::sys::signal::Signal::SIGKILL));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(std::time::Instant::now() < deadline, "never reaped");
            ev.run_once(&mut seen, Some(Duration::from_millis(100)))
                .unwrap();
        }
        assert!(seen.starts.is_empty(), "reported once");
    }

    #[test]
    fn detached_child_that_exits_without_starting_gives_its_status_and_stderr() {
        let (_ev, mut seen) = start_detached("/bin/sh", "echo 'bad settings' >&2; exit 1", &[]);
        let Some(Start::Exited(out)) = seen.starts.pop() else {
            panic!("expected an exit");
        };
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(out.stderr, b"bad settings\n");
        assert!(
            is_zombie_or_gone(out.pid)
                && !std::path::Path::new(&format!("/proc/{}", out.pid)).exists()
        );
    }

    #[test]
    fn detached_child_that_cannot_be_executed_exits_127_with_the_cause() {
        let (_ev, mut seen) = start_detached("/nonexistent/program", "true", &[]);
        let Some(Start::Exited(out)) = seen.starts.pop() else {
            panic!("expected an exit");
        };
        assert_eq!(out.status.code(), Some(127));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("could not execute /nonexistent/program: "),
            "{stderr}"
        );
        assert!(Exec::new(Path::new("no-such-program-here"), &[], &[]).is_err());
    }

    fn run_child(script: &str) -> ChildOutput {
        let mut ev: EventLoop<Seen> = EventLoop::new().unwrap();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script);
        spawn(ev.ctx(), cmd, |s: &mut Seen, ctx, out| {
            s.outputs.push(out);
            ctx.stop();
        })
        .unwrap();
        let mut seen = Seen::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ev.ctx().is_stopping() {
            assert!(std::time::Instant::now() < deadline, "child never finished");
            ev.run_once(&mut seen, Some(Duration::from_millis(100)))
                .unwrap();
        }
        seen.outputs.pop().unwrap()
    }

    #[test]
    fn output_larger_than_a_pipe_is_drained() {
        // 1 MiB on stdout would block forever if the pipe were read only after exit.
        let out = run_child("head -c 1048576 /dev/zero; echo err >&2; exit 3");
        assert_eq!(out.stdout.len(), 1_048_576);
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn background_grandchild_cannot_hold_the_result() {
        let started = std::time::Instant::now();
        let out = run_child("sleep 30 & echo done");
        assert_eq!(out.stdout, b"done\n");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
