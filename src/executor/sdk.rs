//! The Rust SDK for executor plugins: a plugin is an [`Executor`] implementation and one
//! call of [`main`] (docs/executors.md, "Writing a plugin in Rust").
//!
//! Outline of one operation, all of it here so a plugin only answers the operation:
//! 1. Without `SALTPETER_EXECUTOR_PROTOCOL` in the environment (run by hand) say what the
//!    plugin is on stderr and exit 2, reading nothing.
//! 2. Write the hello. If the daemon speaks no protocol this build speaks, answer
//!    `ok: false` at once.
//! 3. Read one request line from stdin (at most [`MAX_LINE`] bytes), its arguments typed
//!    per operation; a bad line is answered `ok: false` naming the problem.
//! 4. Call the operation's method with a [`Reporter`] for its progress lines; what it
//!    returns (or a panic, caught) becomes the one result line. Exit 0, or 1 on `ok: false`.
//!
//! [`serve`] is steps 2 to 4 over any reader and writer, so the dispatcher is tested in
//! memory. The [`Reporter`] writes whole lines under a lock and flushes each, so worker
//! threads of a plugin may report at once without interleaving.
//!
//! The example of docs/executors.md, compiled by the doc tests:
//!
//! ```no_run
//! use saltpeter::executor::protocol::{ConfigError, LaunchArgs, PingArgs, ResolveArgs, CheckConfigArgs};
//! use saltpeter::executor::sdk::{self, Description, Executor, Reporter};
//! use serde_json::Value;
//!
//! struct Demo;
//!
//! impl Executor for Demo {
//!     fn name(&self) -> &str { "demo" }
//!     fn version(&self) -> &str { env!("CARGO_PKG_VERSION") }
//!     fn describe(&self, _config: &Value) -> Result<Description, String> {
//!         Ok(Description::default())
//!     }
//!     fn check_config(&self, _args: &CheckConfigArgs, _config: &Value) -> Result<Vec<ConfigError>, String> {
//!         Ok(Vec::new())
//!     }
//!     fn resolve(&self, args: &ResolveArgs, _config: &Value) -> Result<Vec<String>, String> {
//!         Ok(args.target.split(',').map(|m| m.trim().to_string()).collect())
//!     }
//!     fn ping(&self, args: &PingArgs, _config: &Value, report: &Reporter) -> Result<(), String> {
//!         args.machines.iter().for_each(|m| report.reachable(m));
//!         Ok(())
//!     }
//!     fn launch(&self, args: &LaunchArgs, _config: &Value, report: &Reporter) -> Result<(), String> {
//!         for t in &args.targets {
//!             // Run t.command on t.machine with t.token and "\n" on its stdin, then:
//!             report.launched(&t.machine);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     sdk::main(Demo)
//! }
//! ```

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::protocol::{
    CheckConfigArgs, ConfigError, Hello, KeyDoc, KillArgs, LaunchArgs, Op, PingArgs, PluginLine,
    Request, ResolveArgs, ResultLine, encode,
};
use super::{ENV_PROTOCOL, MAX_LINE, PROTOCOL, TAG};

/// What `describe` answers: the configuration keys and the target types understood.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Description {
    pub keys: Vec<KeyDoc>,
    pub target_types: Vec<String>,
}

/// An executor plugin. Each operation gets its parsed arguments and the executor's
/// `config` mapping (`{}` when none); an `Err` is the result's `error`.
pub trait Executor: Sync {
    /// The plugin's name, as in its file name `saltpeter-executor-NAME`.
    fn name(&self) -> &str;
    fn version(&self) -> &str;
    /// `deploy` (launch honours `deploy: true`), `kill` (implements [`Executor::kill`]).
    fn capabilities(&self) -> Vec<String> {
        Vec::new()
    }
    fn describe(&self, config: &Value) -> Result<Description, String>;
    /// What is wrong with `config` and the jobs that use the executor (empty: nothing).
    fn check_config(
        &self,
        args: &CheckConfigArgs,
        config: &Value,
    ) -> Result<Vec<ConfigError>, String>;
    /// The machines of a target expression (empty: none matched).
    fn resolve(&self, args: &ResolveArgs, config: &Value) -> Result<Vec<String>, String>;
    /// `reachable` / `unreachable` per machine through `report`.
    fn ping(&self, args: &PingArgs, config: &Value, report: &Reporter) -> Result<(), String>;
    /// `deployed`, then `launched` / `failed` / `unreachable` per target through `report`.
    fn launch(&self, args: &LaunchArgs, config: &Value, report: &Reporter) -> Result<(), String>;
    /// `killed` / `failed` per machine through `report`; only with capability `kill`.
    fn kill(&self, args: &KillArgs, config: &Value, report: &Reporter) -> Result<(), String> {
        let _ = (args, config, report);
        Err(format!(
            "the executor {} does not implement kill",
            self.name()
        ))
    }
}

/// Where an operation's progress lines go: whole lines, written under a lock and flushed
/// one by one (a plugin may report from several threads).
pub struct Reporter<'a> {
    out: Mutex<&'a mut (dyn Write + Send)>,
    deadline: Option<std::time::Instant>,
}

impl<'a> Reporter<'a> {
    pub fn new(out: &'a mut (dyn Write + Send)) -> Reporter<'a> {
        Reporter {
            out: Mutex::new(out),
            deadline: None,
        }
    }

    /// When the daemon kills this operation (the request's `deadline_s`, counted from
    /// when the request was read), if it said.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// Write `line` (a progress line, or the result). A daemon that stopped reading is
    /// gone: what cannot be written is dropped, the operation goes on to its end.
    pub fn send(&self, line: &PluginLine) {
        let text = encode(line);
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }

    pub fn reachable(&self, machine: &str) {
        self.send(&PluginLine::Reachable {
            machine: machine.to_string(),
        });
    }

    pub fn unreachable(&self, machine: &str, reason: &str) {
        self.send(&PluginLine::Unreachable {
            machine: machine.to_string(),
            reason: reason.to_string(),
        });
    }

    pub fn launched(&self, machine: &str) {
        self.send(&PluginLine::Launched {
            machine: machine.to_string(),
        });
    }

    pub fn deployed(&self, machine: &str) {
        self.send(&PluginLine::Deployed {
            machine: machine.to_string(),
        });
    }

    pub fn failed(&self, machine: &str, reason: &str) {
        self.send(&PluginLine::Failed {
            machine: machine.to_string(),
            reason: reason.to_string(),
        });
    }

    pub fn killed(&self, machine: &str) {
        self.send(&PluginLine::Killed {
            machine: machine.to_string(),
        });
    }
}

/// A plugin's `main`: run by hand, say what it is and exit 2; run by the daemon, answer
/// the one request on stdin. Exit 0 with `ok: true`, 1 with `ok: false`.
pub fn main(executor: impl Executor) -> ExitCode {
    let Some(versions) = std::env::var_os(ENV_PROTOCOL) else {
        eprintln!("{}", by_hand(&executor));
        return ExitCode::from(2);
    };
    let versions = versions.to_string_lossy();
    let mut stdout = std::io::stdout();
    if serve(&executor, &versions, std::io::stdin().lock(), &mut stdout) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// What a plugin run by hand prints.
pub fn by_hand(executor: &impl Executor) -> String {
    format!(
        "saltpeter-executor-{} {}: a Saltpeter executor plugin, protocol {PROTOCOL}, run by \
         saltpeter-daemon; see docs/executors.md",
        executor.name(),
        executor.version()
    )
}

/// Steps 2 to 4: the hello, one request from `input`, the operation, the result on
/// `output`. `versions` is the daemon's `SALTPETER_EXECUTOR_PROTOCOL`. True when the
/// result is `ok`.
pub fn serve(
    executor: &impl Executor,
    versions: &str,
    input: impl BufRead,
    output: &mut (dyn Write + Send),
) -> bool {
    let mut reporter = Reporter::new(output);
    reporter.send(&PluginLine::Hello(Hello {
        protocols: vec![PROTOCOL],
        name: executor.name().to_string(),
        version: executor.version().to_string(),
        capabilities: executor.capabilities(),
    }));
    let result = if !speaks(versions) {
        failure(format!(
            "the daemon speaks executor protocol {versions:?}; this plugin speaks {PROTOCOL}"
        ))
    } else {
        match read_request(input) {
            Ok(request) => {
                reporter.deadline = request
                    .deadline_s
                    .map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s));
                answer(executor, &request, &reporter)
            }
            Err(why) => failure(why),
        }
    };
    let ok = result.ok;
    reporter.send(&PluginLine::Result(result));
    ok
}

/// Whether the comma-separated `versions` list this build's protocol.
fn speaks(versions: &str) -> bool {
    versions
        .split(',')
        .any(|v| v.trim().parse::<u32>() == Ok(PROTOCOL))
}

fn failure(error: String) -> ResultLine {
    ResultLine {
        ok: false,
        error: Some(error),
        ..ResultLine::default()
    }
}

/// The one request line: at most [`MAX_LINE`] bytes, a JSON object tagged with this
/// protocol, an operation this protocol has.
fn read_request(input: impl BufRead) -> Result<Request, String> {
    let mut line = Vec::new();
    input
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("cannot read the request on stdin: {e}"))?;
    if line.len() > MAX_LINE {
        return Err(format!("the request line is over {MAX_LINE} bytes"));
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err("no request line on stdin".to_string());
    }
    let value: Value =
        serde_json::from_slice(&line).map_err(|e| format!("the request line is not JSON: {e}"))?;
    let Value::Object(map) = &value else {
        return Err("the request line is not a JSON object".to_string());
    };
    match map.get(TAG) {
        Some(tag) if tag.as_u64() == Some(u64::from(PROTOCOL)) => {}
        Some(tag) => {
            return Err(format!(
                "the request is tagged {TAG}: {}; this plugin speaks {PROTOCOL}",
                crate::logsafe::clip(&tag.to_string(), 40)
            ));
        }
        None => return Err(format!("the request line has no {TAG:?} tag")),
    }
    serde_json::from_value(value).map_err(|e| format!("the request is not protocol v1: {e}"))
}

/// The arguments of `op`, typed.
fn args<T: DeserializeOwned>(op: Op, args: &Value) -> Result<T, String> {
    serde_json::from_value(args.clone()).map_err(|e| format!("bad args for {op}: {e}"))
}

/// Run the operation (a panic in it is an `ok: false` result, not a missing one).
fn answer(executor: &impl Executor, request: &Request, reporter: &Reporter) -> ResultLine {
    let run = || dispatch(executor, request, reporter);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => failure(error),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            failure(format!("the plugin panicked in {}: {what}", request.op))
        }
    }
}

/// The operation by name; it knows nothing of the operations' insides.
fn dispatch(
    executor: &impl Executor,
    request: &Request,
    reporter: &Reporter,
) -> Result<ResultLine, String> {
    let config = &request.config;
    let ok = ResultLine {
        ok: true,
        ..ResultLine::default()
    };
    Ok(match request.op {
        Op::Describe => {
            let description = executor.describe(config)?;
            ResultLine {
                keys: Some(description.keys),
                target_types: Some(description.target_types),
                ..ok
            }
        }
        Op::CheckConfig => ResultLine {
            errors: Some(executor.check_config(&args(request.op, &request.args)?, config)?),
            ..ok
        },
        Op::Resolve => ResultLine {
            machines: Some(executor.resolve(&args(request.op, &request.args)?, config)?),
            ..ok
        },
        Op::Ping => {
            executor.ping(&args(request.op, &request.args)?, config, reporter)?;
            ok
        }
        Op::Launch => {
            executor.launch(&args(request.op, &request.args)?, config, reporter)?;
            ok
        }
        Op::Kill => {
            executor.kill(&args(request.op, &request.args)?, config, reporter)?;
            ok
        }
    })
}

#[cfg(test)]
#[path = "sdk_tests.rs"]
mod tests;
