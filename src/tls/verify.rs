//! How a wrapper decides it talks to the real hub.
//!
//! main hands each wrapper the SHA-256 fingerprint of the certificate the hub serves, in
//! the URL's fragment (`wss://host:port/wrapper/v1#sha256=HEX`; a fragment is never sent
//! over the network). With a pin the leaf certificate must have that fingerprint and
//! the handshake signature must verify with its key; names and dates are not checked
//! (the pin is stronger than both). Without a pin (a URL typed by hand) the certificate
//! must chain to the system's CA roots and name the host, as a browser would check it.

use std::io::Read;
use std::path::Path;
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
pub fn client_config(pin: Option<[u8; 32]>) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
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

pub fn system_roots() -> Result<rustls::RootCertStore, String> {
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
    Err(format!(
        "no pinned fingerprint in the URL and no CA bundle found (SSL_CERT_FILE, {})",
        CA_BUNDLES.join(", ")
    ))
}

/// A CA file larger than this is not a CA file.
const MAX_CA_FILE: u64 = 4 * 1024 * 1024;

/// The certificates of a PEM file (at least one).
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut pem = Vec::new();
    file.take(MAX_CA_FILE + 1)
        .read_to_end(&mut pem)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if pem.len() as u64 > MAX_CA_FILE {
        return Err(format!(
            "{} is larger than {MAX_CA_FILE} bytes: not a CA file",
            path.display()
        ));
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate file ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}
