//! Reading typed values out of YAML nodes, and collecting diagnostics.
//!
//! Every reader returns `Err(message)` saying what was expected and what was found; the caller
//! attaches the node's position. Booleans accept YAML 1.1 spellings (`yes`, `no`, `on`, `off`,
//! `y`, `n`) because the original Saltpeter's files use them.

use std::path::{Path, PathBuf};

use super::diagnostic::{Diagnostic, Severity};
use super::yaml::{Node, NodeKind, Pos};

/// Diagnostics for one file.
pub(crate) struct Sink<'a> {
    pub(crate) file: &'a Path,
    pub(crate) out: &'a mut Vec<Diagnostic>,
}

impl Sink<'_> {
    pub(crate) fn push(
        &mut self,
        severity: Severity,
        pos: Pos,
        job: Option<&str>,
        message: String,
    ) {
        self.out
            .push(diagnostic(self.file, severity, pos, job, message));
    }
}

pub(crate) fn diagnostic(
    file: &Path,
    severity: Severity,
    pos: Pos,
    job: Option<&str>,
    message: String,
) -> Diagnostic {
    Diagnostic {
        file: PathBuf::from(file),
        line: pos.line,
        column: pos.column,
        severity,
        job: job.map(str::to_string),
        message,
    }
}

/// Any non-null scalar, as text (numbers keep their source spelling: `08` stays `08`).
pub(crate) fn string(node: &Node) -> Result<String, String> {
    match &node.kind {
        NodeKind::Scalar { text, .. } if !node.is_null() => Ok(text.clone()),
        _ => Err(format!("expected a string, found {}", node.describe())),
    }
}

/// A string that is not empty or blank.
pub(crate) fn non_empty_string(node: &Node) -> Result<String, String> {
    let text = string(node)?;
    if text.trim().is_empty() {
        return Err("expected a non-empty string".to_string());
    }
    Ok(text)
}

/// Null gives `None`; anything else must be a non-empty string.
pub(crate) fn optional_string(node: &Node) -> Result<Option<String>, String> {
    if node.is_null() {
        return Ok(None);
    }
    let text = string(node)?;
    Ok(if text.trim().is_empty() {
        None
    } else {
        Some(text)
    })
}

/// YAML 1.1 boolean spellings, as the original's PyYAML read them.
pub(crate) fn bool_word(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
            Some(true)
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n" | "N" => {
            Some(false)
        }
        _ => None,
    }
}

pub(crate) fn boolean(node: &Node) -> Result<bool, String> {
    node.scalar()
        .and_then(|t| bool_word(t.trim()))
        .ok_or_else(|| {
            format!(
                "expected true or false (yes/no and on/off also work), found {}",
                found(node)
            )
        })
}

/// A whole, non-negative number (`1_000` allowed).
pub(crate) fn unsigned(node: &Node) -> Result<u64, String> {
    let Some(text) = node.scalar().filter(|_| !node.is_null()) else {
        return Err(format!(
            "expected a whole number, found {}",
            node.describe()
        ));
    };
    let digits: String = text.trim().trim_start_matches('+').replace('_', "");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("expected a whole number, found {}", found(node)));
    }
    digits
        .parse::<u64>()
        .map_err(|_| format!("{text} is too large"))
}

/// A number of seconds (whole, `0` allowed).
pub(crate) fn seconds(node: &Node) -> Result<u64, String> {
    unsigned(node).map_err(|m| format!("{m} (a number of seconds)"))
}

/// A TCP port; 0 asks the system for any free port (tests, several daemons on one host).
pub(crate) fn port(node: &Node) -> Result<u16, String> {
    match unsigned(node)? {
        n @ 0..=65535 => u16::try_from(n).map_err(|_| format!("{n} is not a port")),
        n => Err(format!("{n} is not a port number (0-65535)")),
    }
}

pub(crate) fn timezone(node: &Node) -> Result<chrono_tz::Tz, String> {
    let name = non_empty_string(node)?;
    name.trim().parse::<chrono_tz::Tz>().map_err(|_| {
        format!("unknown time zone `{name}`: expected an IANA name such as UTC or Europe/Berlin")
    })
}

/// A list of strings, or one comma-separated string.
pub(crate) fn string_list(node: &Node) -> Result<Vec<String>, String> {
    match &node.kind {
        NodeKind::Seq(items) => items
            .iter()
            .map(|item| string(item).map(|s| s.trim().to_string()))
            .filter(|s| !matches!(s, Ok(s) if s.is_empty()))
            .collect(),
        NodeKind::Scalar { .. } if node.is_null() => Ok(Vec::new()),
        NodeKind::Scalar { text, .. } => Ok(text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()),
        NodeKind::Map(_) => {
            Err("expected a list or a comma-separated string, found a mapping".to_string())
        }
    }
}

/// A short rendering of a scalar for messages: 40 characters at most, escaped (a message
/// is logged and printed on terminals).
pub(crate) fn found(node: &Node) -> String {
    match node.scalar() {
        Some(text) if !node.is_null() => format!("`{}`", crate::logsafe::clip(text, 40)),
        _ => node.describe().to_string(),
    }
}

/// The known key closest to `key`, if it is close enough to be a likely typo.
pub(crate) fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (levenshtein(&key, k), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// "unknown key `x` (did you mean `y`?); it is ignored"
pub(crate) fn unknown_key_message(what: &str, key: &str, known: &[&str]) -> String {
    match suggest(key, known) {
        Some(best) => format!("unknown {what} `{key}` (did you mean `{best}`?); it is ignored"),
        None => format!("unknown {what} `{key}`; it is ignored"),
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// One file's `saltpeter_config` or `saltpeter_maintenance` section.
pub(crate) struct Section<'a> {
    pub(crate) file: &'a std::path::Path,
    pub(crate) node: &'a Node,
}
