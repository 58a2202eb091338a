//! `saltpeterctl`: the admin tool, speaking the admin protocol over the Unix socket.
//!
//! Raw arguments become a validated `Command` (clap), one request goes to the daemon,
//! the answer is printed as a table for people or JSON for scripts. Exit codes: 0 ok,
//! 1 the operation's own failure (a run failed), 2 usage or connection errors (and
//! what was asked for does not exist). Errors are one line on stderr.
//!
//! Modules: `client` (the socket), `render` and `table` (tables, colours), `verbs` (the
//! ask-once verbs), `follow` (`logs -f`, `output -f`), `progress` (`run --wait`),
//! `completions` (shell completions, man page), `crontab` (`crontab import`), `executor`
//! (`executor test`, a plugin's conformance check), `out` (standard output; a closed pipe
//! ends the program quietly).

#[macro_use]
mod out;

mod arg_error;
mod args;
mod exit;

mod client;
mod completions;
mod crontab;
mod deliveries;
mod executor;
mod follow;
mod jobctl;
mod maintenance;
mod progress;
pub(crate) mod render;
mod schedule;
mod table;
mod verbs;
mod wrappers;

use clap::Parser;

use crate::wire::admin::{AdminRequest, RunQuery};
pub(crate) use args::{Cli, Command, ConfigAction, CrontabAction, WrapperAction};
use exit::CtlResult;
pub(crate) use exit::{EXIT_OK, EXIT_USAGE};

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

fn since(text: Option<String>) -> Result<Option<crate::wire::records::Millis>, (i32, String)> {
    let now = crate::wire::records::now_ms();
    text.map(|t| verbs::parse_since(&t, now))
        .transpose()
        .map_err(|e| (EXIT_USAGE, e.to_string()))
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
        Command::Executor { action } => return executor::run(action, json),
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
