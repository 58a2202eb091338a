//! One plugin operation run to its end, synchronously: for processes that have no loop
//! to keep (the configuration check of `saltpeterctl config check` and of the daemon's
//! start-up, `saltpeterctl executor test`). The daemon's `blocking` role runs the same
//! command with its pipes in its loop (`roles/blocking/plugin.rs`).
//!
//! The request goes in as a file (a memfd) on stdin, so nothing waits on a plugin that
//! does not read; stdout and stderr are drained together with `poll` (a chatty stderr
//! cannot block the plugin), stdout kept up to [`MAX_STDOUT`] and stderr up to
//! [`MAX_STDERR_LOGGED`], the rest counted. At the deadline the plugin's process group is
//! killed; once it has exited, whatever it left in its group goes too.

use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::protocol::RawOutput;
use super::{MAX_STDERR_LOGGED, MAX_STDOUT};

/// Why an operation could not even start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the request file: {0}")]
    Input(std::io::Error),
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
}

/// `bytes` as a readable in-memory file for a child's stdin.
pub fn stdin_file(bytes: &[u8]) -> std::io::Result<std::fs::File> {
    let fd = nix::sys::memfd::memfd_create(
        c"saltpeter-executor-request",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(file)
}

/// Kill what is left of the process group `pid` leads (a plugin's `ssh` children).
pub fn kill_group(pid: u32) {
    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
}

/// Run `cmd` with `request` on stdin until it exits or `deadline` passes.
pub fn run(mut cmd: Command, request: &[u8], deadline: Duration) -> Result<RawOutput, StartError> {
    let stdin = stdin_file(request).map_err(StartError::Input)?;
    cmd.stdin(Stdio::from(stdin))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .map_err(|source| StartError::Spawn { program, source })?;
    let pid = child.id();
    let mut out = RawOutput::default();
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        kill_group(pid);
        let _ = child.wait();
        return Ok(out);
    };
    let until = Instant::now() + deadline;
    let mut open = [true, true];
    let mut buf = vec![0u8; 64 * 1024];
    let mut stderr_dropped = 0usize;
    while open[0] || open[1] {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            out.deadline = Some(deadline.as_secs());
            break;
        }
        let ms = u16::try_from(left.as_millis().min(10_000)).unwrap_or(10_000);
        let mut fds = Vec::new();
        if open[0] {
            fds.push(PollFd::new(stdout.as_fd(), PollFlags::POLLIN));
        }
        if open[1] {
            fds.push(PollFd::new(stderr.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let mut which = ready.into_iter();
        if open[0] && which.next() == Some(true) {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => open[0] = false,
                Ok(n) => keep(&mut out.stdout, &mut out.dropped, &buf[..n], MAX_STDOUT),
            }
        }
        if open[1] && which.next() == Some(true) {
            match stderr.read(&mut buf) {
                Ok(0) | Err(_) => open[1] = false,
                Ok(n) => keep(
                    &mut out.stderr,
                    &mut stderr_dropped,
                    &buf[..n],
                    MAX_STDERR_LOGGED,
                ),
            }
        }
    }
    if out.deadline.is_some() {
        kill_group(pid);
    }
    // Its pipes are closed: it has exited or is about to (a deadline killed it).
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < until + Duration::from_secs(2) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                kill_group(pid);
                out.deadline.get_or_insert(deadline.as_secs());
                break child.wait().ok();
            }
            Err(_) => break None,
        }
    };
    kill_group(pid);
    out.code = status.and_then(|s| s.code());
    Ok(out)
}

/// Append `bytes` to `kept` up to `limit`; count the rest in `dropped`.
fn keep(kept: &mut Vec<u8>, dropped: &mut usize, bytes: &[u8], limit: usize) {
    let room = limit.saturating_sub(kept.len()).min(bytes.len());
    kept.extend_from_slice(&bytes[..room]);
    *dropped += bytes.len() - room;
}
