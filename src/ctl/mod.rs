//! `saltpeterctl`: the admin tool, speaking the admin protocol over the Unix socket.
//!
//! Raw arguments become a validated `Command` (clap), one request goes to the daemon,
//! the answer is printed as a table for people or JSON for scripts. Exit codes: 0 ok,
//! 1 the operation's own failure (a run failed), 2 usage or connection errors (and
//! what was asked for does not exist). Errors are one line on stderr.
//!
//! Modules: `client` (the socket), `render` and `table` (tables, colours), `verbs` (the
//! ask-once verbs), `follow` (`logs -f`, `output -f`), `progress` (`run --wait`),
//! `completions` (shell completions, man page), `crontab` (`crontab import`), `out`
//! (standard output; a closed pipe ends the program quietly).

#[macro_use]
mod out;

mod client;
mod completions;
mod crontab;
mod deliveries;
mod follow;
mod jobctl;
mod maintenance;
mod progress;
pub mod render;
mod schedule;
mod table;
mod verbs;
mod wrappers;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::wire::admin::{AdminRequest, RunQuery};
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
    /// Every job with its state, next and last run.
    Jobs {
        /// Only the jobs of this group (their file name without extension).
        #[arg(long)]
        group: Option<String>,
        /// Only the jobs in this state.
        #[arg(long, value_enum)]
        state: Option<JobStateArg>,
    },
    /// Runs (of a job), newest first.
    Runs {
        job: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Only runs in this state.
        #[arg(long, value_enum)]
        state: Option<RunStateArg>,
        /// Only runs created since: an age (30m, 2h, 7d) or a date/time (2026-11-25,
        /// RFC 3339).
        #[arg(long)]
        since: Option<String>,
    },
    /// One run with its targets.
    ShowRun { run: u64 },
    /// Start a job now.
    Run {
        job: String,
        /// Wait for the run to finish, with live progress; exit 0 only if every target
        /// succeeded.
        #[arg(long)]
        wait: bool,
        /// Run on these targets only (comma-separated): a subset of the job's targets for
        /// the local executor, any minions (as a list) for salt.
        #[arg(long, value_delimiter = ',')]
        targets: Option<Vec<String>>,
    },
    /// The stored output of one target of a run.
    Output {
        run: u64,
        machine: String,
        /// Only the last N bytes.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Only one stream.
        #[arg(long, value_enum)]
        stream: Option<StreamArg>,
        /// Keep printing output as it arrives until the run ends (like tail -f).
        #[arg(short, long)]
        follow: bool,
    },
    /// Kill a run (or one of its targets).
    Kill {
        run: u64,
        #[arg(long)]
        machine: Option<String>,
    },
    /// Re-read the configuration.
    Reload,
    /// The wrapper on the minions.
    Wrapper {
        #[command(subcommand)]
        action: WrapperAction,
    },
    /// Configuration tools that need no daemon.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// One job: its configuration (secrets hidden), next 5 fire times and last runs.
    Show { job: String },
    /// Output of a job's newest run (all its targets); with -f, live until it ends.
    Logs {
        job: String,
        /// Only this target.
        #[arg(long)]
        machine: Option<String>,
        /// Only the last N bytes of each target to start with.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Only one stream.
        #[arg(long, value_enum)]
        stream: Option<StreamArg>,
        /// Follow the run in flight until it ends (like tail -f).
        #[arg(short, long)]
        follow: bool,
    },
    /// Kill every run of a job in flight.
    KillJob { job: String },
    /// The audit trail: who or what started, skipped, killed, reloaded, newest first.
    Events {
        #[arg(long)]
        job: Option<String>,
        #[arg(long)]
        run: Option<u64>,
        /// Only events of this kind (run_started, run_requested, kill_requested, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Only events since: an age (30m, 2h, 7d) or a date/time.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page saltpeterctl(1), or write it and a page per verb into --dir.
    Manpage {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Crontab conversion (no daemon needed).
    Crontab {
        #[command(subcommand)]
        action: CrontabAction,
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
    /// Notifications and exports: queued, delivered, failed (with the cause), newest first.
    Deliveries {
        #[arg(long)]
        job: Option<String>,
        #[arg(long)]
        run: Option<u64>,
        /// Only these: pending, delivered or failed (given up).
        #[arg(long, value_parser = ["pending", "delivered", "failed"])]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Pause a job: its slots are recorded as skipped until `resume` (or --until).
    Pause {
        job: String,
        /// Resume by itself at this time: RFC 3339, a UTC date and time
        /// (2026-11-30 08:00), or a delay (2h, 1d).
        #[arg(long)]
        until: Option<String>,
    },
    /// Resume a paused job (and cancel its pending skips), or a suspended run: WHAT is a
    /// run id when it is a number (then MACHINE resumes only that target).
    Resume {
        /// A job name, or the id of a suspended run.
        what: String,
        /// With a run id: only this target.
        machine: Option<String>,
        /// WHAT is a job name even when it is a number.
        #[arg(long)]
        job: bool,
    },
    /// Suspend a running run (or one of its targets): its commands are stopped (SIGSTOP)
    /// until `resume RUN [MACHINE]`.
    Suspend { run: u64, machine: Option<String> },
    /// Skip the next slot(s) of a job: recorded as skipped instead of running.
    Skip {
        job: String,
        #[arg(long, default_value_t = 1)]
        next: u32,
    },
    /// The paused and skipping jobs.
    Paused,
}

#[derive(Debug, Subcommand)]
pub enum CrontabAction {
    /// Convert a crontab file (`-` for standard input) into job YAML on standard output.
    Import {
        file: PathBuf,
        /// `targets` of the jobs (default: this host's name).
        #[arg(long)]
        targets: Option<String>,
        /// `executor` of the jobs (default: saltpeter_config's).
        #[arg(long, value_parser = ["local", "salt"])]
        executor: Option<String>,
        /// A system crontab (/etc/crontab, /etc/cron.d): a user field before the command.
        #[arg(long)]
        system: bool,
        /// Prefix of the generated job names.
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum JobStateArg {
    Running,
    Idle,
    Disabled,
    Invalid,
    Failing,
    Paused,
}

impl From<JobStateArg> for crate::wire::admin::JobState {
    fn from(s: JobStateArg) -> Self {
        use crate::wire::admin::JobState;
        match s {
            JobStateArg::Running => JobState::Running,
            JobStateArg::Idle => JobState::Idle,
            JobStateArg::Disabled => JobState::Disabled,
            JobStateArg::Invalid => JobState::Invalid,
            JobStateArg::Failing => JobState::Failing,
            JobStateArg::Paused => JobState::Paused,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum RunStateArg {
    Queued,
    Dispatching,
    Running,
    Succeeded,
    Failed,
    Partial,
    Canceled,
    Skipped,
}

impl From<RunStateArg> for RunState {
    fn from(s: RunStateArg) -> Self {
        match s {
            RunStateArg::Queued => RunState::Queued,
            RunStateArg::Dispatching => RunState::Dispatching,
            RunStateArg::Running => RunState::Running,
            RunStateArg::Succeeded => RunState::Succeeded,
            RunStateArg::Failed => RunState::Failed,
            RunStateArg::Partial => RunState::Partial,
            RunStateArg::Canceled => RunState::Canceled,
            RunStateArg::Skipped => RunState::Skipped,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StreamArg {
    Stdout,
    Stderr,
}

impl From<StreamArg> for crate::wire::wrapper::Stream {
    fn from(s: StreamArg) -> Self {
        match s {
            StreamArg::Stdout => crate::wire::wrapper::Stream::Stdout,
            StreamArg::Stderr => crate::wire::wrapper::Stream::Stderr,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum WrapperAction {
    /// Push this build's wrapper to minions (a glob; all of them by default).
    Deploy { target: Option<String> },
    /// List the minions by the wrapper build they have (this build, older ones,
    /// deployments in flight).
    Status,
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

fn since(text: Option<String>) -> Result<Option<crate::wire::records::Millis>, (i32, String)> {
    let now = chrono::Utc::now().timestamp_millis();
    text.map(|t| verbs::parse_since(&t, now))
        .transpose()
        .map_err(|e| (EXIT_USAGE, e))
}

fn run(cli: Cli) -> CtlResult {
    let json = cli.json;
    let socket = cli.socket;
    let request = match cli.command {
        Command::Config {
            action: ConfigAction::Check { dir },
        } => return render::config_check(&dir, json),
        Command::Completions { shell } => return completions::completions(shell),
        Command::Manpage { dir } => return completions::manpage(dir.as_deref()),
        Command::Crontab {
            action:
                CrontabAction::Import {
                    file,
                    targets,
                    executor,
                    system,
                    prefix,
                },
        } => {
            let targets = targets.unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "localhost".into())
            });
            let opts = crontab::Options {
                targets,
                executor,
                system,
                prefix,
            };
            return crontab::import(&file, &opts);
        }
        Command::Status => AdminRequest::Status,
        Command::Jobs { group, state } => {
            let mut client = client::Client::connect(socket)?;
            return verbs::jobs(&mut client, group, state.map(Into::into), json);
        }
        Command::Runs {
            job,
            limit,
            state,
            since: when,
        } => {
            let req = AdminRequest::Runs(RunQuery {
                job,
                state: state.map(Into::into),
                since: since(when)?,
                limit,
                ..RunQuery::default()
            });
            return verbs::runs(&mut client::Client::connect(socket)?, req, json);
        }
        Command::ShowRun { run } => AdminRequest::GetRun { run },
        Command::Run { job, wait, targets } => {
            return progress::run_job(socket, job, wait, targets, json);
        }
        Command::Output {
            run,
            machine,
            tail,
            stream,
            follow,
        } => {
            let mut client = client::Client::connect(socket)?;
            if follow {
                let req = AdminRequest::Follow {
                    run: Some(run),
                    job: None,
                    machine: Some(machine),
                    stream: stream.map(Into::into),
                    tail,
                    live: true,
                };
                return follow::follow(&mut client, req, json);
            }
            let stream = stream.map(Into::into);
            return verbs::output(&mut client, run, machine, stream, tail, json);
        }
        Command::Logs {
            job,
            machine,
            tail,
            stream,
            follow,
        } => {
            let req = AdminRequest::Follow {
                run: None,
                job: Some(job),
                machine,
                stream: stream.map(Into::into),
                tail,
                live: follow,
            };
            return follow::follow(&mut client::Client::connect(socket)?, req, json);
        }
        Command::Show { job } => {
            return verbs::show(&mut client::Client::connect(socket)?, job, json);
        }
        Command::KillJob { job } => {
            return verbs::kill_job(&mut client::Client::connect(socket)?, job, json);
        }
        Command::Events {
            job,
            run,
            kind,
            since: when,
            limit,
        } => {
            let req = AdminRequest::Events {
                job,
                run,
                kind,
                since: since(when)?,
                limit,
            };
            return verbs::events(&mut client::Client::connect(socket)?, req, json);
        }
        Command::Kill { run, machine } => AdminRequest::Kill { run, machine },
        Command::Reload => AdminRequest::Reload,
        Command::Wrapper {
            action: WrapperAction::Deploy { target },
        } => AdminRequest::DeployWrapper { target },
        Command::Wrapper {
            action: WrapperAction::Status,
        } => AdminRequest::WrapperStatus,
        Command::Schedule {
            action: schedule::ScheduleAction::Next(args),
        } => return schedule::next(socket, args, json),
        Command::Maintenance {
            action: maintenance::MaintenanceAction::Windows { count },
        } => return jobctl::windows(socket, count, json),
        Command::Maintenance { action } => return maintenance::run(socket, action, json),
        Command::Deliveries {
            job,
            run,
            state,
            limit,
        } => return deliveries::run(socket, job, run, state, limit, json),
        Command::Pause { job, until } => return jobctl::pause(socket, job, until, json),
        Command::Resume { what, machine, job } => match resume_target(what, machine, job)? {
            Resumed::Job(job) => {
                let change = crate::wire::admin::JobControl::Resume { job };
                return jobctl::run(socket, change, json);
            }
            Resumed::Run { run, machine } => AdminRequest::Suspend {
                run,
                machine,
                suspend: false,
            },
        },
        Command::Suspend { run, machine } => AdminRequest::Suspend {
            run,
            machine,
            suspend: true,
        },
        Command::Skip { job, next } => {
            let change = crate::wire::admin::JobControl::Skip { job, next };
            return jobctl::run(socket, change, json);
        }
        Command::Paused => {
            return jobctl::run(socket, crate::wire::admin::JobControl::Show, json);
        }
    };
    let mut client = client::Client::connect(socket)?;
    let response = client.request(&request)?;
    render::response(response, json)
}

/// What `resume WHAT [MACHINE]` names.
#[derive(Debug, PartialEq, Eq)]
enum Resumed {
    Job(String),
    Run { run: u64, machine: Option<String> },
}

/// `resume`: a number is a run (unless `--job`), anything else a job; a machine goes only
/// with a run.
fn resume_target(
    what: String,
    machine: Option<String>,
    job: bool,
) -> Result<Resumed, (i32, String)> {
    match what.parse::<u64>() {
        Ok(run) if !job => Ok(Resumed::Run { run, machine }),
        _ if machine.is_some() => Err((
            EXIT_USAGE,
            format!(
                "resume {what} {}: a machine goes with a run id (a number), not with a job",
                machine.unwrap_or_default()
            ),
        )),
        _ => Ok(Resumed::Job(what)),
    }
}

#[cfg(test)]
mod resume_tests {
    use super::{Resumed, resume_target};

    #[test]
    fn resume_takes_a_number_for_a_run_and_a_name_for_a_job() {
        assert_eq!(
            resume_target("42".into(), Some("m1".into()), false),
            Ok(Resumed::Run {
                run: 42,
                machine: Some("m1".into())
            })
        );
        assert_eq!(
            resume_target("backup".into(), None, false),
            Ok(Resumed::Job("backup".into()))
        );
        assert_eq!(
            resume_target("42".into(), None, true),
            Ok(Resumed::Job("42".into()))
        );
        assert!(resume_target("backup".into(), Some("m1".into()), false).is_err());
    }
}
