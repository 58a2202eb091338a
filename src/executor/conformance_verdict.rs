//! What a plugin's answers mean for `saltpeterctl executor test`: each check's
//! [`Verdict`] and its line, and the readings of an operation ([`Exchange`]) that turn a
//! breach, a refusal or a machine left out into a named failure.

use std::collections::HashSet;

use super::super::protocol::{self, Breach, PluginLine, RawOutput, Reading, ResultLine};
use super::super::spec::FileProblem;

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok(String),
    /// Passed, with something worth fixing.
    Warn(String),
    /// Not run, and why.
    Skip(String),
    /// `problem`: a breach's name ([`Breach::name`]), a file problem's, or a name of this
    /// check's (docs/executors.md lists them all).
    Fail {
        problem: &'static str,
        details: String,
    },
}

/// One check's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
}

impl Check {
    pub fn passed(&self) -> bool {
        !matches!(self.verdict, Verdict::Fail { .. })
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.name;
        match &self.verdict {
            Verdict::Ok(details) if details.is_empty() => write!(f, "ok {name}"),
            Verdict::Ok(details) => write!(f, "ok {name}: {details}"),
            Verdict::Warn(details) => write!(f, "warn {name}: {details}"),
            Verdict::Skip(details) => write!(f, "skip {name}: {details}"),
            Verdict::Fail { problem, details } => write!(f, "FAIL {name}: {problem}: {details}"),
        }
    }
}

/// A check's verdict: `Ok` when it ran its course, `Err` when something stopped it
/// (`?` on a failed operation).
pub(super) type Checked = Result<Verdict, Verdict>;

/// A failure; its details (which quote the plugin) are clipped and escaped for a
/// terminal.
pub(super) fn fail(problem: &'static str, details: impl Into<String>) -> Verdict {
    Verdict::Fail {
        problem,
        details: crate::logsafe::clip(&details.into(), 1000),
    }
}

/// A message that starts with its name (`missing: ...`) without it.
fn details_of(message: String, name: &str) -> String {
    match message
        .strip_prefix(name)
        .and_then(|m| m.strip_prefix(": "))
    {
        Some(rest) => rest.to_string(),
        None => message,
    }
}

pub(super) fn file_problem(problem: &FileProblem) -> Verdict {
    let name = match problem {
        FileProblem::Missing { .. } => "missing",
        FileProblem::NotExecutable { .. } => "not_executable",
        FileProblem::Unreadable { .. } => "unreadable",
        FileProblem::PinMismatch { .. } => "sha256_mismatch",
    };
    fail(name, details_of(problem.to_string(), name))
}

pub(super) fn breach(breach: &Breach, raw: &RawOutput) -> Verdict {
    let details = details_of(breach.to_string(), breach.name());
    fail(breach.name(), format!("{details}{}", stderr_note(raw)))
}

/// The end of the plugin's stderr, for a failure's details.
pub(super) fn stderr_note(raw: &RawOutput) -> String {
    let text = String::from_utf8_lossy(&raw.stderr);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let tail: String = {
        let chars: Vec<char> = text.chars().collect();
        chars[chars.len().saturating_sub(300)..].iter().collect()
    };
    format!(" (stderr: {})", crate::logsafe::clip(&tail, 300))
}

pub(super) fn status(raw: &RawOutput) -> String {
    match (raw.code, raw.deadline) {
        (_, Some(secs)) => format!("was killed at its {secs} s deadline"),
        (Some(code), None) => format!("exited {code}"),
        (None, None) => "was killed by a signal".to_string(),
    }
}

/// What one operation left.
pub(super) struct Exchange {
    pub(super) raw: RawOutput,
    pub(super) reading: Reading,
}

impl Exchange {
    /// The result of an operation expected to succeed.
    pub(super) fn answer(&self) -> Result<&ResultLine, Verdict> {
        if let Some(b) = &self.reading.breach {
            return Err(breach(b, &self.raw));
        }
        match &self.reading.result {
            Some(result) if result.ok => Ok(result),
            Some(result) => Err(fail(
                "refused",
                format!(
                    "ok:false: {}{}",
                    result.error.as_deref().unwrap_or("(no error given)"),
                    stderr_note(&self.raw)
                ),
            )),
            None => Err(fail("no_result", "no result line")),
        }
    }

    /// The error of an operation expected to be refused (`what` says why it should be).
    pub(super) fn refusal(&self, what: &str) -> Result<String, Verdict> {
        if let Some(b) = &self.reading.breach {
            return Err(breach(b, &self.raw));
        }
        match &self.reading.result {
            Some(result) if !result.ok => Ok(result.error.clone().unwrap_or_default()),
            _ => Err(fail(
                "accepted",
                format!("the result is ok:true for {what}"),
            )),
        }
    }
}

pub(super) fn config_error(error: &protocol::ConfigError) -> String {
    let at = match (&error.job, &error.key) {
        (Some(job), Some(key)) => format!("job {job}, {key}: "),
        (Some(job), None) => format!("job {job}: "),
        (None, Some(key)) => format!("{key}: "),
        (None, None) => String::new(),
    };
    crate::logsafe::clip(&format!("{at}{}", error.message), 300)
}

/// What the progress lines said about each machine asked, in words; a machine asked
/// and not answered (`silent`) or answered and not asked (`unasked`) fails the check.
/// `deployed` is no answer: a `launched`, `failed` or `unreachable` must follow it.
pub(super) fn per_machine(asked: &[String], progress: &[PluginLine]) -> Result<String, Verdict> {
    let mut said = Vec::new();
    let mut answered = HashSet::new();
    for line in progress {
        let (machine, word) = match line {
            PluginLine::Launched { machine } => (machine, "launched".to_string()),
            PluginLine::Reachable { machine } => (machine, "reachable".to_string()),
            PluginLine::Killed { machine } => (machine, "killed".to_string()),
            PluginLine::Deployed { machine } => (machine, "deployed".to_string()),
            PluginLine::Failed { machine, reason } => (machine, format!("failed ({reason})")),
            PluginLine::Unreachable { machine, reason } => {
                (machine, format!("unreachable ({reason})"))
            }
            PluginLine::Hello(_) | PluginLine::Result(_) => continue,
        };
        if !asked.contains(machine) {
            return Err(fail(
                "unasked",
                format!(
                    "a line about {:?}, which was not asked about",
                    crate::logsafe::clip(machine, 60)
                ),
            ));
        }
        if !matches!(line, PluginLine::Deployed { .. }) {
            answered.insert(machine.clone());
        }
        said.push(format!("{machine} {word}"));
    }
    if let Some(missing) = asked.iter().find(|m| !answered.contains(*m)) {
        return Err(fail(
            "silent",
            format!("no line about {missing}: the daemon would count it as failed or unreachable"),
        ));
    }
    if asked.is_empty() {
        return Ok("no machines (give --machine or --target)".to_string());
    }
    Ok(crate::logsafe::clip(&said.join(", "), 400))
}
