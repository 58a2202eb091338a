//! Starting a program without waiting for its exec: `fork`, then `execve` in the child.
//!
//! `std::process::Command::spawn` returns only once the child has exec'd (through
//! `vfork`, or a pipe that reports the exec's error), so a loop starting many children
//! waits each time until the new child has been scheduled and has replaced its image.
//! On a machine busy with the children already started that wait is most of the time a
//! launch takes: a run of 1,000 local targets spent it 1,000 times in a row. Here the
//! parent returns as soon as the fork did; the child's exec error, if any, arrives on
//! its stderr pipe followed by exit 127, as a shell would report it.
//!
//! Everything the child needs (paths, argument and environment arrays, the error
//! prefix) is built before the fork; between fork and exec the child only calls
//! async-signal-safe functions (`dup2`, `sigprocmask`, `signal`, `execve`, `write`,
//! `_exit`).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::libc;
use nix::unistd::{ForkResult, Pid};

/// A program to start: what `execve` gets, prepared in the parent.
pub(crate) struct Exec {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// "could not execute PROGRAM: ", written before the cause when the exec fails.
    error_prefix: Vec<u8>,
}

/// A started child: its pid and the read ends of its stdout and stderr.
pub(crate) struct Forked {
    pub pid: Pid,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", s.to_string_lossy()),
        )
    })
}

/// `program` as a path: as given when it names a directory, else the first executable
/// of that name in `PATH` (looked up here, not in the child).
fn resolve(program: &Path) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found in PATH", program.display()),
            )
        })
}

impl Exec {
    /// `program` with `args`, in this process's environment plus `env` (which wins).
    pub(crate) fn new(
        program: &Path,
        args: &[OsString],
        env: &[(String, String)],
    ) -> io::Result<Exec> {
        let path = resolve(program)?;
        let mut argv = vec![c_string(program.as_os_str())?];
        for a in args {
            argv.push(c_string(a)?);
        }
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| !env.iter().any(|(name, _)| OsStr::new(name) == k))
            .collect();
        vars.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
        let mut envp = Vec::with_capacity(vars.len());
        for (k, v) in vars {
            let mut entry = k;
            entry.push("=");
            entry.push(v);
            envp.push(c_string(&entry)?);
        }
        Ok(Exec {
            error_prefix: format!("could not execute {}: ", path.display()).into_bytes(),
            program: c_string(path.as_os_str())?,
            argv,
            envp,
        })
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// Fork and exec `exec` with stdin on `/dev/null` and stdout and stderr on new pipes.
pub(crate) fn spawn(exec: &Exec) -> io::Result<Forked> {
    let null = std::fs::File::open("/dev/null")?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let argv: Vec<*const libc::c_char> = exec
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = exec
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let fds = [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    // SAFETY: the loops that call this run one thread, so the child is a complete copy
    // of a single-threaded process; until it execs or exits it touches only what was
    // prepared above and calls only async-signal-safe functions.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        ForkResult::Child => {
            // SAFETY: as above: raw calls on descriptors and pointers that stay valid
            // in this copy; every failure ends in `_exit`.
            unsafe { exec_child(exec, &argv, &envp, fds) }
        }
        ForkResult::Parent { child } => Ok(Forked {
            pid: child,
            stdout: out_r,
            stderr: err_r,
        }),
    }
}

/// The child's side: stdio in place, the signal state a new program expects, exec.
///
/// # Safety
/// Only in the child of `fork`, with `argv` and `envp` null-terminated arrays of
/// pointers into `exec`.
unsafe fn exec_child(
    exec: &Exec,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: [libc::c_int; 3],
) -> ! {
    // SAFETY: see the caller; each call is async-signal-safe.
    unsafe {
        // A source among 0-2 (a launcher started with one of them closed) would be
        // overwritten by an earlier dup2: lift it above 2 first.
        let mut fds = fds;
        for fd in fds.iter_mut() {
            if *fd <= 2 {
                *fd = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3);
                if *fd < 0 {
                    libc::_exit(127);
                }
            }
        }
        for (target, fd) in fds.into_iter().enumerate() {
            // dup2 clears close-on-exec on the copy; the originals close at exec.
            if libc::dup2(fd, target as libc::c_int) < 0 {
                libc::_exit(127);
            }
        }
        // Rust ignores SIGPIPE and a handler may have masked signals: a new program
        // starts with the defaults, as `Command` gives it.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::execve(exec.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        let cause = nix::errno::Errno::last().desc();
        let _ = libc::write(
            2,
            exec.error_prefix.as_ptr().cast(),
            exec.error_prefix.len(),
        );
        let _ = libc::write(2, cause.as_ptr().cast(), cause.len());
        let _ = libc::write(2, b"\n".as_ptr().cast(), 1);
        libc::_exit(127)
    }
}
