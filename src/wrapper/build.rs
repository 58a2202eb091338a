//! What the wrapper tells the server about its own build in `hello`: the SHA-256 of its
//! executable and the path it was started as (`wrapper_sha256`, `wrapper_path`), so the
//! server knows which build each minion runs without asking Salt.
//!
//! Worked out once per launch command, before it forks ([`Build::of_this_process`] in
//! `main`), so a launch that starts many runs reads its executable once, and never in
//! the session's loop. A hash that cannot be computed is reported as absent: it never
//! fails a run, and the reason is logged once the wrapper's log is set up.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The build facts `hello` carries (both absent from a wrapper that could not tell).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Build {
    /// Lowercase hex SHA-256 of the executable.
    pub sha256: Option<String>,
    /// The path the wrapper was started as.
    pub path: Option<String>,
    /// Why `sha256` is absent, for a warning in the wrapper's log.
    pub problem: Option<String>,
}

impl Build {
    /// This process: `/proc/self/exe` hashed (the file that is running, even if the path
    /// it was started as has been replaced since), and the path from `argv[0]`.
    pub fn of_this_process() -> Build {
        let (sha256, problem) = match std::fs::File::open("/proc/self/exe").and_then(sha256_hex) {
            Ok(hex) => (Some(hex), None),
            Err(e) => (None, Some(format!("could not hash /proc/self/exe: {e}"))),
        };
        Build {
            sha256,
            path: started_as(std::env::args_os().next(), std::env::current_exe),
            problem,
        }
    }
}

/// Lowercase hex SHA-256 of everything `reader` yields.
pub fn sha256_hex(mut reader: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(crate::tls::hex(&hasher.finalize()))
}

/// The path the wrapper was started as: `argv[0]` when it is absolute (Salt starts the
/// wrapper by its full `wrapper_path`), else the executable's path as the system says.
pub(super) fn started_as(
    argv0: Option<OsString>,
    current_exe: impl FnOnce() -> std::io::Result<PathBuf>,
) -> Option<String> {
    let path = match argv0.map(PathBuf::from) {
        Some(path) if path.is_absolute() => path,
        _ => current_exe().ok()?,
    };
    Some(display(&path))
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_lowercase_hex_of_the_whole_input() {
        assert_eq!(
            sha256_hex(&b"abc"[..]).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // More than one read buffer.
        let big = vec![b'a'; 200 * 1024];
        let expected = crate::tls::hex(&Sha256::digest(&big));
        assert_eq!(sha256_hex(&big[..]).unwrap(), expected);
    }

    #[test]
    fn the_path_is_argv0_when_absolute_else_the_executable() {
        let exe = || Ok(PathBuf::from("/opt/sp/saltpeter-wrapper"));
        assert_eq!(
            started_as(Some("/usr/local/bin/saltpeter-wrapper".into()), exe).as_deref(),
            Some("/usr/local/bin/saltpeter-wrapper")
        );
        assert_eq!(
            started_as(Some("./saltpeter-wrapper".into()), exe).as_deref(),
            Some("/opt/sp/saltpeter-wrapper")
        );
        assert_eq!(
            started_as(None, exe).as_deref(),
            Some("/opt/sp/saltpeter-wrapper")
        );
        let unknown = || Err(std::io::Error::other("gone"));
        assert_eq!(started_as(Some("w".into()), unknown), None);
    }

    #[test]
    fn this_process_is_hashed() {
        let build = Build::of_this_process();
        assert_eq!(build.problem, None);
        let hash = build.sha256.unwrap_or_default();
        assert_eq!(hash.len(), 64);
        assert!(
            hash.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert!(build.path.is_some());
    }
}
