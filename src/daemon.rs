//! `saltpeter-daemon`: argument parsing and the choice between supervisor and child role.
//!
//! Started by people or systemd it is the supervisor; started by the supervisor with the
//! hidden `--role` argument it is one of the four children; started by `blocking` with a
//! hidden helper argument (`--load-config`, `--publish-wrapper`, `--hash-wrapper`) it does
//! that one slow task and exits (`roles/blocking/helpers.rs`).

use clap::Parser;

use crate::ipc::Role;
use crate::paths::{self, Dirs};
use crate::supervisor::{self, Policy, preflight};

#[derive(Debug, Parser)]
#[command(
    name = "saltpeter-daemon",
    version,
    about = "Saltpeter: distributed cron for SaltStack fleets"
)]
pub(crate) struct Args {
    #[command(flatten)]
    pub dirs: paths::DirArgs,
    /// Log at debug level.
    #[arg(long)]
    pub debug: bool,
    /// Internal: run as this child role.
    #[arg(long, hide = true)]
    pub role: Option<String>,
    /// Internal: an inherited descriptor, NAME=NUMBER.
    #[arg(long = "fd", hide = true)]
    pub fds: Vec<String>,
    /// Internal (helper of `blocking`): read and parse the changed configuration files of
    /// DIR, known fingerprints on stdin, the parsed files on stdout.
    #[arg(long, hide = true, value_name = "DIR")]
    pub load_config: Option<std::path::PathBuf>,
    /// Internal (helper of `blocking`): publish the wrapper binary in the master's file
    /// root (salt configuration directory given or /etc/salt) and print its hash.
    #[arg(long, hide = true, num_args = 0..=1, value_name = "SALT_CONFIG_DIR")]
    pub publish_wrapper: Option<Option<String>>,
    /// Internal (helper of `blocking`): print the wrapper binary's hash.
    #[arg(long, hide = true)]
    pub hash_wrapper: bool,
    /// Internal (helper of `blocking`): send one notification, the order on stdin.
    #[arg(long, hide = true)]
    pub deliver: bool,
    /// Internal (executor plugins with a `sha256` pin): hash the file at PATH and execute
    /// that very file if it has this hash.
    #[arg(long, hide = true, num_args = 2, value_names = ["SHA256", "PATH"])]
    pub exec_pinned: Option<Vec<String>>,
}

/// Exit code for a bad start (configuration, directories, ports): systemd must not
/// restart in a loop (`RestartPreventExitStatus=2`).
pub(crate) const EXIT_BAD_START: i32 = 2;

pub fn main() -> i32 {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_BAD_START } else { 0 };
        }
    };
    use crate::roles::blocking::helpers::{self, Helper};
    if let Some(dir) = &args.load_config {
        return helpers::run(Helper::LoadConfig(dir.clone()));
    }
    if let Some(salt_config_dir) = &args.publish_wrapper {
        return helpers::run(Helper::PublishWrapper(salt_config_dir.clone()));
    }
    if args.hash_wrapper {
        return helpers::run(Helper::HashWrapper);
    }
    if let Some([sha, path]) = args.exec_pinned.as_deref() {
        return crate::executor::spec::exec_pinned(sha, std::path::Path::new(path));
    }
    if args.deliver {
        return crate::roles::blocking::deliver::run_helper();
    }
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
    // The supervisor passes all three directories explicitly.
    let dirs = Dirs {
        config: args.dirs.config.clone(),
        state: args.dirs.state_dir.clone().unwrap_or_default(),
        runtime: args.dirs.runtime_dir.clone().unwrap_or_default(),
    };
    crate::roles::run(crate::roles::common::RoleArgs { role, dirs, fds })
}

fn run_supervisor(args: &Args) -> i32 {
    crate::logging::init(Role::Supervisor.name(), args.debug);
    let startup = match crate::supervisor::startup::settings(&args.dirs.config) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return EXIT_BAD_START;
        }
    };
    let dirs = args
        .dirs
        .resolve((startup.state_dir.as_deref(), startup.runtime_dir.as_deref()));
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
            preflight::remove_runtime_files(&prepared.dirs, prepared.socket_id);
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
    let policy = Policy {
        watchdog: startup.watchdog,
        ..Policy::default()
    };
    supervisor::run(prepared, &exe, args.debug, policy)
}
