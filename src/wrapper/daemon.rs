//! Detaching from the launcher and setting up the wrapper's own log.
//!
//! Two ways to run on its own, both before any thread exists:
//! - `--daemonize` (Salt): `cmd.run_all` waits for the wrapper's stdout and stderr to
//!   close, so the wrapper forks, the first process prints one line and exits 0 at once,
//!   the child calls `setsid` and forks again (the grandchild can never regain a
//!   controlling terminal), and the grandchild points fds 0-2 at `/dev/null` (2 and 1 at
//!   the log file with `--log`).
//! - `--detach` (the local executor, which reaps the wrapper itself): no fork. The
//!   wrapper leaves the launcher's session first thing ([`leave_session`]), and once its
//!   start-up checks passed prints the same line and points fds 0-2 away from the
//!   launcher's pipes ([`detach`]); the launcher takes the line and the pipes' end as the
//!   launch's success, and an exit before them as its failure (the error on stderr). One
//!   process per target instead of three.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

use nix::unistd::{ForkResult, Pid, dup2_stderr, dup2_stdin, dup2_stdout, fork, getsid, setsid};

use super::WrapperError;

fn open_log(path: &Path) -> Result<File, WrapperError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|err| WrapperError::LogFile {
            path: path.to_path_buf(),
            err,
        })
}

/// What fds 0-2 become once the wrapper runs on its own: `/dev/null`, and the log for
/// 1 and 2 when there is one. Opened while errors still reach the launcher.
struct Detached {
    log: Option<File>,
    null: File,
}

impl Detached {
    fn open(log: Option<&Path>) -> Result<Detached, WrapperError> {
        let log = log.map(open_log).transpose()?;
        let null = File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| WrapperError::Daemonize {
                step: "open /dev/null",
                err: nix::Error::from_raw(e.raw_os_error().unwrap_or(0)),
            })?;
        Ok(Detached { log, null })
    }

    /// Point fds 0-2 away from the launcher (closing its pipes or terminal).
    fn redirect(&self) -> Result<(), WrapperError> {
        let fail = |step| move |err| WrapperError::Daemonize { step, err };
        let out = self.log.as_ref().unwrap_or(&self.null);
        dup2_stdin(&self.null).map_err(fail("redirect stdin"))?;
        dup2_stdout(out).map_err(fail("redirect stdout"))?;
        dup2_stderr(out).map_err(fail("redirect stderr"))?;
        debug_assert!(
            self.null.as_raw_fd() > 2,
            "/dev/null was opened above fds 0-2"
        );
        Ok(())
    }
}

/// The one line the launcher sees when the wrapper goes on alone.
fn announce(run: u64, pid: u32) {
    println!("saltpeter-wrapper: run {run} continues in the background (pid {pid})");
    let _ = std::io::stdout().flush();
}

pub fn daemonize(log: Option<&Path>, run: u64) -> Result<(), WrapperError> {
    let fail = |step| move |err| WrapperError::Daemonize { step, err };
    // Open everything first so errors still reach Salt through our stderr.
    let outputs = Detached::open(log)?;
    let _ = std::io::stdout().flush();
    // SAFETY: called from `main` before any thread exists, so the child is a complete
    // copy of a single-threaded process.
    match unsafe { fork() }.map_err(fail("first fork"))? {
        ForkResult::Parent { child } => {
            announce(run, child.as_raw() as u32);
            std::process::exit(0);
        }
        ForkResult::Child => {}
    }
    setsid().map_err(fail("setsid"))?;
    // SAFETY: as above; still single-threaded.
    match unsafe { fork() }.map_err(fail("second fork"))? {
        ForkResult::Parent { .. } => std::process::exit(0),
        ForkResult::Child => {}
    }
    outputs.redirect()
}

/// Leave the launcher's session and process group (a kill of the daemon's group, or a
/// hang-up of its terminal, must not reach the wrapper). A process that already leads a
/// session stays in it; one that leads a process group cannot start a session, and says so.
pub fn leave_session() -> Result<(), WrapperError> {
    let me = Pid::this();
    if getsid(None).is_ok_and(|sid| sid == me) {
        return Ok(());
    }
    setsid().map(drop).map_err(|err| WrapperError::Daemonize {
        step: "setsid",
        err,
    })
}

/// Run on alone in this process: announce it on stdout, then fds 0-2 to `/dev/null`
/// and the log, which closes the launcher's pipes.
pub fn detach(log: Option<&Path>, run: u64) -> Result<(), WrapperError> {
    let outputs = Detached::open(log)?;
    announce(run, std::process::id());
    outputs.redirect()
}
/// Timestamped log lines to `log` (appended) or stderr; level from `SP_WRAPPER_LOG`
/// (env_logger syntax), `info` by default.
pub fn init_logging(log: Option<&Path>) -> Result<(), WrapperError> {
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(log::LevelFilter::Info)
        .parse_env(env_logger::Env::new().filter("SP_WRAPPER_LOG"))
        .format_timestamp_millis();
    if let Some(path) = log {
        builder.target(env_logger::Target::Pipe(Box::new(open_log(path)?)));
    }
    // A second initialisation (tests calling `main` twice) keeps the first logger.
    let _ = builder.try_init();
    Ok(())
}
