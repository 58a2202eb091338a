//! `saltpeterctl executor test PATH`: a plugin checked against protocol v1 without a
//! daemon (docs/executors.md, "Testing a plugin").
//!
//! Every check runs the plugin as the daemon does ([`PluginSpec::command`], one process
//! per operation through [`runner::run`], the daemon's deadlines) and reads its output
//! with the daemon's own reader ([`protocol::read_output`]), so a breach is named here
//! exactly as the daemon's log names it. Outline:
//! 1. `file`: the file exists and is executable (and has the `--sha256` pin's hash);
//!    nothing else runs without it. `name`: whether `executor_path` would find it.
//! 2. `by_hand`: without `SALTPETER_EXECUTOR_PROTOCOL` it says what it is and exits 2.
//! 3. `describe`, then requests a v1 plugin must take in its stride: fields it does not
//!    know (`unknown_field`), a daemon offering only a protocol it does not speak
//!    (`other_version`), an operation it does not know (`unknown_op`).
//! 4. `check_config` (the given configuration, then `unknown_key` with one more key),
//!    `resolve`, `ping`, `launch` (with `--launch`: `true` on each machine, a dummy token)
//!    and `kill` (when the hello advertises it).
//!
//! A check that hit its deadline ends the session: the checks after it are skipped
//! rather than each waiting out a deadline of its own.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::protocol::{
    self, CheckConfigArgs, Hello, JobRef, KillArgs, LaunchArgs, LaunchTarget, Op, PingArgs,
    PluginLine, ResolveArgs, WrapperFile,
};
use super::runner;
use super::spec::{self, CHECK_DEADLINE, FileProblem, PluginSpec};
use super::{ENV_PROTOCOL, FILE_PREFIX};

#[path = "conformance_verdict.rs"]
mod verdict;

pub use verdict::{Check, Verdict};
use verdict::{
    Checked, Exchange, config_error, fail, file_problem, per_machine, status, stderr_note,
};

/// What to test, and with what.
#[derive(Debug, Clone)]
pub struct Options {
    pub path: PathBuf,
    /// The executor's `config` mapping.
    pub config: Value,
    /// A target expression and its type, for `check_config` and `resolve`.
    pub target: Option<(String, String)>,
    /// The machines to `ping`, `launch` and `kill` (default: those `resolve` found).
    pub machines: Vec<String>,
    /// Run `launch` (`true` on each machine).
    pub launch: bool,
    /// The deadline of `resolve`, `launch` and `kill` (the executor's `timeout`).
    pub timeout_s: u64,
    /// The hash the file must have (a `sha256` pin).
    pub sha256: Option<String>,
}

/// The run id of the conformance requests (nothing of the daemon's).
const RUN: u64 = 1;
/// `ping`'s per-machine timeout.
const PING_TIMEOUT_S: u64 = 5;
/// The configuration key no plugin knows.
const UNKNOWN_KEY: &str = "saltpeter_conformance_unknown_key";
/// The executor name of the requests when the file name gives none.
const FALLBACK_NAME: &str = "conformance";

/// Run every check on the plugin, handing each to `report` as it ends; true when none
/// failed.
pub fn test_plugin(opts: &Options, report: &mut dyn FnMut(&Check)) -> bool {
    let mut passed = true;
    let mut emit = |check: Check| {
        passed &= check.passed();
        report(&check);
    };
    let file = file_check(opts);
    let usable = !matches!(file, Verdict::Fail { .. });
    emit(Check {
        name: "file",
        verdict: file,
    });
    if !usable {
        return false;
    }
    let (name, verdict) = executor_name(&opts.path);
    emit(Check {
        name: "name",
        verdict,
    });
    let mut session = Session {
        opts,
        spec: PluginSpec {
            name,
            path: opts.path.clone(),
            sha256: None,
            config: opts.config.to_string(),
            timeout_s: opts.timeout_s,
        },
        hello: None,
        resolved: Vec::new(),
        stopped: false,
    };
    type Step<'s> = (&'static str, fn(&mut Session<'s>) -> Checked);
    let steps: [Step; 11] = [
        ("by_hand", Session::by_hand),
        ("describe", Session::describe),
        ("unknown_field", Session::unknown_field),
        ("other_version", Session::other_version),
        ("unknown_op", Session::unknown_op),
        ("check_config", Session::check_config),
        ("unknown_key", Session::unknown_key),
        ("resolve", Session::resolve),
        ("ping", Session::ping),
        ("launch", Session::launch),
        ("kill", Session::kill),
    ];
    for (name, step) in steps {
        let verdict = if session.stopped {
            Verdict::Skip("an earlier operation was killed at its deadline".to_string())
        } else {
            step(&mut session).unwrap_or_else(|v| v)
        };
        if matches!(
            verdict,
            Verdict::Fail {
                problem: "deadline",
                ..
            }
        ) {
            session.stopped = true;
        }
        emit(Check { name, verdict });
    }
    passed
}

fn file_check(opts: &Options) -> Verdict {
    if let Err(problem) = spec::check_file(&opts.path) {
        return file_problem(&problem);
    }
    let Some(expected) = &opts.sha256 else {
        return Verdict::Ok(format!("{} is an executable file", opts.path.display()));
    };
    match spec::sha256_file(&opts.path) {
        Err(problem) => file_problem(&problem),
        Ok(actual) if !actual.eq_ignore_ascii_case(expected) => {
            file_problem(&FileProblem::PinMismatch {
                path: opts.path.clone(),
                expected: expected.clone(),
                actual,
            })
        }
        Ok(_) => Verdict::Ok(format!(
            "{} is an executable file with the pinned sha256",
            opts.path.display()
        )),
    }
}

/// The executor's name from the file name, and whether `executor_path` would find it.
fn executor_name(path: &Path) -> (String, Verdict) {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file.strip_prefix(FILE_PREFIX) {
        Some(name) if super::valid_name(name) && !super::is_builtin(name) => {
            (name.to_string(), Verdict::Ok(format!("executor `{name}`")))
        }
        _ => (
            FALLBACK_NAME.to_string(),
            Verdict::Warn(format!(
                "`{file}` is not {FILE_PREFIX}NAME with a valid NAME (1-64 of a-z 0-9 _ -, \
                 a letter first, not salt or local): executor_path will not find it, only \
                 an executors.NAME.path; the requests here name it `{FALLBACK_NAME}`"
            )),
        ),
    }
}

struct Session<'a> {
    opts: &'a Options,
    spec: PluginSpec,
    /// `describe`'s hello (its capabilities decide `kill`).
    hello: Option<Hello>,
    /// The machines `resolve` found.
    resolved: Vec<String>,
    /// An operation hit its deadline: the rest is skipped.
    stopped: bool,
}

impl Session<'_> {
    /// Run the plugin once with `request` on stdin (and the protocol versions offered
    /// replaced by `offered`), reading its output as `op`'s.
    fn exchange(&self, op: Op, request: &str, offered: Option<&str>) -> Result<Exchange, Verdict> {
        // Unpinned: the daemon binary (the first argument) is not used.
        let mut cmd = self.spec.command(Path::new("saltpeter-daemon"));
        if let Some(versions) = offered {
            cmd.env(ENV_PROTOCOL, versions);
        }
        let deadline = self.spec.deadline(op, PING_TIMEOUT_S);
        let raw = runner::run(cmd, request.as_bytes(), deadline)
            .map_err(|e| fail("cannot_start", e.to_string()))?;
        let reading = protocol::read_output(op, &raw);
        Ok(Exchange { raw, reading })
    }

    fn request(&self, op: Op, args: Value) -> String {
        protocol::request_line(op, &self.spec.name, &self.opts.config, args)
    }

    /// The machines for `ping`, `launch` and `kill`.
    fn machines(&self) -> Vec<String> {
        if self.opts.machines.is_empty() {
            self.resolved.clone()
        } else {
            self.opts.machines.clone()
        }
    }

    fn by_hand(&mut self) -> Checked {
        let mut cmd = self.spec.command(Path::new("saltpeter-daemon"));
        cmd.env_remove(ENV_PROTOCOL);
        let raw = runner::run(cmd, b"", CHECK_DEADLINE)
            .map_err(|e| fail("cannot_start", e.to_string()))?;
        if raw.deadline.is_some() {
            return Err(fail(
                "deadline",
                format!(
                    "run by hand it was still running after {} s; it should say what it is \
                     on stderr and exit 2 at once, reading nothing",
                    CHECK_DEADLINE.as_secs()
                ),
            ));
        }
        if raw.code != Some(2) {
            return Err(fail(
                "by_hand_exit",
                format!(
                    "run by hand (no {ENV_PROTOCOL}) it {}, not 2{}",
                    status(&raw),
                    stderr_note(&raw)
                ),
            ));
        }
        let said = String::from_utf8_lossy(&raw.stderr);
        let Some(first) = said.lines().find(|l| !l.trim().is_empty()) else {
            return Err(fail(
                "by_hand_silent",
                "run by hand it exited 2 with nothing on stderr; it should say what it is",
            ));
        };
        Ok(Verdict::Ok(crate::logsafe::clip(first.trim(), 200)))
    }

    fn describe(&mut self) -> Checked {
        let ex = self.exchange(Op::Describe, &self.request(Op::Describe, json!({})), None)?;
        let result = ex.answer()?;
        let hello = ex.reading.hello.clone().unwrap_or_else(|| Hello {
            protocols: Vec::new(),
            name: String::new(),
            version: String::new(),
            capabilities: Vec::new(),
        });
        if hello.name.trim().is_empty() || hello.version.trim().is_empty() {
            return Err(fail("bad_hello", "the hello's name or version is empty"));
        }
        let Some(keys) = &result.keys else {
            return Err(fail("bad_result", "describe's result has no `keys` list"));
        };
        if let Some(key) = keys.iter().find(|k| k.name.trim().is_empty()) {
            return Err(fail("bad_result", format!("a key without a name: {key:?}")));
        }
        let types = result.target_types.clone().unwrap_or_default();
        if types.is_empty() {
            return Err(fail(
                "bad_result",
                "describe's result has no `target_types` (or an empty list)",
            ));
        }
        let keys: Vec<String> = keys
            .iter()
            .map(|k| match k.required {
                true => format!("{} (required)", k.name),
                false => k.name.clone(),
            })
            .collect();
        let details = format!(
            "{} {}, protocols {:?}, capabilities [{}], keys [{}], target types [{}]",
            hello.name,
            hello.version,
            hello.protocols,
            hello.capabilities.join(", "),
            keys.join(", "),
            types.join(", ")
        );
        self.hello = Some(hello);
        Ok(Verdict::Ok(crate::logsafe::clip(&details, 400)))
    }

    fn unknown_field(&mut self) -> Checked {
        let request = json!({
            "op": "describe",
            "executor": self.spec.name,
            "config": self.opts.config,
            "args": {"saltpeter_conformance_future": true},
            "saltpeter_conformance_future": {"added_in": "a later v1"},
        });
        let line = protocol::encode(&request);
        let ex = self.exchange(Op::Describe, &line, None)?;
        ex.answer()?;
        Ok(Verdict::Ok(
            "a request with fields it does not know is answered".to_string(),
        ))
    }

    fn other_version(&mut self) -> Checked {
        let line = self.request(Op::Describe, json!({}));
        let ex = self.exchange(Op::Describe, &line, Some("65535"))?;
        let error = ex.refusal("a daemon offering only protocol 65535")?;
        Ok(Verdict::Ok(crate::logsafe::clip(
            &format!("offered only protocol 65535, it said hello and refused: {error}"),
            300,
        )))
    }

    fn unknown_op(&mut self) -> Checked {
        let request = json!({
            "op": "saltpeter_conformance_no_such_op",
            "executor": self.spec.name,
            "config": self.opts.config,
            "args": {},
        });
        let ex = self.exchange(Op::Describe, &protocol::encode(&request), None)?;
        let error = ex.refusal("an unknown operation")?;
        Ok(Verdict::Ok(crate::logsafe::clip(
            &format!("refused: {error}"),
            300,
        )))
    }

    fn jobs(&self) -> Vec<JobRef> {
        self.opts
            .target
            .iter()
            .map(|(target, target_type)| JobRef {
                name: "conformance".to_string(),
                target: target.clone(),
                target_type: target_type.clone(),
            })
            .collect()
    }

    /// `check_config`'s errors for `config`.
    fn config_errors(&self, config: &Value) -> Result<Vec<protocol::ConfigError>, Verdict> {
        let args = serde_json::to_value(CheckConfigArgs { jobs: self.jobs() })
            .unwrap_or_else(|_| json!({"jobs": []}));
        let line = protocol::request_line(Op::CheckConfig, &self.spec.name, config, args);
        let ex = self.exchange(Op::CheckConfig, &line, None)?;
        let result = ex.answer()?;
        result
            .errors
            .clone()
            .ok_or_else(|| fail("bad_result", "check_config's result has no `errors` list"))
    }

    fn check_config(&mut self) -> Checked {
        let errors = self.config_errors(&self.opts.config)?;
        if errors.is_empty() {
            return Ok(Verdict::Ok(match self.opts.target {
                Some(_) => "no errors (one job, of --target)".to_string(),
                None => "no errors (no job: give --target for one)".to_string(),
            }));
        }
        let listed: Vec<String> = errors.iter().map(config_error).collect();
        Err(fail(
            "config_errors",
            format!("the configuration given is refused: {}", listed.join("; ")),
        ))
    }

    fn unknown_key(&mut self) -> Checked {
        let Value::Object(mut config) = self.opts.config.clone() else {
            return Ok(Verdict::Skip(
                "the configuration is not a mapping".to_string(),
            ));
        };
        config.insert(UNKNOWN_KEY.to_string(), Value::Bool(true));
        let errors = self.config_errors(&Value::Object(config))?;
        match errors.first() {
            Some(error) => Ok(Verdict::Ok(format!("refused: {}", config_error(error)))),
            None => Ok(Verdict::Warn(format!(
                "config.{UNKNOWN_KEY} was accepted: a misspelt key would go unnoticed"
            ))),
        }
    }

    fn resolve(&mut self) -> Checked {
        let Some((target, target_type)) = &self.opts.target else {
            return Ok(Verdict::Skip("no --target given".to_string()));
        };
        let args = ResolveArgs {
            target: target.clone(),
            target_type: target_type.clone(),
        };
        let args = serde_json::to_value(args).unwrap_or_default();
        let ex = self.exchange(Op::Resolve, &self.request(Op::Resolve, args), None)?;
        let result = ex.answer()?;
        let Some(machines) = &result.machines else {
            return Err(fail(
                "bad_result",
                "resolve's result has no `machines` list",
            ));
        };
        if let Some(bad) = machines
            .iter()
            .find(|m| m.is_empty() || m.chars().count() > 255 || m.chars().any(char::is_control))
        {
            return Err(fail(
                "bad_result",
                format!(
                    "machine name {:?} is not 1-255 characters without control characters",
                    crate::logsafe::clip(bad, 60)
                ),
            ));
        }
        self.resolved = machines.clone();
        let found = match machines.is_empty() {
            true => "no machine (a run would be skipped)".to_string(),
            false => machines.join(", "),
        };
        Ok(Verdict::Ok(crate::logsafe::clip(
            &format!("{target} ({target_type}): {found}"),
            400,
        )))
    }

    fn ping(&mut self) -> Checked {
        let machines = self.machines();
        let args = PingArgs {
            machines: machines.clone(),
            timeout_s: PING_TIMEOUT_S,
        };
        let args = serde_json::to_value(args).unwrap_or_default();
        let ex = self.exchange(Op::Ping, &self.request(Op::Ping, args), None)?;
        ex.answer()?;
        let said = per_machine(&machines, &ex.reading.progress)?;
        Ok(Verdict::Ok(said))
    }

    fn launch(&mut self) -> Checked {
        if !self.opts.launch {
            return Ok(Verdict::Skip(
                "give --launch to start `true` on each machine".to_string(),
            ));
        }
        let machines = self.machines();
        // One token per target, as the daemon issues them.
        let tokens: Vec<String> = machines
            .iter()
            .map(|_| format!("conformance-token-{:032x}", rand::random::<u128>()))
            .collect();
        let args = LaunchArgs {
            run: RUN,
            urls: vec!["wss://saltpeter-conformance.invalid:7000/".to_string()],
            wrapper: WrapperFile {
                path: "/usr/lib/saltpeter/saltpeter-wrapper".to_string(),
                source: "/usr/lib/saltpeter/saltpeter-wrapper".to_string(),
                sha256: "0".repeat(64),
            },
            targets: machines
                .iter()
                .zip(&tokens)
                .map(|(machine, token)| LaunchTarget {
                    machine: machine.clone(),
                    token: token.clone(),
                    command: vec!["true".to_string()],
                    deploy: false,
                })
                .collect(),
        };
        let args = serde_json::to_value(args).unwrap_or_default();
        let ex = self.exchange(Op::Launch, &self.request(Op::Launch, args), None)?;
        let leaked = |bytes: &[u8]| {
            tokens.iter().any(|token| {
                bytes
                    .windows(token.len())
                    .any(|window| window == token.as_bytes())
            })
        };
        if leaked(&ex.raw.stdout) || leaked(&ex.raw.stderr) {
            return Err(fail(
                "token_leak",
                "the launch token appears in the plugin's stdout or stderr (both are logged)",
            ));
        }
        ex.answer()?;
        if let Some(PluginLine::Failed { machine, reason }) = ex
            .reading
            .progress
            .iter()
            .find(|l| matches!(l, PluginLine::Failed { .. }))
        {
            return Err(fail(
                "launch_failed",
                crate::logsafe::clip(&format!("`true` on {machine}: {reason}"), 300),
            ));
        }
        Ok(Verdict::Ok(per_machine(&machines, &ex.reading.progress)?))
    }

    fn kill(&mut self) -> Checked {
        let Some(hello) = &self.hello else {
            return Ok(Verdict::Skip(
                "describe failed: the capabilities are unknown".to_string(),
            ));
        };
        if !hello.capabilities.iter().any(|c| c == "kill") {
            return Ok(Verdict::Skip("no capability `kill`".to_string()));
        }
        let machines = self.machines();
        let args = KillArgs {
            run: RUN,
            machines: machines.clone(),
        };
        let args = serde_json::to_value(args).unwrap_or_default();
        let ex = self.exchange(Op::Kill, &self.request(Op::Kill, args), None)?;
        ex.answer()?;
        Ok(Verdict::Ok(per_machine(&machines, &ex.reading.progress)?))
    }
}

#[cfg(test)]
#[path = "conformance_tests.rs"]
mod tests;
