//! The server's certificate chain and key, and where they come from.
//!
//! With `tls_cert` and `tls_key` the operator's files are served (PEM; the chain in
//! order, leaf first). Without them a self-signed certificate is created on first start
//! in the state directory (`tls-cert.pem`, `tls-key.pem`, the key 0600) and kept, so the
//! fingerprint wrappers pin stays the same across restarts. The supervisor calls
//! [`prepare`] before anything starts (a missing or unreadable file stops the start with
//! exit 2 naming it); hub and main then only [`load`].

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// File names of the self-signed certificate in the state directory.
pub(crate) const SELF_CERT: &str = "tls-cert.pem";
pub(crate) const SELF_KEY: &str = "tls-key.pem";
/// A certificate or key file larger than this is not a certificate or key.
const MAX_PEM: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS file {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("TLS file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("could not create the self-signed certificate {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("could not generate a self-signed certificate: {0}")]
    Generate(String),
    #[error("TLS set-up failed: {0}")]
    Config(String),
    #[error("saltpeter_config: {0}")]
    Keys(String),
}

/// The start-only keys that decide TLS (`tls`, `tls_cert`, `tls_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

pub struct Material {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// SHA-256 of the leaf certificate.
    pub fingerprint: [u8; 32],
    /// Where the certificate came from (for the log).
    pub cert_path: PathBuf,
}

/// The certificate and key files the daemon serves, or `None` with `tls: false`.
pub(crate) fn paths(sp: &Settings, state: &Path) -> Result<Option<(PathBuf, PathBuf)>, TlsError> {
    if !sp.enabled {
        return Ok(None);
    }
    match (&sp.cert, &sp.key) {
        (Some(cert), Some(key)) => Ok(Some((cert.clone(), key.clone()))),
        (None, None) => Ok(Some((state.join(SELF_CERT), state.join(SELF_KEY)))),
        (Some(_), None) => Err(TlsError::Keys(
            "tls_cert is set but tls_key is not: give both, or neither for a self-signed \
             certificate"
                .into(),
        )),
        (None, Some(_)) => Err(TlsError::Keys(
            "tls_key is set but tls_cert is not: give both, or neither for a self-signed \
             certificate"
                .into(),
        )),
    }
}

/// Supervisor start-up: create the self-signed certificate if it is the one in use and
/// does not exist yet, then load (so every problem is found before a child starts).
pub(crate) fn prepare(sp: &Settings, state: &Path) -> Result<Option<Material>, TlsError> {
    let Some((cert, key)) = paths(sp, state)? else {
        return Ok(None);
    };
    let own = sp.cert.is_none();
    if own && !cert.exists() {
        create_self_signed(&cert, &key)?;
    }
    load_files(&cert, &key, own).map(Some)
}

/// Hub and main start-up: the files [`prepare`] checked.
pub(crate) fn load(sp: &Settings, state: &Path) -> Result<Option<Material>, TlsError> {
    match paths(sp, state)? {
        Some((cert, key)) => load_files(&cert, &key, sp.cert.is_none()).map(Some),
        None => Ok(None),
    }
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    let err = |source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(TlsError::Parse {
            path: path.to_path_buf(),
            message: format!("larger than {MAX_PEM} bytes; not a PEM file"),
        });
    }
    Ok(bytes)
}

fn load_files(cert: &Path, key: &Path, own: bool) -> Result<Material, TlsError> {
    let parse = |path: &Path, message: String| TlsError::Parse {
        path: path.to_path_buf(),
        message,
    };
    let cert_pem = read_bounded(cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| parse(cert, format!("not a PEM certificate: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(parse(cert, "holds no CERTIFICATE block".into()));
    };
    if own
        && let Ok(meta) = fs::metadata(key)
        && meta.permissions().mode() & 0o077 != 0
    {
        return Err(parse(
            key,
            format!(
                "mode {:o} lets others read the private key; chmod 600 it",
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    let key_pem = read_bounded(key)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| parse(key, format!("not a PEM private key: {e}")))?;
    Ok(Material {
        fingerprint: super::crypto::fingerprint(leaf.as_ref()),
        chain,
        key: key_der,
        cert_path: cert.to_path_buf(),
    })
}

/// A certificate for this host's name, `localhost` and the loopback addresses, valid
/// for a long time: wrappers pin its fingerprint, so names and dates matter little.
fn create_self_signed(cert: &Path, key: &Path) -> Result<(), TlsError> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Ok(host) = nix::unistd::gethostname()
        && let Ok(host) = host.into_string()
        && !host.is_empty()
    {
        names.insert(0, host);
    }
    let generated =
        rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Generate(e.to_string()))?;
    write_new(key, generated.signing_key.serialize_pem().as_bytes(), 0o600)?;
    write_new(cert, generated.cert.pem().as_bytes(), 0o644)?;
    log::info!(
        "created a self-signed TLS certificate {} (sha256 {})",
        cert.display(),
        super::crypto::hex(&super::crypto::fingerprint(generated.cert.der()))
    );
    Ok(())
}

/// Write through a temporary file and rename, so a crash never leaves half a file.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let err = |source| TlsError::Create {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(enabled: bool) -> Settings {
        Settings {
            enabled,
            cert: None,
            key: None,
        }
    }

    #[test]
    fn self_signed_is_created_once_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let first = prepare(&config(true), tmp.path()).unwrap().unwrap();
        let key = tmp.path().join(SELF_KEY);
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = prepare(&config(true), tmp.path()).unwrap().unwrap();
        assert_eq!(first.fingerprint, again.fingerprint);
        let loaded = load(&config(true), tmp.path()).unwrap().unwrap();
        assert_eq!(first.fingerprint, loaded.fingerprint);
        assert!(super::super::server_config(&loaded).is_ok());
        assert!(prepare(&config(false), tmp.path()).unwrap().is_none());
    }

    #[test]
    fn missing_or_bad_operator_files_name_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let cert = tmp.path().join("nope.pem");
        let sp = Settings {
            enabled: true,
            cert: Some(cert.clone()),
            key: Some(tmp.path().join("key.pem")),
        };
        let err = prepare(&sp, tmp.path()).err().unwrap().to_string();
        assert!(err.contains("nope.pem"), "{err}");
        fs::write(&cert, "not pem").unwrap();
        let err = prepare(&sp, tmp.path()).err().unwrap().to_string();
        assert!(
            err.contains("nope.pem") && err.contains("CERTIFICATE"),
            "{err}"
        );
        let half = Settings {
            enabled: true,
            cert: Some(cert),
            key: None,
        };
        let err = prepare(&half, tmp.path()).err().unwrap().to_string();
        assert!(err.contains("tls_key"), "{err}");
    }
}
