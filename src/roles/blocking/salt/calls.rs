//! The `salt` command line: argv building and output parsing. Pure; no processes here.
//!
//! Invocations are argv only (never a shell string) with `--out=json --out-indent=-1`,
//! which prints one JSON object per minion per line as returns arrive. `--static` is never
//! used: on Salt 3008 it hides minions that did not answer and always exits 0. The
//! per-minion value decides, not the CLI's exit code: `true` for a ping, a `cmd.run_all`
//! dict with its `retcode`, or a string beginning `Minion did not return.`. Lines that are
//! not JSON (such as "No minions matched the target...") are skipped and recognised.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::logsafe;
pub(crate) use crate::wire::link::SaltSettings;
use crate::wire::link::{MinionOutcome, SaltTargetType};
use crate::wire::wrapper::{ENV_RUN, ENV_URL};

/// Salt's targeting flag for a Saltpeter `target_type` (none for a glob).
pub(crate) fn target_flag(target_type: SaltTargetType) -> Option<&'static str> {
    match target_type {
        SaltTargetType::Glob => None,
        SaltTargetType::Pcre => Some("-E"),
        SaltTargetType::List => Some("-L"),
        SaltTargetType::Grain => Some("-G"),
        SaltTargetType::GrainPcre => Some("-P"),
        SaltTargetType::Pillar => Some("-I"),
        SaltTargetType::Nodegroup => Some("-N"),
        SaltTargetType::Compound => Some("-C"),
        SaltTargetType::Ipcidr => Some("-S"),
    }
}

/// `salt [-c DIR] --out=json --out-indent=-1 -t T [FLAG] [OPTIONS] -- TARGET FUNCTION
/// ARGS...`: every option first, then `--`, after which salt's option parser (Python's
/// optparse) takes every word as it is. A target starting with `-` (a minion id such as
/// `--out-file=x` first in a list, a row another server wrote) is then a target, never
/// an option; checked against salt 3008 (docs/security.md, "Salt's command line").
pub(crate) fn argv(
    settings: &SaltSettings,
    flag: Option<&str>,
    options: &[String],
    target: &str,
    function: &str,
    args: &[String],
) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(dir) = &settings.config_dir {
        argv.push("-c".to_string());
        argv.push(dir.clone());
    }
    argv.push("--out=json".to_string());
    argv.push("--out-indent=-1".to_string());
    argv.push("-t".to_string());
    argv.push(settings.timeout_s.max(1).to_string());
    if let Some(flag) = flag {
        argv.push(flag.to_string());
    }
    argv.extend(options.iter().cloned());
    argv.push("--".to_string());
    argv.push(target.to_string());
    argv.push(function.to_string());
    argv.extend(args.iter().cloned());
    argv
}

/// One salt call, rendered either as a `salt` command line or as a salt bridge request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SaltCall {
    pub target_type: SaltTargetType,
    pub target: String,
    pub function: String,
    pub arg: Vec<String>,
    /// Keyword arguments, typed (the command line writes them as `k=v`).
    pub kwarg: Vec<(String, Value)>,
    /// Through the salt bridge, only match the target from the master's data (no
    /// publish); the command line runs the function instead.
    pub match_only: bool,
    /// Through the salt bridge, wait for the minions' returns; without, publish only and
    /// answer each minion published to with [`PUBLISHED`]. The command line always waits.
    pub returns: bool,
}

/// What the salt bridge answers for a minion a publish without returns went to.
pub(crate) const PUBLISHED: &str = "published";

impl SaltCall {
    pub(crate) fn new(target_type: SaltTargetType, target: &str, function: &str) -> SaltCall {
        SaltCall {
            target_type,
            target: target.to_string(),
            function: function.to_string(),
            arg: Vec::new(),
            kwarg: Vec::new(),
            match_only: false,
            returns: true,
        }
    }

    pub(crate) fn kwarg(mut self, key: &str, value: Value) -> SaltCall {
        self.kwarg.push((key.to_string(), value));
        self
    }

    /// `salt` argv. `cmd` is never YAML-parsed (`--no-parse=cmd`, an option: before the
    /// `--`); booleans are `True` and `False`, strings as they are, anything else as JSON
    /// (which Salt's YAML reads).
    pub(crate) fn argv(&self, settings: &SaltSettings, extra_timeout_s: u64) -> Vec<String> {
        let mut args = self.arg.clone();
        let mut options = Vec::new();
        for (k, v) in &self.kwarg {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Bool(true) => "True".to_string(),
                Value::Bool(false) => "False".to_string(),
                other => other.to_string(),
            };
            args.push(format!("{k}={text}"));
            if k == "cmd" {
                options.push("--no-parse=cmd".to_string());
            }
        }
        let mut settings = settings.clone();
        settings.timeout_s += extra_timeout_s;
        argv(
            &settings,
            target_flag(self.target_type),
            &options,
            &self.target,
            &self.function,
            &args,
        )
    }

    /// The salt bridge's request (its `id` is set by the bridge).
    pub(crate) fn bridge_request(&self, timeout_s: u64) -> Value {
        serde_json::json!({
            "op": if self.match_only { "match" } else { "publish" },
            "tgt": self.target,
            "tgt_type": tgt_type_name(self.target_type),
            "fun": self.function,
            "arg": self.arg,
            "kwarg": self.kwarg.iter().cloned().collect::<serde_json::Map<String, Value>>(),
            "timeout": timeout_s.max(1),
            "returns": self.returns,
        })
    }
}

/// LocalClient's `tgt_type` for a Saltpeter `target_type`.
pub(crate) fn tgt_type_name(target_type: SaltTargetType) -> &'static str {
    match target_type {
        SaltTargetType::Glob => "glob",
        SaltTargetType::Pcre => "pcre",
        SaltTargetType::List => "list",
        SaltTargetType::Grain => "grain",
        SaltTargetType::GrainPcre => "grain_pcre",
        SaltTargetType::Pillar => "pillar",
        SaltTargetType::Nodegroup => "nodegroup",
        SaltTargetType::Compound => "compound",
        SaltTargetType::Ipcidr => "ipcidr",
    }
}

/// The launch of one round: `cmd.run_all` of the wrapper, rendered by each minion (`{{
/// opts['id'] }}`, `{{ opts['pki_dir'] }}`), without a shell, with only the server URL and
/// the run ids in its environment (`SP_RUN=41,42,43`: the wrapper starts one daemonized
/// wrapper per run). Nothing here is secret.
pub(crate) fn launch_call(minions: &[String], wrapper: &str, runs: &[u64], url: &str) -> SaltCall {
    let runs: Vec<String> = runs.iter().map(u64::to_string).collect();
    let env = serde_json::json!({ ENV_URL: url, ENV_RUN: runs.join(",") });
    SaltCall::new(SaltTargetType::List, &minions.join(","), "cmd.run_all")
        .kwarg(
            "cmd",
            Value::String(format!(
                "{} --daemonize --minion-id '{{{{ opts[\"id\"] }}}}' --minion-key \
                 '{{{{ opts[\"pki_dir\"] }}}}/minion.pem'",
                shell_quote(wrapper)
            )),
        )
        .kwarg("template", Value::String("jinja".into()))
        .kwarg("python_shell", Value::Bool(false))
        .kwarg("env", env)
}

/// The deployment of `source` (SHA-256 `hash`) to `path`: `file.manage_file`, the
/// execution function behind the `file.managed` state, called directly so it never
/// waits for (or holds) the minion's state lock. It fetches the file from the master,
/// checks its hash, writes it next to `path` and renames it into place (a running
/// wrapper keeps its old inode), mode 0755; an unchanged file is not copied again.
/// `hash: None`: the operator's `wrapper_source`, whose hash is not known here.
pub(crate) fn deploy_call(
    minions: &[String],
    path: &str,
    source: &str,
    hash: Option<&str>,
) -> SaltCall {
    let (source_sum, skip_verify) = match hash {
        Some(hash) => (
            serde_json::json!({"hash_type": "sha256", "hsum": hash}),
            false,
        ),
        None => (serde_json::json!({}), true),
    };
    SaltCall::new(SaltTargetType::List, &minions.join(","), "file.manage_file")
        .kwarg("name", Value::String(path.into()))
        .kwarg("sfn", Value::String(String::new()))
        .kwarg("ret", Value::Null)
        .kwarg("source", Value::String(source.into()))
        .kwarg("source_sum", source_sum)
        .kwarg("skip_verify", Value::Bool(skip_verify))
        .kwarg("user", Value::Null)
        .kwarg("group", Value::Null)
        .kwarg("mode", Value::String("0755".into()))
        .kwarg("attrs", Value::Null)
        .kwarg("saltenv", Value::String("base".into()))
        .kwarg("backup", Value::String(String::new()))
        .kwarg("makedirs", Value::Bool(true))
}

/// Quote a word for the command line Salt splits with shlex (`python_shell=False`).
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Each (run, minion) launch outcome from the returns of a round's launch. A minion whose
/// launch command failed may still have started some runs: each started run printed
/// `saltpeter-wrapper: run N continues in the background`, each failed one `saltpeter-wrapper:
/// run N: why` on stderr.
pub(crate) fn launch_outcomes(
    runs: &[u64],
    minions: &[String],
    returns: &Returns,
    stderr_tail: &str,
) -> Vec<(u64, MinionOutcome)> {
    let mut out = Vec::with_capacity(runs.len() * minions.len());
    for machine in minions {
        let value = returns.by_minion.get(machine);
        for &run in runs {
            let (result, silent) = match value {
                Some(value) => match run_all_result(value) {
                    MinionResult::Ok => (Ok(()), None),
                    MinionResult::NoReturn(why) => (Ok(()), Some(why)),
                    MinionResult::Failed(why) => match run_line(value, run) {
                        RunLine::Started => (Ok(()), None),
                        RunLine::Failed(line) => {
                            (Err(format!("wrapper launch failed: {line}")), None)
                        }
                        RunLine::Absent => (Err(format!("wrapper launch failed: {why}")), None),
                    },
                },
                None if returns.no_match => (
                    Err("salt matched no minion of that name (is its key accepted?)".to_string()),
                    None,
                ),
                None => (
                    Ok(()),
                    Some(format!("salt returned nothing for it: {stderr_tail}")),
                ),
            };
            out.push((
                run,
                MinionOutcome {
                    machine: machine.clone(),
                    result,
                    silent,
                    unreachable: None,
                    server: None,
                },
            ));
        }
    }
    out
}

/// What a launch command's output says about one run.
#[derive(Debug, PartialEq)]
enum RunLine {
    Started,
    Failed(String),
    Absent,
}

fn run_line(value: &Value, run: u64) -> RunLine {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    let started = format!("saltpeter-wrapper: run {run} continues");
    if text("stdout").lines().any(|l| l.starts_with(&started)) {
        return RunLine::Started;
    }
    let failed = format!("saltpeter-wrapper: run {run}: ");
    match text("stderr").lines().find(|l| l.starts_with(&failed)) {
        Some(line) => RunLine::Failed(said(&line[failed.len()..])),
        None => RunLine::Absent,
    }
}

/// Per-minion values from salt's output.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Returns {
    pub by_minion: BTreeMap<String, Value>,
    /// Salt said no minion matched the target.
    pub no_match: bool,
}

pub(crate) fn parse_returns(stdout: &str) -> Returns {
    let mut out = Returns::default();
    for line in stdout.lines() {
        let line = line.trim();
        if line.starts_with("No minions matched the target") {
            out.no_match = true;
            continue;
        }
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        for (minion, value) in map {
            out.by_minion.insert(minion, value);
        }
    }
    out
}

/// What a minion's value says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MinionResult {
    Ok,
    /// Did not answer (down, not connected, too slow).
    NoReturn(String),
    /// Answered with a failure.
    Failed(String),
}

/// A minion's words (its stderr, a comment, an answer) as a reason: escaped and clipped,
/// as everything from outside that blocking and main log and record in an event.
fn said(text: &str) -> String {
    logsafe::clip(text.trim(), logsafe::REASON_MAX)
}

fn no_return(text: &str) -> Option<String> {
    text.strip_prefix("Minion did not return.").map(|rest| {
        let why = rest.lines().next().unwrap_or("").trim();
        if why.is_empty() {
            "the minion did not return".to_string()
        } else {
            format!("the minion did not return {}", said(why))
        }
    })
}

/// A `test.ping` value.
pub(crate) fn ping_result(value: &Value) -> MinionResult {
    match value {
        Value::Bool(true) => MinionResult::Ok,
        Value::String(s) => match no_return(s) {
            Some(why) => MinionResult::NoReturn(why),
            None => MinionResult::Failed(said(s)),
        },
        other => MinionResult::Failed(said(&format!("unexpected ping answer {other}"))),
    }
}

/// A `cmd.run_all` value: retcode 0 is success; otherwise stderr (or stdout) says why.
pub(crate) fn run_all_result(value: &Value) -> MinionResult {
    match value {
        Value::Object(map) => {
            let retcode = map.get("retcode").and_then(Value::as_i64);
            let text = |key: &str| said(map.get(key).and_then(Value::as_str).unwrap_or(""));
            match retcode {
                Some(0) => MinionResult::Ok,
                Some(code) => {
                    let mut why = text("stderr");
                    if why.is_empty() {
                        why = text("stdout");
                    }
                    MinionResult::Failed(format!("exit code {code}: {why}"))
                }
                None => MinionResult::Failed(said(&format!("no retcode in {value}"))),
            }
        }
        // A publish without returns reached it (the salt bridge's word, never a minion's:
        // `cmd.run_all` returns an object).
        Value::String(s) if s == PUBLISHED => MinionResult::Ok,
        Value::String(s) => match no_return(s) {
            Some(why) => MinionResult::NoReturn(why),
            None => MinionResult::Failed(said(s)),
        },
        other => MinionResult::Failed(said(&format!("unexpected cmd.run_all answer {other}"))),
    }
}

/// A `file.manage_file` value: a state return of its own, whose `result` must be true.
pub(crate) fn managed_result(value: &Value) -> MinionResult {
    match value {
        Value::Object(ret) if ret.contains_key("result") => {
            match ret.get("result").and_then(Value::as_bool) {
                Some(true) => MinionResult::Ok,
                _ => MinionResult::Failed(match ret.get("comment") {
                    Some(Value::String(s)) => said(s),
                    Some(other) => said(&other.to_string()),
                    None => "the deployment failed without a comment".to_string(),
                }),
            }
        }
        other => state_result(other),
    }
}

/// A `state.single` value: every state's `result` must be true.
pub(crate) fn state_result(value: &Value) -> MinionResult {
    match value {
        Value::Object(states) if !states.is_empty() => {
            for state in states.values() {
                if state.get("result").and_then(Value::as_bool) != Some(true) {
                    let comment = state
                        .get("comment")
                        .map(|c| match c {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .unwrap_or_default();
                    return MinionResult::Failed(said(&comment));
                }
            }
            MinionResult::Ok
        }
        Value::String(s) => match no_return(s) {
            Some(why) => MinionResult::NoReturn(why),
            None => MinionResult::Failed(said(s)),
        },
        Value::Array(errors) => MinionResult::Failed(said(
            &errors
                .iter()
                .map(|e| {
                    e.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string())
                })
                .collect::<Vec<_>>()
                .join("; "),
        )),
        other => MinionResult::Failed(said(&format!("unexpected state answer {other}"))),
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
