//! The children's table: what the loop knows of each child it runs (its process, the
//! output captured so far, the pipes still open, whom to tell at the end). State only;
//! `child` starts the processes and changes the table from its listeners. The callbacks
//! are generic over the context they are handed (the loop's `Ctx`), so this names
//! nothing of the loop.

use std::collections::HashMap;
use std::io;
use std::process::{Child, ExitStatus};

use mio::Token;

pub(crate) type ChildId = u64;

/// What a finished child left behind.
#[derive(Debug)]
pub(crate) struct ChildOutput {
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes beyond `CAPTURE_LIMIT` that were read and dropped.
    pub dropped: usize,
}

/// How a detached child's start went.
#[derive(Debug)]
pub(crate) enum Start {
    /// It wrote to stdout and closed its pipes: it runs on its own (it may even have
    /// exited since).
    Running {
        pid: u32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// It exited without saying it started.
    Exited(ChildOutput),
}

type OnExit<S, C> = Box<dyn FnOnce(&mut S, &mut C, ChildOutput)>;
type OnStart<S, C> = Box<dyn FnOnce(&mut S, &mut C, Start)>;

/// What to tell the loop's owner, and when.
pub(super) enum Report<S, C> {
    /// At the exit, with the output.
    Exit(OnExit<S, C>),
    /// At the start of a detached child, or at its exit if it never started.
    Start(OnStart<S, C>),
    /// Nothing more: a detached child that started, waiting to be reaped.
    Reaped,
}

/// A child process: started by `Command`, or forked without waiting for its exec.
pub(super) enum Proc {
    Command(Child),
    Forked(nix::unistd::Pid),
}

impl Proc {
    pub(super) fn id(&self) -> u32 {
        match self {
            Proc::Command(child) => child.id(),
            Proc::Forked(pid) => pid.as_raw() as u32,
        }
    }

    /// Reap it if it has exited.
    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Proc::Command(child) => child.try_wait(),
            Proc::Forked(pid) => loop {
                let mut status = 0;
                // SAFETY: waitpid writes the status of our own child into `status`.
                let got =
                    unsafe { nix::libc::waitpid(pid.as_raw(), &mut status, nix::libc::WNOHANG) };
                match got {
                    0 => return Ok(None),
                    p if p > 0 => return Ok(Some(ExitStatus::from_raw(status))),
                    _ => {
                        let err = io::Error::last_os_error();
                        if err.kind() != io::ErrorKind::Interrupted {
                            return Err(err);
                        }
                    }
                }
            },
        }
    }
}

pub(super) struct Running<S, C> {
    pub(super) child: Proc,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    pub(super) dropped: usize,
    /// Pipes still open, with their listeners' tokens.
    pub(super) pipe_tokens: Vec<(Pipe, Token)>,
    pub(super) exit_token: Option<Token>,
    pub(super) status: Option<ExitStatus>,
    pub(super) report: Report<S, C>,
}

/// The children of one loop.
pub(crate) struct Children<S, C> {
    pub(super) running: HashMap<ChildId, Running<S, C>>,
    pub(super) next_id: ChildId,
}

impl<S, C> Default for Children<S, C> {
    fn default() -> Self {
        Children {
            running: HashMap::new(),
            next_id: 1,
        }
    }
}

impl<S, C> Children<S, C> {
    /// Children still owned by the loop (detached ones that started are not).
    pub(crate) fn len(&self) -> usize {
        self.running
            .values()
            .filter(|r| !matches!(r.report, Report::Reaped))
            .count()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pipe {
    Stdout,
    Stderr,
}
