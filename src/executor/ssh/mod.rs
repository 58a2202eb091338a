//! `saltpeter-executor-ssh`: the executor plugin that starts the wrapper over the
//! system's OpenSSH client (docs/executors.md, "The ssh executor"). No SSH of our own:
//! every connection is an `ssh` child, with `BatchMode=yes` and the operator's host-key
//! policy.
//!
//! Outline:
//! 1. `config`: the keys under `executors: {ssh: {config: ...}}`, read and checked.
//! 2. `hosts`: host specs (`user@host:port`) and target expressions (`list`, `glob`
//!    over an inventory file, `file`).
//! 3. `command`: the ssh argv and the remote scripts, pure.
//! 4. `session`: one ssh child with a deadline, always reaped; a bounded pool.
//! 5. `launch`: the launch (and deploy) per target; `ping` and `kill` are here.
//!
//! Budgets: the daemon kills the plugin at its deadline (ping: `timeout_s` + 10 s;
//! launch, resolve, kill: the executor's `timeout`, 60 s by default), so each operation
//! stops starting connections and kills the ones still running before then, and reports
//! every machine it did not finish.

mod command;
mod config;
mod hosts;
mod launch;
mod session;

use std::time::{Duration, Instant};

use serde_json::Value;

use self::config::SshConfig;
use self::session::{Session, for_each, reason};
use super::protocol::{CheckConfigArgs, ConfigError, KillArgs, LaunchArgs, PingArgs, ResolveArgs};
use super::sdk::{Description, Executor, Reporter};

/// The ssh executor plugin.
#[derive(Debug, Default)]
pub struct SshExecutor;

/// How much sooner than the daemon's deadline a ping gives up (the daemon allows
/// `timeout_s` + 10 s).
const PING_MARGIN: Duration = Duration::from_secs(5);

impl Executor for SshExecutor {
    fn name(&self) -> &str {
        "ssh"
    }

    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["deploy".to_string(), "kill".to_string()]
    }

    fn describe(&self, _config: &Value) -> Result<Description, String> {
        Ok(Description {
            keys: config::key_docs(),
            target_types: hosts::TARGET_TYPES.map(str::to_string).to_vec(),
        })
    }

    fn check_config(
        &self,
        args: &CheckConfigArgs,
        config: &Value,
    ) -> Result<Vec<ConfigError>, String> {
        let (config, problems) = SshConfig::parse(config);
        let mut errors: Vec<ConfigError> = problems
            .into_iter()
            .chain(config.check_files())
            .map(|e| ConfigError {
                job: None,
                key: e.key,
                message: e.message,
            })
            .collect();
        for job in &args.jobs {
            let resolved =
                hosts::resolve(&job.target, &job.target_type, config.inventory.as_deref());
            let problem = match resolved {
                // The inventory's own problem is the executor's, reported above.
                Err(e) if e.key == "config.inventory" => None,
                Err(e) => Some((e.key, e.message)),
                Ok(machines) if machines.is_empty() && job.target_type != "glob" => {
                    Some(("target", "names no host".to_string()))
                }
                Ok(_) => None,
            };
            if let Some((key, message)) = problem {
                errors.push(ConfigError {
                    job: Some(job.name.clone()),
                    key: Some(key.to_string()),
                    message,
                });
            }
        }
        Ok(errors)
    }

    fn resolve(&self, args: &ResolveArgs, config: &Value) -> Result<Vec<String>, String> {
        let config = SshConfig::load(config)?;
        hosts::resolve(&args.target, &args.target_type, config.inventory.as_deref())
            .map_err(|e| format!("{}: {}", e.key, e.message))
    }

    fn ping(&self, args: &PingArgs, config: &Value, report: &Reporter) -> Result<(), String> {
        let config = SshConfig::load(config)?;
        let per_machine = Duration::from_secs(args.timeout_s.max(1));
        let until = Instant::now() + per_machine + PING_MARGIN;
        let connect = config.connect_timeout.min(args.timeout_s.max(1));
        let skipped = for_each(&args.machines, config.parallel, until, |machine| {
            let deadline = (Instant::now() + per_machine).min(until);
            match ping_one(&config, machine, connect, deadline) {
                Ok(()) => report.reachable(machine),
                Err(why) => report.unreachable(machine, &why),
            }
        });
        for machine in skipped {
            report.unreachable(
                machine,
                &format!(
                    "not tried within the ping's {} s (raise config.parallel)",
                    args.timeout_s
                ),
            );
        }
        Ok(())
    }

    fn launch(&self, args: &LaunchArgs, config: &Value, report: &Reporter) -> Result<(), String> {
        let config = SshConfig::load(config)?;
        let until = budget(&config, report);
        launch::launch(&config, args, report, until);
        Ok(())
    }

    fn kill(&self, args: &KillArgs, config: &Value, report: &Reporter) -> Result<(), String> {
        let config = SshConfig::load(config)?;
        let until = budget(&config, report);
        let skipped = for_each(
            &args.machines,
            config.parallel,
            until,
            |machine| match kill_one(&config, args.run, machine, until) {
                Ok(()) => report.killed(machine),
                Err(why) => report.failed(machine, &why),
            },
        );
        for machine in skipped {
            report.failed(
                machine,
                &format!(
                    "not tried within the kill's {} s (config.op_timeout)",
                    config.op_timeout
                ),
            );
        }
        Ok(())
    }
}

/// `ssh HOST true`, bounded.
fn ping_one(
    config: &SshConfig,
    machine: &str,
    connect: u64,
    deadline: Instant,
) -> Result<(), String> {
    let host = hosts::parse_spec(machine).map_err(|e| format!("not a host spec: {e}"))?;
    let argv = command::ssh_argv(config, &host, connect, false, "true");
    let session = Session::start(&argv, false, deadline)
        .map_err(|e| format!("cannot start {}: {e}", config.ssh_bin))?;
    let end = session.finish();
    let stderr = reason(&end.stderr, "");
    let with = |what: String| match stderr.is_empty() {
        true => what,
        false => format!("{what}: {stderr}"),
    };
    match (end.code, end.timed_out) {
        (Some(0), _) => Ok(()),
        (_, true) => Err(with("no answer within the ping's timeout".to_string())),
        (Some(255), _) => Err(with("ssh exited 255".to_string())),
        (Some(code), _) => Err(with(format!("connected, but `true` exited {code}"))),
        (None, false) => Err(with("ssh was killed by a signal".to_string())),
    }
}

/// SIGTERM to the wrappers of `run` on `machine`.
fn kill_one(config: &SshConfig, run: u64, machine: &str, deadline: Instant) -> Result<(), String> {
    let host = hosts::parse_spec(machine).map_err(|e| format!("not a host spec: {e}"))?;
    let argv = command::ssh_argv(
        config,
        &host,
        config.connect_timeout,
        false,
        &command::kill_remote(run),
    );
    let mut session = Session::start(&argv, false, deadline)
        .map_err(|e| format!("cannot start {}: {e}", config.ssh_bin))?;
    let mut killed = None;
    while let Some(line) = session.read_line() {
        if let Some(n) = line.trim_end().strip_prefix(command::KILLED) {
            killed = n.parse::<u64>().ok();
        }
    }
    let end = session.finish();
    let stderr = reason(&end.stderr, "");
    match (end.code, killed) {
        (Some(0), Some(n)) if n > 0 => Ok(()),
        (Some(0), Some(_)) => Err(format!("no saltpeter-wrapper of run {run} runs there")),
        _ if end.timed_out => Err(format!(
            "no answer within the kill's {} s (config.op_timeout) {stderr}",
            config.op_timeout
        )
        .trim_end()
        .to_string()),
        (Some(255), _) => Err(format!("unreachable: ssh exited 255: {stderr}")),
        (code, _) => Err(format!(
            "the kill script ended ({}) without its answer: {stderr}",
            code.map_or("killed".to_string(), |c| format!("exit {c}"))
        )),
    }
}

#[cfg(test)]
mod tests;

/// When an operation stops its work: 5 s before the daemon's deadline (the request's
/// `deadline_s`), and within `op_timeout`.
fn budget(config: &SshConfig, report: &Reporter) -> Instant {
    let own = Instant::now() + Duration::from_secs(config.op_timeout);
    match report.deadline() {
        Some(deadline) => own.min(
            deadline
                .checked_sub(Duration::from_secs(5))
                .unwrap_or(deadline),
        ),
        None => own,
    }
}
