//! `saltpeter-cleanup`: repairs what a crashed daemon left behind (systemd's ExecStartPre).
//!
//! Idempotent, and exit 0 when there is nothing to do. It removes a stale admin socket
//! (one nobody answers on), a pid file whose process is gone and launch-token files no
//! wrapper took (a wrapper takes its token within a moment of its launch; an old one
//! belongs to a wrapper that never started), and checks the database without modifying
//! it. It never destroys data: runs left in flight are recovered by
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
pub(crate) struct Args {
    #[command(flatten)]
    pub dirs: paths::DirArgs,
}

/// A token file older than this was never taken by its wrapper.
const TOKEN_FILE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Token files in `dir` older than [`TOKEN_FILE_MAX_AGE`] at `now`.
fn stale_token_files(dir: &std::path::Path, now: std::time::SystemTime) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".token"))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > TOKEN_FILE_MAX_AGE)
        })
        .map(|e| e.path())
        .collect()
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
    for stale in stale_token_files(&dirs.launch_tokens(), std::time::SystemTime::now()) {
        match std::fs::remove_file(&stale) {
            Ok(()) => {
                log::info!(
                    "removed a launch token no wrapper took: {}",
                    stale.display()
                );
                cleaned += 1;
            }
            Err(e) => log::warn!("could not remove {}: {e}", stale.display()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_token_files_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("saltpeter-run-1-a.token");
        let fresh = dir.path().join("saltpeter-run-2-a.token");
        let other = dir.path().join("notes.txt");
        for p in [&old, &fresh, &other] {
            std::fs::write(p, "x").unwrap();
        }
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for p in [&old, &other] {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(an_hour_ago)
                .unwrap();
        }
        let stale = stale_token_files(dir.path(), std::time::SystemTime::now());
        assert_eq!(stale, vec![old]);
        assert!(
            stale_token_files(&dir.path().join("missing"), std::time::SystemTime::now()).is_empty()
        );
    }
}
