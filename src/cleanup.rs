//! `saltpeter-cleanup`: repairs what a crashed daemon left behind (systemd's ExecStartPre).
//!
//! Idempotent, and exit 0 when there is nothing to do. It removes a stale admin socket
//! (one nobody answers on) and a pid file whose process is gone, and checks the database
//! without modifying it. It never destroys data: runs left in flight are recovered by
//! main at start-up, not here. A live daemon's files are left alone.

use std::os::unix::net::UnixStream;

use clap::Parser;

use crate::paths;

#[derive(Debug, Parser)]
#[command(
    name = "saltpeter-cleanup",
    version,
    about = "Remove what a crashed Saltpeter daemon left behind"
)]
pub struct Args {
    #[command(flatten)]
    pub dirs: paths::DirArgs,
}

fn pid_alive(pid: i32) -> bool {
    pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

pub fn main() -> i32 {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    crate::logging::init("cleanup", false);
    let startup = crate::supervisor::startup::settings(&args.dirs.config).ok();
    let dirs = args.dirs.resolve((
        startup.as_ref().and_then(|s| s.state_dir.as_deref()),
        startup.as_ref().and_then(|s| s.runtime_dir.as_deref()),
    ));
    let socket = dirs.admin_socket();
    if socket.exists() && UnixStream::connect(&socket).is_ok() {
        log::info!("a daemon answers on {}; nothing to clean", socket.display());
        return 0;
    }
    let mut cleaned = 0;
    if socket.exists() {
        match std::fs::remove_file(&socket) {
            Ok(()) => {
                log::info!("removed stale admin socket {}", socket.display());
                cleaned += 1;
            }
            Err(e) => log::warn!("could not remove {}: {e}", socket.display()),
        }
    }
    let pid_file = dirs.pid_file();
    if let Ok(text) = std::fs::read_to_string(&pid_file) {
        let pid: i32 = text.trim().parse().unwrap_or(0);
        if pid_alive(pid) && pid != std::process::id() as i32 {
            log::warn!(
                "pid file {} names live process {pid}, but its admin socket is gone; leaving it",
                pid_file.display()
            );
        } else {
            match std::fs::remove_file(&pid_file) {
                Ok(()) => {
                    log::info!("removed stale pid file {}", pid_file.display());
                    cleaned += 1;
                }
                Err(e) => log::warn!("could not remove {}: {e}", pid_file.display()),
            }
        }
    }
    if let Err(e) = crate::roles::db::check_database(&dirs.database()) {
        // Reported, never repaired by deleting: the daemon's own start-up says more.
        log::warn!("{e}");
    }
    if cleaned == 0 {
        log::info!("nothing to clean");
    }
    0
}
