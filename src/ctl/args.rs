//! `saltpeterctl`'s command line (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::wire::records::RunState;

#[derive(Debug, Parser)]
#[command(
    name = "saltpeterctl",
    version,
    about = "Control a running Saltpeter daemon"
)]
pub(crate) struct Cli {
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
pub(crate) enum Command {
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
    /// Executor plugins: `executor test PATH` checks one against the protocol (no daemon
    /// needed).
    Executor {
        #[command(subcommand)]
        action: super::executor::ExecutorAction,
    },
    /// Crontab conversion (no daemon needed).
    Crontab {
        #[command(subcommand)]
        action: CrontabAction,
    },
    /// Fire times of a cron expression (no daemon needed) or of a job.
    Schedule {
        #[command(subcommand)]
        action: super::schedule::ScheduleAction,
    },
    /// Take the fleet or machines out of service (persisted across restarts).
    Maintenance {
        #[command(subcommand)]
        action: super::maintenance::MaintenanceAction,
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
pub(crate) enum CrontabAction {
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
pub(crate) enum JobStateArg {
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
pub(crate) enum RunStateArg {
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
pub(crate) enum WrapperAction {
    /// Push this build's wrapper to minions (a glob; all of them by default).
    Deploy { target: Option<String> },
    /// List the minions by the wrapper build they have (this build, older ones,
    /// deployments in flight).
    Status,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigAction {
    /// Validate a configuration directory; exit 1 on errors.
    Check { dir: PathBuf },
}
