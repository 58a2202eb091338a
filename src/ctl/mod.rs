//! `saltpeterctl`: the admin tool, speaking the admin protocol over the Unix socket.
//!
//! Raw arguments become a validated `Command` (clap), one request goes to the daemon,
//! the answer is printed as a table for people or JSON for scripts. Exit codes: 0 ok,
//! 1 the operation's own failure (a run failed), 2 usage or connection errors.

mod client;
mod maintenance;
mod render;
mod schedule;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::records::RunState;

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "saltpeterctl",
    version,
    about = "Control a running Saltpeter daemon"
)]
pub struct Cli {
    /// Admin socket (default: $SALTPETER_SOCKET, then the runtime directory's admin.sock).
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Daemon version, uptime and processes.
    Status,
    /// Every job with its next and last run.
    Jobs,
    /// Runs of a job, newest first.
    Runs {
        job: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One run with its targets.
    ShowRun { run: u64 },
    /// Start a job now.
    Run {
        job: String,
        /// Wait for the run to finish; exit 0 only if every target succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// The stored output of one target of a run.
    Output { run: u64, machine: String },
    /// Kill a run (or one of its targets).
    Kill {
        run: u64,
        #[arg(long)]
        machine: Option<String>,
    },
    /// Re-read the configuration.
    Reload,
    /// Configuration tools that need no daemon.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Fire times of a cron expression (no daemon needed) or of a job.
    Schedule {
        #[command(subcommand)]
        action: schedule::ScheduleAction,
    },
    /// Take the fleet or machines out of service (persisted across restarts).
    Maintenance {
        #[command(subcommand)]
        action: maintenance::MaintenanceAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate a configuration directory; exit 1 on errors.
    Check { dir: PathBuf },
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err((code, msg)) => {
            eprintln!("saltpeterctl: {msg}");
            code
        }
    }
}

type CtlResult = Result<i32, (i32, String)>;

fn run(cli: Cli) -> CtlResult {
    let json = cli.json;
    let request = match cli.command {
        Command::Config {
            action: ConfigAction::Check { dir },
        } => return render::config_check(&dir, json),
        Command::Status => AdminRequest::Status,
        Command::Jobs => AdminRequest::Jobs,
        Command::Runs { job, limit } => AdminRequest::Runs { job, limit },
        Command::ShowRun { run } => AdminRequest::GetRun { run },
        Command::Run { job, wait } => {
            return run_job(cli.socket, job, wait, json);
        }
        Command::Output { run, machine } => AdminRequest::Output { run, machine },
        Command::Kill { run, machine } => AdminRequest::Kill { run, machine },
        Command::Reload => AdminRequest::Reload,
        Command::Schedule {
            action: schedule::ScheduleAction::Next(args),
        } => return schedule::next(cli.socket, args, json),
        Command::Maintenance { action } => return maintenance::run(cli.socket, action, json),
    };
    let mut client = client::Client::connect(cli.socket)?;
    let response = client.request(&request)?;
    render::response(response, json)
}

fn run_job(socket: Option<PathBuf>, job: String, wait: bool, json: bool) -> CtlResult {
    let mut client = client::Client::connect(socket)?;
    let run = match client.request(&AdminRequest::RunNow { job })? {
        AdminResponse::Started { run } => run,
        other => return render::response(other, json),
    };
    if !wait {
        return render::started(run, json);
    }
    match client.request(&AdminRequest::WaitRun { run })? {
        AdminResponse::Run(record) => {
            render::run(&record, json);
            Ok(if record.state == RunState::Succeeded {
                EXIT_OK
            } else {
                EXIT_FAILED
            })
        }
        other => render::response(other, json),
    }
}
