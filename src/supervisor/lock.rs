//! The state directory's lock: one daemon per state directory, for its whole life.
//!
//! `<state>/saltpeter.lock` is `flock`ed (exclusive) by the supervisor before it touches
//! the runtime directory, and held until it has removed its admin socket and pid file at
//! exit; the file holds the holder's pid, for the error message. A daemon started while
//! another one still holds it (a restart inside the first one's stop) waits for it to
//! exit, up to [`WAIT`], and then exits 2 naming the lock and the holder. The descriptor is
//! close-on-exec, so no child (nor a local wrapper, which outlives the daemon) holds it.
//! The kernel drops an `flock` with its last descriptor: a crashed daemon leaves no lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::supervisor::start_error::StartError;

/// The lock's file name in the state directory.
pub(crate) const LOCK_FILE: &str = "saltpeter.lock";
/// How long a new daemon waits for the one that holds the lock to exit.
pub(crate) const WAIT: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(100);

/// The held lock; dropping it releases it.
pub(crate) struct StateLock {
    _lock: Flock<File>,
}

/// The wait: [`WAIT`], or `SP_LOCK_WAIT_S` seconds (tests).
pub(crate) fn wait() -> Duration {
    std::env::var("SP_LOCK_WAIT_S")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(WAIT, Duration::from_secs)
}

/// Take the lock of `state`, waiting up to `wait` for a holder to exit.
pub(crate) fn acquire(state: &Path, wait: Duration) -> Result<StateLock, StartError> {
    let path = state.join(LOCK_FILE);
    let deadline = Instant::now() + wait;
    let mut told = false;
    loop {
        let file = open(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                record_pid(&mut lock).map_err(|source| StartError::StateDir {
                    path: path.clone(),
                    source,
                })?;
                return Ok(StateLock { _lock: lock });
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                let holder = holder(&path);
                if Instant::now() >= deadline {
                    return Err(StartError::Locked { path, holder, wait });
                }
                if !told {
                    log::warn!(
                        "the state directory is in use by another Saltpeter daemon ({holder}, \
                         lock {}); waiting up to {}s for it to exit",
                        path.display(),
                        wait.as_secs()
                    );
                    told = true;
                }
                std::thread::sleep(RETRY);
            }
            Err((_, errno)) => {
                return Err(StartError::StateDir {
                    path,
                    source: std::io::Error::from(errno),
                });
            }
        }
    }
}

fn open(path: &PathBuf) -> Result<File, StartError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| StartError::StateDir {
            path: path.clone(),
            source,
        })
}

fn record_pid(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())?;
    file.sync_data()
}

/// "pid N" as the holder wrote it, or what is known when it cannot be read.
fn holder(path: &Path) -> String {
    let mut text = String::new();
    let read = File::open(path).and_then(|f| f.take(32).read_to_string(&mut text));
    match (read, text.trim().parse::<u32>()) {
        (Ok(_), Ok(pid)) => format!("pid {pid}"),
        _ => "pid unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_after_the_wait_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let first = acquire(tmp.path(), Duration::ZERO).unwrap();
        let err = acquire(tmp.path(), Duration::from_millis(250))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(LOCK_FILE), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        acquire(tmp.path(), Duration::ZERO).unwrap();
    }

    #[test]
    fn a_holder_that_exits_during_the_wait_lets_the_next_one_in() {
        let tmp = tempfile::tempdir().unwrap();
        let first = acquire(tmp.path(), Duration::ZERO).unwrap();
        let dir = tmp.path().to_path_buf();
        let waiter = std::thread::spawn(move || acquire(&dir, Duration::from_secs(30)).is_ok());
        std::thread::sleep(Duration::from_millis(300));
        drop(first);
        assert!(waiter.join().unwrap());
    }
}
