//! One `ssh` child with a deadline, and a bounded pool of them.
//!
//! A [`Session`] owns its child from spawn to reap. Threads drain both pipes (stdout as
//! bounded lines handed over a channel, stderr's first [`STDERR_KEPT`] bytes), so ssh
//! never blocks on a full pipe and no read of ours waits past the deadline; a watchdog
//! thread kills the child at the deadline, which ends a write blocked on its stdin.
//! [`Session::finish`] (or a drop) always reaps the child: nothing the plugin started
//! outlives it.
//!
//! [`for_each`] runs a closure over items on at most `parallel` threads and stops taking
//! new items at a deadline; the items never started are handed back, to be reported.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How much of ssh's stderr is kept for a reason.
const STDERR_KEPT: usize = 16 * 1024;
/// The longest stdout line read from a remote script.
const LINE_MAX: u64 = 4096;
/// Stdout lines kept for the caller; a remote script says a few words.
const LINES_KEPT: usize = 64;
/// How long stderr may stay open once ssh has exited (a process it started may hold it).
const STDERR_WAIT: Duration = Duration::from_secs(2);

/// A running `ssh`.
pub(super) struct Session {
    child: Arc<Mutex<Child>>,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Receiver<Vec<u8>>,
    watchdog: Option<(Sender<()>, JoinHandle<()>)>,
    deadline: Instant,
}

/// How a session ended.
#[derive(Debug)]
pub(super) struct Ended {
    /// The exit code; `None`: killed (at the deadline, or by a signal).
    pub(super) code: Option<i32>,
    /// Killed at its deadline.
    pub(super) timed_out: bool,
    pub(super) stderr: String,
}

fn lock(child: &Mutex<Child>) -> MutexGuard<'_, Child> {
    child
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Stdout lines handed to the session, at most [`LINES_KEPT`]; the rest is read and
/// dropped, so ssh never blocks on a full pipe.
fn read_lines(stdout: ChildStdout, lines: Sender<String>) {
    let mut stdout = BufReader::new(stdout);
    let mut sent = 0;
    loop {
        let mut line = Vec::new();
        match (&mut stdout).take(LINE_MAX).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if sent < LINES_KEPT => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                sent += 1;
                let _ = lines.send(String::from_utf8_lossy(&line).into_owned());
            }
            Ok(_) => {}
        }
    }
}

/// The first [`STDERR_KEPT`] bytes of stderr, once it ends.
fn read_stderr(mut stderr: ChildStderr, out: Sender<Vec<u8>>) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = STDERR_KEPT.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
            }
        }
    }
    let _ = out.send(kept);
}

impl Session {
    /// Start `argv` (program first) with stdin piped when `stdin`, else `/dev/null`.
    pub(super) fn start(
        argv: &[String],
        stdin: bool,
        deadline: Instant,
    ) -> std::io::Result<Session> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("an empty command"))?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("ssh started without its pipes"));
        };
        let stdin = child.stdin.take();
        // Readers of the pipes are never joined: a process ssh started (a ProxyCommand)
        // may hold them open past ssh's exit. The plugin's exit ends them.
        let (line_tx, lines) = channel();
        std::thread::spawn(move || read_lines(stdout, line_tx));
        let (stderr_tx, stderr_text) = channel();
        std::thread::spawn(move || read_stderr(stderr, stderr_tx));
        let child = Arc::new(Mutex::new(child));
        let (done, wait) = channel::<()>();
        let watched = Arc::clone(&child);
        let watchdog = std::thread::spawn(move || {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(left) {
                let mut child = lock(&watched);
                // Not yet reaped: its pid is still its own, the kill cannot hit another.
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = child.kill();
                }
            }
        });
        Ok(Session {
            child,
            stdin,
            stdout: lines,
            stderr: stderr_text,
            watchdog: Some((done, watchdog)),
            deadline,
        })
    }

    /// Write `bytes` on ssh's stdin (a write blocked past the deadline fails: the
    /// watchdog killed ssh).
    pub(super) fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin is closed"))?;
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// Copy exactly `size` bytes of `source` to ssh's stdin.
    pub(super) fn send_file(&mut self, source: &mut impl Read, size: u64) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin is closed"))?;
        let copied = std::io::copy(&mut source.take(size), stdin)?;
        if copied != size {
            return Err(std::io::Error::other(format!(
                "the file ended after {copied} of {size} bytes"
            )));
        }
        stdin.flush()
    }

    /// Close ssh's stdin (the remote command reads its end).
    pub(super) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line (without its newline; at most [`LINE_MAX`] bytes of it);
    /// `None` at the end of the output or at the deadline.
    pub(super) fn read_line(&mut self) -> Option<String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.stdout.recv_timeout(left).ok()
    }

    /// Close stdin, reap ssh (killed at the deadline), take its stderr.
    pub(super) fn finish(mut self) -> Ended {
        self.close_stdin();
        let status = self.reap();
        let timed_out =
            status.is_none_or(|s| s.code().is_none()) && Instant::now() >= self.deadline;
        self.stop_watchdog();
        let stderr = self.stderr.recv_timeout(STDERR_WAIT).unwrap_or_default();
        Ended {
            code: status.and_then(|s| s.code()),
            timed_out,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// Wait for ssh to exit; past the deadline, kill it.
    fn reap(&self) -> Option<ExitStatus> {
        loop {
            let mut child = lock(&self.child);
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() >= self.deadline => {
                    let _ = child.kill();
                    return child.wait().ok();
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            drop(child);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn stop_watchdog(&mut self) {
        if let Some((done, watchdog)) = self.watchdog.take() {
            let _ = done.send(());
            let _ = watchdog.join();
        }
    }
}

impl Drop for Session {
    /// A session dropped without [`Session::finish`] (an early return) still reaps.
    fn drop(&mut self) {
        if self.watchdog.is_some() {
            let mut child = lock(&self.child);
            let _ = child.kill();
            let _ = child.wait();
            drop(child);
            self.stop_watchdog();
        }
    }
}

/// Run `work` on each item, at most `parallel` at once; an item not started by `until`
/// is not started. Returns the items not started.
pub(super) fn for_each<T: Sync>(
    items: &[T],
    parallel: usize,
    until: Instant,
    work: impl Fn(&T) + Sync,
) -> Vec<&T> {
    let next = AtomicUsize::new(0);
    let skipped = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..parallel.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(item) = items.get(i) else { break };
                    if Instant::now() >= until {
                        skipped
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .push(i);
                        continue;
                    }
                    work(item);
                }
            });
        }
    });
    let mut skipped = skipped.into_inner().unwrap_or_else(|p| p.into_inner());
    skipped.sort_unstable();
    skipped.into_iter().filter_map(|i| items.get(i)).collect()
}

/// The most characters of ssh's stderr kept as a reason.
pub(super) const REASON_MAX: usize = 300;

/// ssh's stderr as a reason: the token (if any) masked, lines joined, control characters
/// escaped, at most [`REASON_MAX`] characters.
pub(super) fn reason(stderr: &str, token: &str) -> String {
    let masked = if token.is_empty() {
        stderr.to_string()
    } else {
        stderr.replace(token, "[the token]")
    };
    let lines: Vec<&str> = masked
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    crate::logsafe::clip(&lines.join(" | "), REASON_MAX)
}
