//! Protocol v1's lines and the reading of one operation's output (docs/executors.md).
//!
//! The daemon writes one request line on the plugin's stdin and closes it; the plugin
//! writes its hello, any progress lines, and one result line on stdout, then exits 0.
//! Every protocol line is a JSON object with `"saltpeter_executor": 1` and a `type`; a
//! line without the tag is not the protocol's (a library's chatter): it is kept for the
//! log, clipped, and otherwise ignored.
//!
//! [`read_output`] turns what a finished (or killed) plugin wrote into a [`Reading`]:
//! what it said up to the first breach of the protocol, and that breach by name. Pure: a
//! test feeds it bytes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{MAX_LINE, MAX_STDOUT, PROTOCOL, TAG};

/// The operations of protocol v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Describe,
    CheckConfig,
    Resolve,
    Ping,
    Launch,
    Kill,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Op::Describe,
        Op::CheckConfig,
        Op::Resolve,
        Op::Ping,
        Op::Launch,
        Op::Kill,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Describe => "describe",
            Op::CheckConfig => "check_config",
            Op::Resolve => "resolve",
            Op::Ping => "ping",
            Op::Launch => "launch",
            Op::Kill => "kill",
        }
    }

    /// Operations a plugin must implement; `kill` is optional (capability `kill`).
    pub fn required(self) -> bool {
        self != Op::Kill
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The daemon's one line: the operation, the executor's name and configuration
/// (`saltpeter_config.executors.NAME.config`) and the operation's arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub op: Op,
    pub executor: String,
    #[serde(default)]
    pub config: Value,
    #[serde(default)]
    pub args: Value,
    /// Seconds the daemon gives the operation before it kills the plugin's group: a
    /// plugin stops its work a little before (reporting what it did not finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u64>,
}

/// One job as `check_config` sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRef {
    pub name: String,
    pub target: String,
    pub target_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckConfigArgs {
    pub jobs: Vec<JobRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveArgs {
    pub target: String,
    pub target_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingArgs {
    pub machines: Vec<String>,
    /// How long one machine may take to answer.
    pub timeout_s: u64,
}

/// This build's wrapper: where it is on the server (`source`), where it goes on a
/// machine (`path`), and its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrapperFile {
    pub path: String,
    pub source: String,
    pub sha256: String,
}

/// One wrapper to start: run `command` (an argv, nothing secret in it) on `machine`
/// with `token` and a newline on its stdin; with `deploy`, first make sure
/// `wrapper.path` on the machine is this build (capability `deploy`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchTarget {
    pub machine: String,
    pub token: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub deploy: bool,
}

impl std::fmt::Debug for LaunchTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchTarget")
            .field("machine", &self.machine)
            .field("command", &self.command)
            .field("deploy", &self.deploy)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchArgs {
    pub run: u64,
    pub urls: Vec<String>,
    pub wrapper: WrapperFile,
    pub targets: Vec<LaunchTarget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillArgs {
    pub run: u64,
    pub machines: Vec<String>,
}

/// A configuration error `check_config` reports: for one job (`job`) or the executor's
/// own configuration (no `job`), at `key` (`config.user`, `target`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigError {
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    pub message: String,
}

/// One configuration key `describe` lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyDoc {
    pub name: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub doc: String,
}

/// The plugin's first protocol line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocols: Vec<u32>,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// The last protocol line: `ok` and what the operation answers, or `error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `resolve`: the machines of the expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<String>>,
    /// `check_config`: what is wrong (empty: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ConfigError>>,
    /// `describe`: the configuration keys and the target types understood.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<KeyDoc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_types: Option<Vec<String>>,
}

/// Every line a plugin may write, by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PluginLine {
    Hello(Hello),
    /// `launch`: the wrapper on `machine` started (and detached).
    Launched {
        machine: String,
    },
    /// `launch`: this build's wrapper was installed on `machine`.
    Deployed {
        machine: String,
    },
    /// `launch`/`kill`: it did not work on `machine`, and why.
    Failed {
        machine: String,
        reason: String,
    },
    /// `launch`/`ping`: `machine` could not be reached (255 for a launch).
    Unreachable {
        machine: String,
        reason: String,
    },
    /// `ping`: `machine` answered.
    Reachable {
        machine: String,
    },
    /// `kill`: the wrapper of the run on `machine` was signalled.
    Killed {
        machine: String,
    },
    Result(ResultLine),
}

/// A line in protocol form (the tag added), with its newline.
pub fn encode<T: Serialize>(line: &T) -> String {
    let mut value = serde_json::to_value(line).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert(TAG.to_string(), Value::from(PROTOCOL));
    }
    format!("{value}\n")
}

/// The request line for `op` (without a deadline: a plugin run by a test).
pub fn request_line(op: Op, executor: &str, config: &Value, args: Value) -> String {
    encode(&Request {
        op,
        executor: executor.to_string(),
        config: config.clone(),
        args,
        deadline_s: None,
    })
}

/// The request line for `op`, which the plugin gets `deadline` to answer.
pub fn request_within(
    op: Op,
    executor: &str,
    config: &Value,
    args: Value,
    deadline: std::time::Duration,
) -> String {
    encode(&Request {
        op,
        executor: executor.to_string(),
        config: config.clone(),
        args,
        deadline_s: Some(deadline.as_secs()),
    })
}

/// A breach of the protocol, by name (docs/executors.md, "Breaches").
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Breach {
    #[error("no_hello: the first protocol line is not a hello ({0})")]
    NoHello(String),
    #[error(
        "wrong_protocol: the plugin speaks protocol {offered:?}; this daemon speaks [{PROTOCOL}]"
    )]
    WrongProtocol { offered: Vec<u32> },
    #[error(
        "wrong_tag: line {line} is tagged {tag}; protocol {PROTOCOL} tags its lines with {PROTOCOL}"
    )]
    WrongTag { line: usize, tag: String },
    #[error("bad_line: line {line} is not a protocol v1 line: {error}")]
    BadLine { line: usize, error: String },
    #[error("line_too_long: line {line} is over {MAX_LINE} bytes")]
    LineTooLong { line: usize },
    #[error("stdout_too_large: over {MAX_STDOUT} bytes on stdout ({bytes} written)")]
    StdoutTooLarge { bytes: usize },
    #[error("line_after_result: line {line} comes after the result")]
    LineAfterResult { line: usize },
    #[error("unexpected_line: line {line} ({kind}) does not belong to {op}")]
    UnexpectedLine { line: usize, kind: String, op: Op },
    #[error("no_result: the plugin exited ({status}) without a result line")]
    NoResult { status: String },
    #[error("bad_exit: the result says ok but the plugin exited {status}")]
    BadExit { status: String },
    #[error("bad_result: {0}")]
    BadResult(String),
    #[error("deadline: no result within {secs} s; the plugin was killed")]
    Deadline { secs: u64 },
}

impl Breach {
    /// The breach's name, as `saltpeterctl executor test` reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Breach::NoHello(_) => "no_hello",
            Breach::WrongProtocol { .. } => "wrong_protocol",
            Breach::WrongTag { .. } => "wrong_tag",
            Breach::BadLine { .. } => "bad_line",
            Breach::LineTooLong { .. } => "line_too_long",
            Breach::StdoutTooLarge { .. } => "stdout_too_large",
            Breach::LineAfterResult { .. } => "line_after_result",
            Breach::UnexpectedLine { .. } => "unexpected_line",
            Breach::NoResult { .. } => "no_result",
            Breach::BadExit { .. } => "bad_exit",
            Breach::BadResult(_) => "bad_result",
            Breach::Deadline { .. } => "deadline",
        }
    }
}

/// What a finished operation left: stdout (at most [`MAX_STDOUT`] kept, `dropped`
/// counted beyond), stderr, how it ended.
#[derive(Debug, Default)]
pub struct RawOutput {
    pub stdout: Vec<u8>,
    pub dropped: usize,
    pub stderr: Vec<u8>,
    /// The exit code; `None`: killed by a signal.
    pub code: Option<i32>,
    /// Killed at its deadline (of this many seconds).
    pub deadline: Option<u64>,
}

impl RawOutput {
    fn status(&self) -> String {
        match (self.code, self.deadline) {
            (_, Some(secs)) => format!("killed at its {secs} s deadline"),
            (Some(code), None) => format!("with status {code}"),
            (None, None) => "killed by a signal".to_string(),
        }
    }
}

/// What a plugin said in one operation, up to the first breach.
#[derive(Debug, Default)]
pub struct Reading {
    pub hello: Option<Hello>,
    /// The progress lines, in order.
    pub progress: Vec<PluginLine>,
    pub result: Option<ResultLine>,
    /// Lines without the tag (clipped, at most [`MAX_FOREIGN`] of them).
    pub foreign: Vec<String>,
    pub breach: Option<Breach>,
}

/// Foreign lines kept for the log per operation.
pub const MAX_FOREIGN: usize = 20;

/// Which progress lines `op` may send.
fn belongs(op: Op, line: &PluginLine) -> bool {
    matches!(
        (op, line),
        (
            Op::Launch,
            PluginLine::Launched { .. }
                | PluginLine::Deployed { .. }
                | PluginLine::Failed { .. }
                | PluginLine::Unreachable { .. }
        ) | (
            Op::Ping,
            PluginLine::Reachable { .. } | PluginLine::Unreachable { .. }
        ) | (
            Op::Kill,
            PluginLine::Killed { .. } | PluginLine::Failed { .. }
        )
    )
}

fn kind(line: &PluginLine) -> &'static str {
    match line {
        PluginLine::Hello(_) => "hello",
        PluginLine::Launched { .. } => "launched",
        PluginLine::Deployed { .. } => "deployed",
        PluginLine::Failed { .. } => "failed",
        PluginLine::Unreachable { .. } => "unreachable",
        PluginLine::Reachable { .. } => "reachable",
        PluginLine::Killed { .. } => "killed",
        PluginLine::Result(_) => "result",
    }
}

/// One line of stdout: a protocol line, a foreign one, or a breach.
fn read_line(number: usize, text: &[u8]) -> Result<Option<PluginLine>, Breach> {
    if text.len() > MAX_LINE {
        return Err(Breach::LineTooLong { line: number });
    }
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(text) else {
        return Ok(None);
    };
    let Some(tag) = map.get(TAG) else {
        return Ok(None);
    };
    if tag.as_u64() != Some(u64::from(PROTOCOL)) {
        return Err(Breach::WrongTag {
            line: number,
            tag: crate::logsafe::clip(&tag.to_string(), 40),
        });
    }
    serde_json::from_value::<PluginLine>(Value::Object(map))
        .map(Some)
        .map_err(|e| Breach::BadLine {
            line: number,
            error: e.to_string(),
        })
}

/// Read what a plugin wrote for `op`, stopping at the first breach.
pub fn read_output(op: Op, raw: &RawOutput) -> Reading {
    let mut reading = Reading::default();
    let lines = raw.stdout.split(|&b| b == b'\n').enumerate();
    for (i, text) in lines {
        let number = i + 1;
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = match read_line(number, text) {
            Ok(Some(line)) => line,
            Ok(None) => {
                if reading.foreign.len() < MAX_FOREIGN {
                    let shown = String::from_utf8_lossy(&text[..text.len().min(400)]);
                    reading.foreign.push(crate::logsafe::clip(&shown, 200));
                }
                continue;
            }
            Err(breach) => {
                reading.breach = Some(breach);
                return reading;
            }
        };
        let breach = match (&reading.hello, &reading.result, line) {
            (_, Some(_), _) => Some(Breach::LineAfterResult { line: number }),
            (None, None, PluginLine::Hello(hello)) => {
                let speaks = hello.protocols.contains(&PROTOCOL);
                let offered = hello.protocols.clone();
                reading.hello = Some(hello);
                (!speaks).then_some(Breach::WrongProtocol { offered })
            }
            (None, None, other) => Some(Breach::NoHello(format!(
                "line {number} is {}",
                kind(&other)
            ))),
            (Some(_), None, PluginLine::Result(result)) => {
                reading.result = Some(result);
                None
            }
            (Some(_), None, line) if belongs(op, &line) => {
                reading.progress.push(line);
                None
            }
            (Some(_), None, line) => Some(Breach::UnexpectedLine {
                line: number,
                kind: kind(&line).to_string(),
                op,
            }),
        };
        if breach.is_some() {
            reading.breach = breach;
            return reading;
        }
    }
    reading.breach = final_breach(&reading, raw);
    reading
}

/// What is wrong once every line was read: too much output, a deadline, no hello, no
/// result, a result that contradicts the exit status.
fn final_breach(reading: &Reading, raw: &RawOutput) -> Option<Breach> {
    if raw.dropped > 0 || raw.stdout.len() > MAX_STDOUT {
        return Some(Breach::StdoutTooLarge {
            bytes: raw.stdout.len() + raw.dropped,
        });
    }
    if let Some(secs) = raw.deadline {
        return Some(Breach::Deadline { secs });
    }
    if reading.hello.is_none() {
        return Some(Breach::NoHello(format!(
            "it exited {} without one",
            raw.status()
        )));
    }
    match &reading.result {
        None => Some(Breach::NoResult {
            status: raw.status(),
        }),
        Some(r) if r.ok && raw.code != Some(0) => Some(Breach::BadExit {
            status: raw.status(),
        }),
        Some(_) => None,
    }
}

impl Reading {
    /// The result of an operation that kept the protocol; an error (`Err`) says what
    /// went wrong: the breach, or the plugin's own `error`.
    pub fn outcome(&self) -> Result<&ResultLine, String> {
        if let Some(breach) = &self.breach {
            return Err(format!("protocol breach {breach}"));
        }
        match &self.result {
            Some(r) if r.ok => Ok(r),
            Some(r) => Err(r
                .error
                .clone()
                .unwrap_or_else(|| "the plugin failed without saying why".to_string())),
            None => Err("no result".to_string()),
        }
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
