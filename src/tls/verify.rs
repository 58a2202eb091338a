//! How a wrapper decides it talks to the real hub.
//!
//! main hands each wrapper the SHA-256 fingerprint of the certificate the hub serves, in
//! the URL's fragment (`wss://host:port/wrapper/v1#sha256=HEX`; a fragment is never sent
//! over the network). With a pin the leaf certificate must have that fingerprint and
//! the handshake signature must verify with its key; names and dates are not checked
//! (the pin is stronger than both). Without a pin (a URL typed by hand) the certificate
//! must chain to the system's CA roots and name the host, as a browser would check it.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::crypto::{fingerprint, hex, provider};

/// Where the system's CA bundle is (Debian/Ubuntu, then Fedora/RHEL); `SSL_CERT_FILE`
/// first, as OpenSSL does.
const CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Why a client configuration or a CA file could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// rustls refused the protocol versions of the provider.
    #[error("{0}")]
    Protocols(rustls::Error),
    #[error(
        "no pinned fingerprint in the URL and no CA bundle found (SSL_CERT_FILE, {})",
        CA_BUNDLES.join(", ")
    )]
    NoBundle,
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is larger than {} bytes: not a CA file", MAX_CA_FILE)]
    TooLarge { path: PathBuf },
    #[error("{path}: not a PEM certificate file ({source})")]
    NotPem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
}

/// Configuration diagnostics are text by design (`config::notify` reports a bad
/// `notify_ca_file` with `?`): the error becomes its message there.
impl From<CaError> for String {
    fn from(e: CaError) -> String {
        e.to_string()
    }
}

/// The handshake-signature half of a `ServerCertVerifier` whose `algorithms` field
/// checks them (`rustls::crypto`'s own checks), for verifiers that decide only about the
/// certificate: the pin here, "any certificate" for PostgreSQL's `sslmode=require`.
macro_rules! handshake_signatures_by_algorithms {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}
pub(crate) use handshake_signatures_by_algorithms;

#[derive(Debug)]
pub struct PinVerifier {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = fingerprint(end_entity.as_ref());
        // Constant time: the pin is public, but there is no reason to leak the match.
        let differ = got
            .iter()
            .zip(self.pin.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differ == 0 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate (sha256 {}) is not the pinned one (sha256 {})",
                hex(&got),
                hex(&self.pin)
            )))
        }
    }

    handshake_signatures_by_algorithms!();
}

/// Client configuration: pinned when `pin` is given, else the system's CA roots.
pub fn client_config(pin: Option<[u8; 32]>) -> Result<Arc<rustls::ClientConfig>, CaError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(CaError::Protocols)?;
    let config = match pin {
        Some(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        None => builder
            .with_root_certificates(system_roots()?)
            .with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

pub fn system_roots() -> Result<rustls::RootCertStore, CaError> {
    let from_env = std::env::var("SSL_CERT_FILE").ok();
    let candidates = from_env
        .iter()
        .map(String::as_str)
        .chain(CA_BUNDLES.iter().copied());
    let mut roots = rustls::RootCertStore::empty();
    for path in candidates {
        let Ok(iter) = CertificateDer::pem_file_iter(path) else {
            continue;
        };
        let certs: Vec<_> = iter.filter_map(Result::ok).collect();
        let (added, _) = roots.add_parsable_certificates(certs);
        if added > 0 {
            return Ok(roots);
        }
    }
    Err(CaError::NoBundle)
}

/// A CA file larger than this is not a CA file.
const MAX_CA_FILE: u64 = 4 * 1024 * 1024;

/// The certificates of a PEM file (at least one).
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, CaError> {
    let read = |source| CaError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut pem = Vec::new();
    file.take(MAX_CA_FILE + 1)
        .read_to_end(&mut pem)
        .map_err(read)?;
    if pem.len() as u64 > MAX_CA_FILE {
        return Err(CaError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|source| CaError::NotPem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(CaError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_errors_read_as_before() {
        assert_eq!(
            CaError::NoBundle.to_string(),
            "no pinned fingerprint in the URL and no CA bundle found (SSL_CERT_FILE, \
             /etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt)"
        );
        let path = PathBuf::from("/etc/ca.pem");
        assert_eq!(
            CaError::TooLarge { path: path.clone() }.to_string(),
            "/etc/ca.pem is larger than 4194304 bytes: not a CA file"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'A'; MAX_CA_FILE as usize + 1]).unwrap();
        assert!(matches!(read_ca_file(&big), Err(CaError::TooLarge { .. })));
        assert_eq!(
            CaError::NoCertificate { path }.to_string(),
            "/etc/ca.pem holds no PEM certificate"
        );
    }
}
