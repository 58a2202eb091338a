//! Creating the four children: socketpairs, inherited fds, the role on the command line.
//!
//! Each child is the daemon binary itself, exec'd with `--role ROLE` and one
//! `--fd NAME=N` per inherited descriptor, so `ps` shows `saltpeter-daemon --role hub` and
//! nothing but the listed fds crosses into the child (everything else is close-on-exec).
//! In the child, before exec: the fds are moved to their numbers, the parent-death signal
//! is set (children die with the supervisor) and a child whose parent already died exits.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::ipc::Role;
use crate::paths::Dirs;

/// First descriptor number handed to children (0-2 are stdio).
const FIRST_CHILD_FD: RawFd = 3;
/// Where descriptors are parked before being moved, above any target number.
const PARK_FD: RawFd = 100;

/// A descriptor a child inherits, by name.
pub(crate) struct NamedFd {
    pub name: &'static str,
    pub fd: OwnedFd,
}

/// Start `exe --role ROLE` with `fds` at 3, 4, ...
pub(crate) fn spawn_role(
    exe: &Path,
    role: Role,
    dirs: &Dirs,
    debug: bool,
    fds: Vec<NamedFd>,
) -> io::Result<Child> {
    let mut moves: Vec<(OwnedFd, RawFd)> = Vec::new();
    let mut cmd = Command::new(exe);
    cmd.arg("--role")
        .arg(role.name())
        .arg("--config")
        .arg(&dirs.config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--runtime-dir")
        .arg(&dirs.runtime);
    if debug {
        cmd.arg("--debug");
    }
    for (i, named) in fds.into_iter().enumerate() {
        let target = FIRST_CHILD_FD + i as RawFd;
        // Park above every target so moving one cannot clobber another.
        // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor or -1; the original stays owned.
        let parked =
            unsafe { nix::libc::fcntl(named.fd.as_raw_fd(), nix::libc::F_DUPFD_CLOEXEC, PARK_FD) };
        if parked < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `parked` is a fresh descriptor owned by nothing else.
        moves.push((unsafe { OwnedFd::from_raw_fd(parked) }, target));
        cmd.arg("--fd").arg(format!("{}={target}", named.name));
    }
    let raw_moves: Vec<(RawFd, RawFd)> = moves.iter().map(|(f, t)| (f.as_raw_fd(), *t)).collect();
    let supervisor = std::process::id() as nix::libc::pid_t;
    cmd.stdin(Stdio::null());
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // system calls (dup2, prctl, getppid, _exit) on values computed before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for (from, to) in &raw_moves {
                if nix::libc::dup2(*from, *to) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGTERM) < 0 {
                return Err(io::Error::last_os_error());
            }
            if nix::libc::getppid() != supervisor {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(moves);
    Ok(child)
}

/// Why a child's `--fd NAME=N` argument cannot be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FdArgError {
    #[error("--fd {arg}: expected NAME=NUMBER")]
    NoNumber { arg: String },
    #[error("--fd {arg}: {num} is not a descriptor number")]
    NotANumber {
        arg: String,
        num: String,
        source: std::num::ParseIntError,
    },
    #[error("--fd {arg}: descriptor {fd} is given twice")]
    Twice { arg: String, fd: RawFd },
    #[error("--fd {arg}: descriptor {fd} is reserved for stdio")]
    Stdio { arg: String, fd: RawFd },
    #[error("--fd {arg}: descriptor {fd} is not open")]
    NotOpen { arg: String, fd: RawFd },
}

/// Turn the `--fd NAME=N` arguments of a child back into owned descriptors.
pub(crate) fn parse_fd_args(args: &[String]) -> Result<Vec<(String, OwnedFd)>, FdArgError> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for arg in args {
        let Some((name, num)) = arg.split_once('=') else {
            return Err(FdArgError::NoNumber { arg: arg.clone() });
        };
        let fd: RawFd = num.parse().map_err(|source| FdArgError::NotANumber {
            arg: arg.clone(),
            num: num.to_string(),
            source,
        })?;
        if !seen.insert(fd) {
            return Err(FdArgError::Twice {
                arg: arg.clone(),
                fd,
            });
        }
        if fd < FIRST_CHILD_FD {
            return Err(FdArgError::Stdio {
                arg: arg.clone(),
                fd,
            });
        }
        // SAFETY: F_GETFD only inspects the descriptor; -1 means it is not open.
        if unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } < 0 {
            return Err(FdArgError::NotOpen {
                arg: arg.clone(),
                fd,
            });
        }
        // SAFETY: the supervisor handed this open descriptor to this process alone, and
        // each number appears once on the command line.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // Keep it from leaking into processes this child starts.
        // SAFETY: F_SETFD on a descriptor we own.
        unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) };
        out.push((name.to_string(), owned));
    }
    Ok(out)
}
