//! Why the daemon could not start: one error per start-up step, each one line naming the
//! path (or address) and the cause (the daemon then exits 2). A leaf, so that the
//! start-up checks and the state directory's lock share it.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("cannot read configuration directory {path}: {source}")]
    ConfigDir { path: PathBuf, source: io::Error },
    #[error("configuration directory {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("state directory {path} is not usable: {source}")]
    StateDir { path: PathBuf, source: io::Error },
    #[error("runtime directory {path} is not usable: {source}")]
    RuntimeDir { path: PathBuf, source: io::Error },
    #[error(
        "another Saltpeter daemon ({holder}) holds the state directory's lock {path}: it did \
         not exit within {}s; stop it first", wait.as_secs()
    )]
    Locked {
        path: PathBuf,
        holder: String,
        wait: std::time::Duration,
    },
    #[error("another Saltpeter daemon is running: its admin socket {path} answers")]
    AlreadyRunning { path: PathBuf },
    #[error("could not bind admin socket {path}: {source}")]
    BindAdmin { path: PathBuf, source: io::Error },
    #[error("could not listen for {what} on {addr}: {source}")]
    BindTcp {
        what: &'static str,
        addr: String,
        source: io::Error,
    },
    #[error("could not write pid file {path}: {source}")]
    PidFile { path: PathBuf, source: io::Error },
    #[error("could not start the {role} process: {source}")]
    Spawn { role: String, source: io::Error },
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("could not set up the event loop: {0}")]
    Loop(io::Error),
}
