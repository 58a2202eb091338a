//! Detaching from the launcher and setting up the wrapper's own log.
//!
//! Two ways to run on its own, both before any thread exists:
//! - `--daemonize` (Salt): `cmd.run_all` waits for the wrapper's stdout and stderr to
//!   close, so for each run of `SP_RUN` the launcher forks, the child calls `setsid` and
//!   forks again (the grandchild can never regain a controlling terminal), and the
//!   grandchild points fds 0-2 at `/dev/null` (2 and 1 at the log file with `--log`,
//!   which every run appends to) and tells the launcher its pid through a pipe. The
//!   launcher prints one line per run and exits once all are started: at once.
//! - `--detach` (the local executor, which reaps the wrapper itself): no fork. The
//!   wrapper leaves the launcher's session first thing ([`leave_session`]), and once its
//!   start-up checks passed prints the same line and points fds 0-2 away from the
//!   launcher's pipes ([`detach`]); the launcher takes the line and the pipes' end as the
//!   launch's success, and an exit before them as its failure (the error on stderr). One
//!   process per target instead of three.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, dup2_stderr, dup2_stdin, dup2_stdout, fork, getsid, setsid};

use super::error::WrapperError;

fn open_log(path: &Path) -> Result<File, WrapperError> {
    // The log names runs, machines and errors: readable by the wrapper's user only.
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
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
    // Not `println!`: a launcher whose reader went away must not panic halfway through
    // its runs.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "saltpeter-wrapper: run {run} continues in the background (pid {pid})"
    );
    let _ = stdout.flush();
}

/// `--daemonize`: start one background wrapper per run and end the launcher. Returns
/// only in the background wrappers, each with its run; the launcher prints one line per
/// run (stdout when it started, stderr when it could not) and exits 0 when every run
/// started, 1 otherwise. An error before anything forked (the log file) is returned to
/// the launcher: nothing was started.
pub(super) fn launch_in_background(log: Option<&Path>, runs: &[u64]) -> Result<u64, WrapperError> {
    // Open everything first so errors still reach Salt through our stderr.
    let outputs = Detached::open(log)?;
    let mut failed = false;
    for &run in runs {
        match start_in_background(&outputs) {
            Ok(Started::Launcher { pid }) => announce(run, pid),
            Ok(Started::Wrapper) => return Ok(run),
            Err(e) => {
                failed = true;
                let _ = writeln!(std::io::stderr(), "saltpeter-wrapper: run {run}: {e}");
            }
        }
    }
    std::process::exit(i32::from(failed));
}

/// Which side of [`start_in_background`] this process is on.
enum Started {
    /// The launcher, once the wrapper `pid` runs on its own.
    Launcher { pid: u32 },
    /// The background wrapper itself.
    Wrapper,
}

/// One background wrapper: fork; the child calls `setsid` and forks again (the
/// grandchild can never regain a controlling terminal) and exits; the grandchild points
/// fds 0-2 away from the launcher and is the wrapper. A pipe tells the launcher how it
/// went: the wrapper's pid once it runs on its own, or what failed.
fn start_in_background(outputs: &Detached) -> Result<Started, WrapperError> {
    let fail = |step| move |err| WrapperError::Daemonize { step, err };
    let io_fail = |step| {
        move |e: std::io::Error| WrapperError::Daemonize {
            step,
            err: nix::Error::from_raw(e.raw_os_error().unwrap_or(0)),
        }
    };
    // Close-on-exec, so the wrapper's command never inherits it.
    let (mut report_rx, report_tx) = std::io::pipe().map_err(io_fail("pipe"))?;
    let _ = std::io::stdout().flush();
    // SAFETY: called from `main` before any thread exists, so the child is a complete
    // copy of a single-threaded process.
    match unsafe { fork() }.map_err(fail("first fork"))? {
        ForkResult::Parent { child } => {
            drop(report_tx);
            let mut report = String::new();
            let read = report_rx.read_to_string(&mut report);
            let status = waitpid(child, None);
            let pid = report.strip_prefix("started ").map(str::parse::<u32>);
            match (read, pid) {
                (Err(e), _) => Err(WrapperError::Background(format!(
                    "could not read how the background process started: {e}"
                ))),
                (Ok(_), Some(Ok(pid))) => Ok(Started::Launcher { pid }),
                (Ok(_), None) if !report.is_empty() => Err(WrapperError::Background(report)),
                (Ok(_), _) => Err(WrapperError::Background(format!(
                    "the background process ended without saying it started ({status:?})"
                ))),
            }
        }
        ForkResult::Child => {
            drop(report_rx);
            in_background_child(outputs, report_tx)
        }
    }
}

/// The first child: a session of its own, then the wrapper in a grandchild. Returns only
/// in the grandchild; the child itself exits once it forked (or reports why not).
fn in_background_child(
    outputs: &Detached,
    mut report: std::io::PipeWriter,
) -> Result<Started, WrapperError> {
    if let Err(e) = setsid() {
        report_and_exit(&mut report, format!("could not daemonize (setsid): {e}"));
    }
    // SAFETY: as in `start_in_background`; still single-threaded.
    match unsafe { fork() } {
        Err(e) => report_and_exit(
            &mut report,
            format!("could not daemonize (second fork): {e}"),
        ),
        Ok(ForkResult::Parent { .. }) => std::process::exit(0),
        Ok(ForkResult::Child) => {}
    }
    if let Err(e) = outputs.redirect() {
        // fds 0-2 may be half redirected: the launcher says it.
        report_and_exit(&mut report, e.to_string());
    }
    // The launcher reads to the end: this process's end of the pipe must close too.
    let _ = report.write_all(format!("started {}", std::process::id()).as_bytes());
    drop(report);
    Ok(Started::Wrapper)
}

/// A background process that could not become the wrapper: its reason to the launcher.
fn report_and_exit(report: &mut std::io::PipeWriter, text: String) -> ! {
    let _ = report.write_all(text.as_bytes());
    std::process::exit(1);
}

/// Leave the launcher's session and process group (a kill of the daemon's group, or a
/// hang-up of its terminal, must not reach the wrapper). A process that already leads a
/// session stays in it; one that leads a process group cannot start a session, and says so.
pub(super) fn leave_session() -> Result<(), WrapperError> {
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
pub(super) fn detach(log: Option<&Path>, run: u64) -> Result<(), WrapperError> {
    let outputs = Detached::open(log)?;
    announce(run, std::process::id());
    outputs.redirect()
}
/// Timestamped log lines to `log` (appended) or stderr; level from `SP_WRAPPER_LOG`
/// (env_logger syntax), `info` by default.
pub(super) fn init_logging(log: Option<&Path>) -> Result<(), WrapperError> {
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
