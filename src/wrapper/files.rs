//! Files the wrapper keeps on the host: its private directories and the per-host overlap
//! lock of a job.
//!
//! The lock is an `flock(LOCK_EX|LOCK_NB)` on a file named after the sanitized job name
//! (plus a hash of the real name, so two names never share a lock) in a private 0700
//! directory, opened with `O_NOFOLLOW`. The kernel drops it when the wrapper dies, so
//! there is no stale PID file to judge and no check-then-write race.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

use super::error::WrapperError;

/// Directory for lock files: `/run/saltpeter-wrapper` for root, else
/// `$XDG_RUNTIME_DIR/saltpeter-wrapper` or `/tmp/saltpeter-wrapper-<uid>`.
pub fn lock_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/saltpeter-wrapper");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("saltpeter-wrapper"),
        _ => PathBuf::from(format!("/tmp/saltpeter-wrapper-{uid}")),
    }
}

/// Directory for the output spool (on disk, not tmpfs): `/var/spool/saltpeter-wrapper`
/// for root, else `/var/tmp/saltpeter-wrapper-<uid>`.
pub fn spool_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        PathBuf::from("/var/spool/saltpeter-wrapper")
    } else {
        PathBuf::from(format!("/var/tmp/saltpeter-wrapper-{uid}"))
    }
}

/// Creates `dir` with mode 0700, or checks that an existing one is a real directory
/// owned by us and closed to others (a planted directory or symlink is refused).
pub(super) fn ensure_private_dir(dir: &Path) -> Result<(), WrapperError> {
    let fail = |reason: String| WrapperError::PrivateDir {
        path: dir.to_path_buf(),
        reason,
    };
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(fail(err.to_string())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| fail(e.to_string()))?;
    if !meta.file_type().is_dir() {
        return Err(fail("exists and is not a directory".into()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(fail(format!("is owned by uid {}, not by us", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "has mode {:o}; it must be closed to group and others",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// File name of a job's lock: the name with anything but `[A-Za-z0-9._-]` replaced,
/// cut to 64 characters, plus 16 hex digits of its SHA-256.
pub fn lock_file_name(job_name: &str) -> String {
    let clean: String = job_name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let digest = Sha256::digest(job_name.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{clean}-{hex}.lock")
}

/// Outcome of trying the overlap lock.
pub(super) enum OverlapLock {
    /// Held until dropped.
    Held(Flock<File>),
    /// Another wrapper runs this job on this host.
    Busy(PathBuf),
}

pub(super) fn try_overlap_lock(dir: &Path, job_name: &str) -> Result<OverlapLock, WrapperError> {
    ensure_private_dir(dir)?;
    let path = dir.join(lock_file_name(job_name));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|err| WrapperError::Lock {
            path: path.clone(),
            err: err.to_string(),
        })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(OverlapLock::Held(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(OverlapLock::Busy(path)),
        Err((_, errno)) => Err(WrapperError::Lock {
            path,
            err: errno.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn lock_names_are_safe_and_distinct() {
        let a = lock_file_name("../etc/passwd");
        assert!(a.starts_with(".._etc_passwd-") && !a.contains('/'), "{a}");
        assert_ne!(lock_file_name("a b"), lock_file_name("a_b"));
        assert!(lock_file_name(&"x".repeat(500)).len() < 100);
    }

    #[test]
    fn lock_is_exclusive_and_released_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("locks");
        let held = try_overlap_lock(&dir, "job").unwrap();
        assert!(matches!(held, OverlapLock::Held(_)));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(matches!(
            try_overlap_lock(&dir, "job").unwrap(),
            OverlapLock::Busy(_)
        ));
        assert!(matches!(
            try_overlap_lock(&dir, "other").unwrap(),
            OverlapLock::Held(_)
        ));
        drop(held);
        assert!(matches!(
            try_overlap_lock(&dir, "job").unwrap(),
            OverlapLock::Held(_)
        ));
    }

    #[test]
    fn open_or_planted_directories_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ensure_private_dir(&open).is_err());
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path(), &link).unwrap();
        assert!(ensure_private_dir(&link).is_err());
    }
}
