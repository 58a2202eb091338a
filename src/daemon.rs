//! `saltpeter-daemon`: argument parsing and the choice between supervisor and child role.
//!
//! Started by people or systemd it is the supervisor; started by the supervisor with the
//! hidden `--role` argument it is one of the four children.

use std::path::PathBuf;

use clap::Parser;

use crate::paths::{self, Dirs};
use crate::supervisor::{self, Policy, preflight};
use crate::wire::link::Role;

#[derive(Debug, Parser)]
#[command(
    name = "saltpeter-daemon",
    version,
    about = "Saltpeter: distributed cron for SaltStack fleets"
)]
pub struct Args {
    /// Directory of job YAML files.
    #[arg(long, default_value = paths::DEFAULT_CONFIG_DIR)]
    pub config: PathBuf,
    /// Where the database and the server secret live.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where the admin socket and the pid file live.
    #[arg(long)]
    pub runtime_dir: Option<PathBuf>,
    /// Log at debug level.
    #[arg(long)]
    pub debug: bool,
    /// Internal: run as this child role.
    #[arg(long, hide = true)]
    pub role: Option<String>,
    /// Internal: an inherited descriptor, NAME=NUMBER.
    #[arg(long = "fd", hide = true)]
    pub fds: Vec<String>,
}

/// Exit code for a bad start (configuration, directories, ports): systemd must not
/// restart in a loop (`RestartPreventExitStatus=2`).
pub const EXIT_BAD_START: i32 = 2;

pub fn main() -> i32 {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_BAD_START } else { 0 };
        }
    };
    match &args.role {
        Some(role) => run_child(&args, role),
        None => run_supervisor(&args),
    }
}

fn run_child(args: &Args, role: &str) -> i32 {
    let Some(role) = Role::from_name(role) else {
        eprintln!("saltpeter-daemon: unknown role {role}");
        return EXIT_BAD_START;
    };
    crate::logging::init(role.name(), args.debug);
    let fds = match supervisor::spawn::parse_fd_args(&args.fds) {
        Ok(fds) => fds,
        Err(e) => {
            log::error!("{e}");
            return EXIT_BAD_START;
        }
    };
    let dirs = Dirs {
        config: args.config.clone(),
        state: args.state_dir.clone().unwrap_or_default(),
        runtime: args.runtime_dir.clone().unwrap_or_default(),
    };
    crate::roles::run(crate::roles::RoleArgs {
        role,
        dirs,
        debug: args.debug,
        fds,
    })
}

fn run_supervisor(args: &Args) -> i32 {
    crate::logging::init(Role::Supervisor.name(), args.debug);
    let startup = match crate::startup::settings(&args.config) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return EXIT_BAD_START;
        }
    };
    let dirs = Dirs {
        config: args.config.clone(),
        state: paths::pick_dir(
            args.state_dir.as_deref(),
            startup.state_dir.as_deref(),
            "STATE_DIRECTORY",
            paths::DEFAULT_STATE_DIR,
        ),
        runtime: paths::pick_dir(
            args.runtime_dir.as_deref(),
            startup.runtime_dir.as_deref(),
            "RUNTIME_DIRECTORY",
            paths::DEFAULT_RUNTIME_DIR,
        ),
    };
    let prepared = match preflight::prepare(dirs, &startup.listen) {
        Ok(p) => p,
        Err(e) => {
            log::error!("{e}");
            return EXIT_BAD_START;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            log::error!("cannot find my own executable: {e}");
            preflight::remove_runtime_files(&prepared.dirs);
            return EXIT_BAD_START;
        }
    };
    log::info!(
        "saltpeter {} starting: config {}, state {}, runtime {}",
        env!("CARGO_PKG_VERSION"),
        prepared.dirs.config.display(),
        prepared.dirs.state.display(),
        prepared.dirs.runtime.display()
    );
    supervisor::run(prepared, &exe, args.debug, Policy::default())
}
