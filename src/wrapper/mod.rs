//! `saltpeter-wrapper`: runs one job on a target machine and reports to the hub
//! (docs/protocols.md, Wrapper <-> hub).
//!
//! Outline:
//! 1. `settings`: validate `SP_URL`, `SP_RUN` and the identity: through Salt, the minion
//!    id and key file on the command line (the hub's challenge is signed with the key);
//!    locally, `SP_MACHINE` and the launch token from `SP_TOKEN_FILE` (read, then deleted)
//!    or `SP_TOKEN`; the token is then removed from the environment and kept in memory only.
//!    `SP_RUN` may list several runs (`launch`): one launch command starts every run due
//!    on a minion. `build`: the executable's SHA-256 and path for `hello`, worked out
//!    once, before forking.
//! 2. `daemon`: with `--daemonize`, fork/setsid/fork for each run so Salt returns at
//!    once; with `--detach` (the local executor), a session of its own and stdio closed,
//!    no fork; logging.
//! 3. `session`: one thread, one mio loop: the hub link (`link`), the running command
//!    (`running`, started by `command`), SIGCHLD/SIGTERM, and timers (heartbeat, kill grace, timeout,
//!    reconnect backoff and `rotation` over several servers, give-up). Output goes through `outbuf` (seq numbers, ack
//!    bookkeeping, memory cap, then `spool` file, then counted loss); `hold` paces its
//!    resending while the server cannot store it (`output_held`). `patience` decides
//!    how long to wait for a lost server: a wrapper that has not started its command
//!    gives up at its slot plus a grace; one whose command runs spools and retries.
//! 4. `files`: private directories and the per-host `flock` overlap lock.
//!
//! The wrapper exits 0 once the hub has answered `done` to its `exited`; the exit codes
//! of failures are listed at [`WrapperError::exit_code`].

mod build;
mod cgroup;
mod command;
mod daemon;
mod error;
mod files;
mod hold;
mod launch;
mod limits;
mod link;
mod outbuf;
mod patience;
mod rotation;
mod running;
mod session;
mod settings;
mod spool;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

pub(crate) use build::Build;
pub use build::sha256_hex;
pub(crate) use error::WrapperError;
pub use files::{lock_dir, lock_file_name, spool_dir};
pub use outbuf::Limits;
pub use session::run;
pub use settings::{Credential, HubUrl, Launch, Minion, Options, Settings, parse_hub_url};
pub(crate) use settings::{
    DEFAULT_GIVE_UP, ENV_STAGE_GRACE, settings_from_env, stage_grace, take_token_file,
};

use crate::wire::wrapper::{ENV_TOKEN, ENV_TOKEN_FILE};
use launch::check_runs;

/// Command line of `saltpeter-wrapper` (the job itself comes from the hub).
#[derive(Debug, Parser)]
#[command(
    name = "saltpeter-wrapper",
    version,
    about = "Runs one Saltpeter job on this host"
)]
pub(crate) struct Args {
    /// Fork into the background and return at once (so Salt returns): one background
    /// wrapper for each run of SP_RUN (a comma-separated list).
    #[arg(long, conflicts_with = "detach")]
    pub daemonize: bool,
    /// Leave the caller's session and, once started, close stdout and stderr (after
    /// one line on stdout), without forking: for a launcher that reaps the wrapper.
    #[arg(long)]
    pub detach: bool,
    /// Append the wrapper's own log lines to FILE (default: stderr).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Give up after this many seconds without any contact with the hub.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_GIVE_UP.as_secs())]
    pub give_up: u64,
    /// A wrapper that has not started its command gives up this many seconds past its
    /// slot with no server that knows its run (1 to 120; default from SP_STAGE_GRACE_S,
    /// else 120).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=120))]
    pub stage_grace: Option<u64>,
    /// Started through Salt on this minion (rendered by Salt from `opts['id']`): the
    /// wrapper proves it with the minion's key instead of a token.
    #[arg(long, value_name = "ID", requires = "minion_key")]
    pub minion_id: Option<String>,
    /// Read the launch token from the first line of stdin (an executor plugin hands it
    /// over there: never on a command line or in an environment).
    #[arg(long, conflicts_with = "minion_id")]
    pub token_stdin: bool,
    /// The minion's Salt private key (`pki_dir/minion.pem`), to sign the hub's challenge.
    #[arg(long, value_name = "FILE", requires = "minion_id")]
    pub minion_key: Option<PathBuf>,
}

/// The whole program: parse, validate, maybe daemonize, run; prints one line on error.
pub fn main() -> ExitCode {
    let args = Args::parse();
    // First of all, so a kill of the launcher's process group can no longer reach it.
    if args.detach
        && let Err(e) = daemon::leave_session()
    {
        return fail_at_start(&e);
    }
    let (launch, opts) = match validate(&args) {
        Ok(validated) => validated,
        Err(e) => return fail_at_start(&e),
    };
    // Before forking: a launch that starts many runs reads its executable once.
    let build = Build::of_this_process();
    let detached = if args.daemonize {
        daemon::launch_in_background(args.log.as_deref(), &launch.runs)
    } else if args.detach {
        daemon::detach(args.log.as_deref(), launch.settings.run).map(|()| launch.settings.run)
    } else {
        Ok(launch.settings.run)
    };
    let run_id = match detached {
        Ok(run) => run,
        Err(e) => return fail_at_start(&e),
    };
    if let Err(e) = daemon::init_logging(args.log.as_deref()) {
        return fail_at_start(&e);
    }
    let settings = launch.for_run(run_id);
    log::info!(
        "saltpeter-wrapper {} pid {} for run {} on {} via {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        settings.run,
        settings.machine,
        settings.hub.url
    );
    if let Some(problem) = &build.problem {
        log::warn!("{problem}; hello goes without the build's hash");
    }
    match run(settings, Options { build, ..opts }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            if !args.daemonize && !args.detach && args.log.is_some() {
                eprintln!("saltpeter-wrapper: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// An error before the wrapper runs on its own: one line on stderr.
fn fail_at_start(e: &WrapperError) -> ExitCode {
    eprintln!("saltpeter-wrapper: {e}");
    ExitCode::from(e.exit_code())
}

/// Everything checked once per launch command, before anything forks: the identity (the
/// minion, or the launch token from its file), `SP_URL`, the runs of `SP_RUN` and how they
/// may be started, the stage grace. The token then leaves the environment.
fn validate(args: &Args) -> Result<(Launch, Options), WrapperError> {
    let minion = match (&args.minion_id, &args.minion_key) {
        (Some(id), Some(key)) => Some(Minion {
            id: id.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    // The local executor's token comes in a 0600 file, deleted once read.
    let token_from_file = match std::env::var_os(ENV_TOKEN_FILE) {
        _ if args.token_stdin => Some(settings::read_token(std::io::stdin().lock())?),
        Some(path) if minion.is_none() => Some(take_token_file(std::path::Path::new(&path))?),
        _ => None,
    };
    let lookup = |name: &str| match (name, &token_from_file) {
        (ENV_TOKEN, Some(token)) => Some(token.clone()),
        _ => std::env::var(name).ok(),
    };
    let by_token = minion.is_none();
    let launch = settings_from_env(lookup, Duration::from_secs(args.give_up.max(1)), minion)?;
    check_runs(&launch.runs, args.daemonize, by_token)?;
    let stage_grace = stage_grace(args.stage_grace, std::env::var(ENV_STAGE_GRACE).ok())?;
    // SAFETY: still single-threaded (nothing has spawned a thread yet), so no other
    // thread can read the environment concurrently.
    unsafe {
        std::env::remove_var(ENV_TOKEN);
        std::env::remove_var(ENV_TOKEN_FILE);
    }
    let opts = Options {
        stage_grace,
        ..Options::default()
    };
    Ok((launch, opts))
}
