//! What a load of the configuration directory holds: its files' states and its jobs,
//! valid or not, and why the directory itself could not be used.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::content::FileContent;
use super::diagnostic::Diagnostic;
use super::job::Job;

/// The configuration directory itself could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDirError {
    #[error("could not read configuration directory {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration path {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{path}{at}: {message}")]
    File {
        path: PathBuf,
        /// `, line N`, or nothing when the whole file is at fault.
        at: String,
        message: String,
    },
}

/// What identifies a file's content cheaply: if none of these changed, the file did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fingerprint {
    pub len: u64,
    pub modified: Option<SystemTime>,
    pub ctime_ns: i128,
    pub inode: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileState {
    /// Parsed; its jobs are the ones in it now.
    Loaded,
    /// Could not be read or parsed; `kept_previous` if its last good version is in effect.
    Failed { kept_previous: bool },
}

#[derive(Debug, Clone)]
pub struct FileStatus {
    pub fingerprint: Fingerprint,
    pub state: FileState,
    /// What later loads need of the last good parse of this file (this one, or the
    /// previous one when `Failed`).
    pub(super) content: Option<Arc<FileContent>>,
}

/// A job that could not be validated: listed (status, API, UI) but never fired.
#[derive(Debug, Clone)]
pub struct InvalidJob {
    pub name: String,
    pub group: String,
    pub file: PathBuf,
    pub line: usize,
    pub errors: Vec<Diagnostic>,
}

#[derive(Debug, Clone)]
pub enum JobEntry {
    /// Shared: runs in flight and reloads hold the same job without copying it.
    Valid(Arc<Job>),
    /// Boxed: most jobs are valid, and an entry is then as small as the `Arc`.
    Invalid(Box<InvalidJob>),
}

impl JobEntry {
    pub fn name(&self) -> &str {
        match self {
            JobEntry::Valid(job) => &job.name,
            JobEntry::Invalid(bad) => &bad.name,
        }
    }

    pub fn group(&self) -> &str {
        match self {
            JobEntry::Valid(job) => &job.group,
            JobEntry::Invalid(bad) => &bad.group,
        }
    }

    pub fn file(&self) -> &Path {
        match self {
            JobEntry::Valid(job) => &job.file,
            JobEntry::Invalid(bad) => &bad.file,
        }
    }

    /// The job, if it is valid.
    pub fn job(&self) -> Option<&Job> {
        match self {
            JobEntry::Valid(job) => Some(job),
            JobEntry::Invalid(_) => None,
        }
    }

    /// The shared job, if it is valid.
    pub fn job_ref(&self) -> Option<&Arc<Job>> {
        match self {
            JobEntry::Valid(job) => Some(job),
            JobEntry::Invalid(_) => None,
        }
    }
}
