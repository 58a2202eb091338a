//! One problem found in the configuration, and how bad it is.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The job (or file, or setting) is not used as written.
    Error,
    /// Accepted, but probably not what was meant (unknown key, no-effect key, ...).
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem found in the configuration. Displays as `file:line:column: message`, with
/// the file's name and the message escaped (`logsafe::escape`): they quote what the
/// files say (a job name, a value) and go to the log, `status`, `config check` and the
/// dashboard, one line each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based; 0 when the problem concerns the whole file (e.g. it cannot be read).
    pub line: usize,
    pub column: usize,
    pub severity: Severity,
    /// The job concerned, if any.
    pub job: Option<String>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            crate::logsafe::escape(&self.file.display().to_string()),
            self.line,
            self.column,
            crate::logsafe::escape(&self.message)
        )
    }
}
