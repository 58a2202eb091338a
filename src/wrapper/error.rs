//! Everything that can end the wrapper with an error, and the exit code of each. A leaf
//! below every part of the wrapper, which all report through it.

use std::path::PathBuf;
use std::time::Duration;

use crate::wire::wrapper::RejectCode;

/// Everything that can end the wrapper with an error.
#[derive(Debug, thiserror::Error)]
pub enum WrapperError {
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
    #[error("environment variable {var} is invalid: {reason}")]
    InvalidEnv { var: &'static str, reason: String },
    #[error("{0}")]
    Usage(String),
    #[error("could not open log file {path}: {err}")]
    LogFile { path: PathBuf, err: std::io::Error },
    #[error("could not daemonize ({step}): {err}")]
    Daemonize { step: &'static str, err: nix::Error },
    /// A background wrapper of `--daemonize` could not start (its own words).
    #[error("{0}")]
    Background(String),
    #[error("could not set up the event loop: {0}")]
    Poll(std::io::Error),
    #[error("could not use private directory {path}: {reason}")]
    PrivateDir { path: PathBuf, reason: String },
    #[error("could not take overlap lock {path}: {err}")]
    Lock { path: PathBuf, err: String },
    #[error("output spool {path} failed: {err}")]
    Spool { path: PathBuf, err: std::io::Error },
    #[error("the hub rejected this wrapper ({code:?}): {message}")]
    Rejected { code: RejectCode, message: String },
    #[error("no contact with the hub for {0:?}; gave up (the command was killed)")]
    GaveUp(Duration),
    #[error(
        "gave up before starting the command of run {run}: no server has known the run \
         for {waited_s} s and its slot plus the grace has passed (last: {why}); nothing was run"
    )]
    NotStarted {
        run: u64,
        waited_s: u64,
        why: String,
    },
    #[error("stopped by signal {0} before the run finished")]
    Terminated(i32),
    #[error("could not prove this minion to the hub: {0}")]
    MinionKey(crate::minion_key::KeyError),
}

impl WrapperError {
    /// Process exit code: 1 bad start-up (environment, log file, daemonize), 2 rejected
    /// by the hub, 3 gave up on the hub (with the command killed, or before starting
    /// it), 4 stopped by a signal, 5 other local failure. A `--daemonize` launcher exits
    /// 0 when every run started, 1 when any could not.
    pub fn exit_code(&self) -> u8 {
        match self {
            WrapperError::MissingEnv(_)
            | WrapperError::InvalidEnv { .. }
            | WrapperError::Usage(_)
            | WrapperError::LogFile { .. }
            | WrapperError::Daemonize { .. }
            | WrapperError::Background(_)
            | WrapperError::MinionKey(_) => 1,
            WrapperError::Rejected { .. } => 2,
            WrapperError::GaveUp(_) | WrapperError::NotStarted { .. } => 3,
            WrapperError::Terminated(_) => 4,
            _ => 5,
        }
    }
}
