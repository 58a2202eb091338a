//! Child processes whose stdout and stderr are drained while they run.
//!
//! `spawn` starts a command with both pipes registered in the loop (non-blocking) and a
//! pidfd that becomes readable when the process exits, so nothing waits and a chatty child
//! never blocks on a full pipe. When the process has exited and both pipes reached EOF the
//! callback gets the status and the captured output. A grandchild that keeps a pipe open
//! after the child exited cannot hold the callback back for more than `LINGER`.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use mio::event::Event;
use mio::unix::SourceFd;
use mio::unix::pipe::Receiver;
use mio::{Interest, Token};

use super::{Ctx, Flow, Listener};

/// Captured per stream at most; the rest is counted, not kept.
pub const CAPTURE_LIMIT: usize = 8 * 1024 * 1024;
/// How long pipes may stay open after the process exited.
pub const LINGER: Duration = Duration::from_secs(2);

pub type ChildId = u64;

/// What a finished child left behind.
#[derive(Debug)]
pub struct ChildOutput {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes beyond `CAPTURE_LIMIT` that were read and dropped.
    pub dropped: usize,
}

type OnExit<S> = Box<dyn FnOnce(&mut S, &mut Ctx<S>, ChildOutput)>;

struct Running<S> {
    child: Child,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    dropped: usize,
    /// Pipes still open, with their listeners' tokens.
    pipe_tokens: Vec<(Pipe, Token)>,
    exit_token: Option<Token>,
    status: Option<ExitStatus>,
    on_exit: Option<OnExit<S>>,
}

/// The children of one loop.
pub struct Children<S> {
    running: HashMap<ChildId, Running<S>>,
    next_id: ChildId,
}

impl<S> Default for Children<S> {
    fn default() -> Self {
        Children {
            running: HashMap::new(),
            next_id: 1,
        }
    }
}

impl<S> Children<S> {
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub fn pid(&self, id: ChildId) -> Option<u32> {
        self.running.get(&id).map(|r| r.child.id())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Stdout,
    Stderr,
}

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
pub fn spawn<S: 'static>(
    ctx: &mut Ctx<S>,
    cmd: Command,
    on_exit: impl FnOnce(&mut S, &mut Ctx<S>, ChildOutput) + 'static,
) -> io::Result<ChildId> {
    spawn_with_stdin(ctx, cmd, Stdio::null(), on_exit)
}

/// [`spawn`] with `stdin` as the child's input (a file already written, e.g. a memfd:
/// nothing is written to the child from the loop).
pub fn spawn_with_stdin<S: 'static>(
    ctx: &mut Ctx<S>,
    mut cmd: Command,
    stdin: Stdio,
    on_exit: impl FnOnce(&mut S, &mut Ctx<S>, ChildOutput) + 'static,
) -> io::Result<ChildId> {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let id = ctx.children.next_id;
    ctx.children.next_id += 1;
    let pidfd = pidfd_open(child.id())?;
    let mut pipe_tokens = Vec::new();
    let pipes = [
        (Pipe::Stdout, child.stdout.take().map(Receiver::from)),
        (Pipe::Stderr, child.stderr.take().map(Receiver::from)),
    ];
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
            on_exit: Some(Box::new(on_exit)),
        },
    );
    Ok(id)
}

/// Send `signal` to a running child.
pub fn signal<S>(ctx: &mut Ctx<S>, id: ChildId, signal: nix::sys::signal::Signal) -> bool {
    match ctx.children.running.get(&id) {
        Some(r) if r.status.is_none() => {
            let pid = nix::unistd::Pid::from_raw(r.child.id() as i32);
            nix::sys::signal::kill(pid, signal).is_ok()
        }
        _ => false,
    }
}

pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
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
    let done = matches!(
        ctx.children.running.get(&id),
        Some(r) if r.status.is_some() && r.pipe_tokens.is_empty()
    );
    if !done {
        return;
    }
    let Some(mut r) = ctx.children.running.remove(&id) else {
        return;
    };
    let Some(status) = r.status else { return };
    if let Some(on_exit) = r.on_exit.take() {
        on_exit(
            state,
            ctx,
            ChildOutput {
                pid: r.child.id(),
                status,
                stdout: r.stdout,
                stderr: r.stderr,
                dropped: r.dropped,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evloop::EventLoop;

    #[derive(Default)]
    struct Seen {
        outputs: Vec<ChildOutput>,
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
