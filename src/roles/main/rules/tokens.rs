//! Launch tokens and resume keys of wrapper sessions.
//!
//! The launch token of a local target is HMAC-SHA256 over (run id, attempt, machine) under
//! a server secret kept in the state directory (mode 0600, created on first start,
//! surviving restarts). It reaches the wrapper in a 0600 file, and is accepted once: it is
//! recorded as spent before the welcome goes out. The `welcome` hands the wrapper a resume
//! key created for that session (random; only its SHA-256 is stored, with the spent
//! token, so it survives any restart) that never leaves the WebSocket; reconnects present
//! it. Salt wrappers need neither: they sign a fresh challenge with their minion key.
//! Comparisons are constant time.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

const SECRET_BYTES: usize = 32;
const DOMAIN: &[u8] = b"saltpeter-launch-token-v1";

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("could not read server secret {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("could not create server secret {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("server secret {path} is malformed (expected {SECRET_BYTES} bytes as hex)")]
    Malformed { path: PathBuf },
    #[error("server secret {path} has mode {mode:o}; it must not be readable by others (0600)")]
    Exposed { path: PathBuf, mode: u32 },
}

/// The server secret, kept as a keyed HMAC ready to clone; never logged.
pub struct Secret {
    keyed: HmacSha256,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Hex as the secret file and the database keep it (surrounding white space allowed).
fn from_hex(text: &str) -> Option<Vec<u8>> {
    crate::tls::from_hex(text.trim())
}

impl Secret {
    /// Load the secret, creating it (0600) on first start.
    pub fn load_or_create(path: &Path) -> Result<Secret, SecretError> {
        match fs::read_to_string(path) {
            Ok(text) => {
                let meta = fs::metadata(path).map_err(|source| SecretError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(SecretError::Exposed {
                        path: path.to_path_buf(),
                        mode,
                    });
                }
                let bytes = from_hex(&text)
                    .filter(|b| b.len() == SECRET_BYTES)
                    .ok_or_else(|| SecretError::Malformed {
                        path: path.to_path_buf(),
                    })?;
                Secret::from_bytes(&bytes).ok_or_else(|| SecretError::Malformed {
                    path: path.to_path_buf(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let secret: [u8; SECRET_BYTES] = rand::random();
                let create = |source| SecretError::Create {
                    path: path.to_path_buf(),
                    source,
                };
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(create)?;
                file.write_all(crate::tls::hex(&secret).as_bytes())
                    .map_err(create)?;
                file.sync_all().map_err(create)?;
                log::info!("created server secret {}", path.display());
                Secret::from_bytes(&secret).ok_or_else(|| SecretError::Malformed {
                    path: path.to_path_buf(),
                })
            }
            Err(source) => Err(SecretError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The secret the servers sharing a database keep there (hex), for tokens and resume
    /// keys valid on every server (`ha.rs`).
    pub(crate) fn from_hex(text: &str) -> Option<Secret> {
        from_hex(text)
            .filter(|b| b.len() == SECRET_BYTES)
            .and_then(|b| Secret::from_bytes(&b))
    }

    fn from_bytes(bytes: &[u8]) -> Option<Secret> {
        HmacSha256::new_from_slice(bytes)
            .ok()
            .map(|keyed| Secret { keyed })
    }

    fn mac(&self, run: u64, machine: &str, attempt: u32) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(DOMAIN);
        mac.update(&run.to_be_bytes());
        mac.update(&attempt.to_be_bytes());
        mac.update(machine.as_bytes());
        mac
    }

    /// The launch token of (run, machine, attempt): each attempt of a retried target has
    /// its own, so a token seen once is worth nothing later.
    pub fn launch_token(&self, run: u64, machine: &str, attempt: u32) -> String {
        crate::tls::hex(&self.mac(run, machine, attempt).finalize().into_bytes())
    }

    /// Constant-time check of a presented launch token.
    pub(crate) fn verify_launch_token(
        &self,
        run: u64,
        machine: &str,
        attempt: u32,
        token: &str,
    ) -> bool {
        match from_hex(token) {
            Some(bytes) => self.mac(run, machine, attempt).verify_slice(&bytes).is_ok(),
            None => false,
        }
    }
}

/// A fresh resume key for a session (32 random bytes as hex) and its SHA-256 (hex), which
/// is all the server keeps: a copy of the database does not let anyone resume a session.
pub(crate) fn new_resume_key() -> (String, String) {
    let bytes: [u8; SECRET_BYTES] = rand::random();
    let key = crate::tls::hex(&bytes);
    let hash = resume_key_hash(&key);
    (key, hash)
}

/// SHA-256 (hex) of a resume key.
fn resume_key_hash(key: &str) -> String {
    use sha2::Digest;
    crate::tls::hex(&Sha256::digest(key.as_bytes()))
}

/// Does a presented resume key match the stored hash (constant time)?
pub(crate) fn verify_resume_key(stored_hash: Option<&str>, presented: &str) -> bool {
    stored_hash.is_some_and(|hash| keys_match(hash, &resume_key_hash(presented)))
}

/// Constant-time comparison of two keys.
fn keys_match(expected: &str, presented: &str) -> bool {
    let (a, b) = (expected.as_bytes(), presented.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_survives_restart_and_tokens_verify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.secret");
        let s1 = Secret::load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let token = s1.launch_token(7, "web1", 1);
        let s2 = Secret::load_or_create(&path).unwrap();
        assert!(s2.verify_launch_token(7, "web1", 1, &token));
        assert!(!s2.verify_launch_token(8, "web1", 1, &token), "other run");
        assert!(
            !s2.verify_launch_token(7, "web2", 1, &token),
            "other machine"
        );
        assert!(
            !s2.verify_launch_token(7, "web1", 2, &token),
            "other attempt"
        );
        assert!(!s2.verify_launch_token(7, "web1", 1, "zz"), "not hex");
        assert!(
            !s2.verify_launch_token(7, "web1", 1, &token[..10]),
            "truncated"
        );
        assert_eq!(format!("{s2:?}"), "Secret(***)");
    }

    #[test]
    fn exposed_or_malformed_secret_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.secret");
        fs::write(&path, "abcd").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            Secret::load_or_create(&path),
            Err(SecretError::Malformed { .. })
        ));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Secret::load_or_create(&path),
            Err(SecretError::Exposed { .. })
        ));
    }

    #[test]
    fn key_comparison() {
        let (k, hash) = new_resume_key();
        let (k2, hash2) = new_resume_key();
        assert_ne!(k, k2, "every session gets its own key");
        assert_ne!(hash, hash2);
        assert_eq!(k.len(), 64);
        assert!(verify_resume_key(Some(&hash), &k));
        assert!(!verify_resume_key(Some(&hash), &k2));
        assert!(
            !verify_resume_key(Some(&hash), &hash),
            "the hash is not the key"
        );
        assert!(!verify_resume_key(None, &k));
        assert!(keys_match(&k, &k.clone()));
        assert!(!keys_match(&k, &"0".repeat(64)));
        assert!(!keys_match(&k, ""));
    }
}
