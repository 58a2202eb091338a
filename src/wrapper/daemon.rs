//! Detaching from Salt and setting up the wrapper's own log.
//!
//! `cmd.run_all` waits for the wrapper's stdout and stderr to close, so `--daemonize`
//! forks, the first process prints one line and exits 0 at once, the child calls
//! `setsid` and forks again (the grandchild can never regain a controlling terminal),
//! and the grandchild points fds 0-2 at `/dev/null` (2 and 1 at the log file with
//! `--log`). This runs before any thread exists.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

use nix::unistd::{ForkResult, dup2_stderr, dup2_stdin, dup2_stdout, fork, setsid};

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

pub fn daemonize(log: Option<&Path>, run: u64) -> Result<(), WrapperError> {
    let fail = |step| move |err| WrapperError::Daemonize { step, err };
    // Open everything first so errors still reach Salt through our stderr.
    let log_file = log.map(open_log).transpose()?;
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| WrapperError::Daemonize {
            step: "open /dev/null",
            err: nix::Error::from_raw(e.raw_os_error().unwrap_or(0)),
        })?;
    let _ = std::io::stdout().flush();
    // SAFETY: called from `main` before any thread exists, so the child is a complete
    // copy of a single-threaded process.
    match unsafe { fork() }.map_err(fail("first fork"))? {
        ForkResult::Parent { child } => {
            println!("saltpeter-wrapper: run {run} continues in the background (pid {child})");
            let _ = std::io::stdout().flush();
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
    let out = log_file.as_ref().unwrap_or(&null);
    dup2_stdin(&null).map_err(fail("redirect stdin"))?;
    dup2_stdout(out).map_err(fail("redirect stdout"))?;
    dup2_stderr(out).map_err(fail("redirect stderr"))?;
    debug_assert!(null.as_raw_fd() > 2, "/dev/null was opened above fds 0-2");
    Ok(())
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
