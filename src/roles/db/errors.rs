//! What a storage operation is and how it failed, for both backends: the operation's
//! name in messages, the error kinds the loop acts on (a full disk, a lost batch), and
//! the checked conversions between the database's integers and names and ours.

use std::fmt;
use std::path::PathBuf;

use rusqlite::ErrorCode;

/// The operation that failed, as named in error messages ("could not {op}: ...").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    BeginBatch,
    CommitBatch,
    RollbackBatch,
    CreateRun,
    #[cfg(test)]
    AddTargets,
    UpdateRun,
    UpdateTarget,
    ReadRuns,
    AppendOutput,
    ReadOutput,
    RecordEvent,
    ReadEvents,
    #[cfg(test)]
    PruneEvents,
    ReadMeta,
    WriteMeta,
    Prune,
    ReclaimSpace,
    QueueDelivery,
    ReadDeliveries,
    RecordDelivery,
    Lease,
    Announce,
    Listen,
    WriteWrappers,
    ReadWrappers,
    SaltCalls,
    SaltServers,
    MinionKeys,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Check => "check database",
            Op::BeginBatch => "begin batch",
            Op::CommitBatch => "commit batch",
            Op::RollbackBatch => "roll back batch",
            Op::CreateRun => "create run",
            #[cfg(test)]
            Op::AddTargets => "add targets",
            Op::UpdateRun => "update run",
            Op::UpdateTarget => "update target",
            Op::ReadRuns => "read runs",
            Op::AppendOutput => "append output",
            Op::ReadOutput => "read output",
            Op::RecordEvent => "record event",
            Op::ReadEvents => "read events",
            #[cfg(test)]
            Op::PruneEvents => "prune events",
            Op::ReadMeta => "read meta",
            Op::WriteMeta => "write meta",
            Op::Prune => "prune runs",
            Op::ReclaimSpace => "reclaim free space",
            Op::QueueDelivery => "queue notification",
            Op::ReadDeliveries => "read notifications",
            Op::RecordDelivery => "record notification attempt",
            Op::Lease => "hold the leader lease",
            Op::Announce => "announce live changes",
            Op::Listen => "listen for live changes",
            Op::WriteWrappers => "record wrapper builds",
            Op::ReadWrappers => "read wrapper builds",
            Op::SaltCalls => "exchange salt calls with other servers",
            Op::SaltServers => "register this server's salt-master",
            Op::MinionKeys => "publish or read minion keys",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("could not open database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("could not create database {path} private (0600): {source}")]
    Private {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not configure database {path}: {source}")]
    Settings {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{path} is not a saltpeter database (application id {application_id:#x})")]
    Foreign { path: PathBuf, application_id: i32 },
    #[error(
        "database {path} has schema version {found}, newer than version {supported} of this \
         build; run a newer saltpeter or restore a backup"
    )]
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("could not migrate database {path} to schema version {version}: {source}")]
    Migrate {
        path: PathBuf,
        version: u32,
        source: rusqlite::Error,
    },
    #[error("could not {op}: the database is full (no disk space or size limit reached)")]
    DiskFull { op: Op },
    #[error(
        "could not {op}: the open batch was rolled back by sqlite after an earlier error; \
         roll it back and apply its requests again"
    )]
    BatchLost { op: Op },
    #[error("could not {op}: {source}")]
    Sql { op: Op, source: rusqlite::Error },
    #[error("could not {op}: {what} does not exist")]
    NotFound { op: Op, what: String },
    #[error("could not {op}: column {column} holds {value:?}, which this build does not know")]
    BadValue {
        op: Op,
        column: &'static str,
        value: String,
    },
    #[error("could not {op}: {reason}")]
    Invalid { op: Op, reason: String },
    /// A PostgreSQL statement failed (`pg/`).
    #[error("could not {op}: {}", crate::config::database::with_causes(source))]
    Postgres { op: Op, source: postgres::Error },
    /// The PostgreSQL database cannot be used (unreachable, foreign, too new); the message
    /// names the database by its URL without any password.
    #[error("{0}")]
    Unusable(String),
    /// The PostgreSQL server cannot be reached now (no answer, the connection refused or
    /// cut, the server starting up or shutting down): waiting helps, unlike `Unusable`.
    #[error("{0}")]
    Unreachable(String),
}

/// Maps a SQLite error of `op`, keeping disk-full apart.
pub(crate) fn sql_error(op: Op) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| {
        if source.sqlite_error_code() == Some(ErrorCode::DiskFull) {
            StoreError::DiskFull { op }
        } else {
            StoreError::Sql { op, source }
        }
    }
}

/// Converts a count or id to SQLite's integer type.
pub(crate) fn to_db(op: Op, what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid {
        op,
        reason: format!("{what} {value} is out of range"),
    })
}

/// Converts a stored non-negative integer back; a negative one is a bad value.
pub(crate) fn from_db(op: Op, column: &'static str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::BadValue {
        op,
        column,
        value: value.to_string(),
    })
}

/// Parses a stored state name with `parse`, naming the column when it is unknown.
pub(crate) fn parse_name<T>(
    op: Op,
    column: &'static str,
    text: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    parse(text).ok_or_else(|| StoreError::BadValue {
        op,
        column,
        value: text.to_string(),
    })
}
