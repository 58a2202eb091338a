//! TLS for the PostgreSQL connections of the `db` role: the `postgres` crate's
//! `MakeTlsConnect` over `tokio-rustls` (rustls, ring provider), so neither OpenSSL nor
//! a second TLS stack comes in. The tokio runtime is the one inside the `postgres`
//! crate's blocking calls; nothing here starts one.
//!
//! Outline:
//! 1. [`PgTls::new`] turns the resolved settings (`config::database`) into a rustls
//!    client configuration whose verifier does what the `sslmode` says: the chain and
//!    the name (`verify-full`), the chain only (`verify-ca`, or `require` with a CA),
//!    nothing (`require` alone: encrypted, but not safe from an active attacker).
//! 2. For each connection the driver asks for a connector for the host it connects to
//!    (the URL's `host`, used for SNI and the name check).
//! 3. A failed handshake becomes one sentence naming the host, the CA and what failed
//!    (not trusted, name mismatch), which the driver reports as "error performing TLS
//!    handshake: …" and `PgStore` prefixes with the URL without its password.
//!
//! No channel binding is offered (SCRAM works without it; `channel_binding=require`
//! does not).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::database::{CaSource, DatabaseTls, Verify};

/// Why the TLS settings of the database cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PgTlsError {
    #[error("TLS set-up failed: {0}")]
    Protocols(rustls::Error),
    #[error("TLS set-up failed: {0}")]
    Verifier(rustls::client::VerifierBuilderError),
    /// No system CA bundle (the message says where it was looked for).
    #[error("{0}")]
    SystemRoots(crate::tls::verify::CaError),
    #[error("database_ca_file: {0}")]
    CaFile(crate::tls::verify::CaError),
    #[error("database_ca_file {path}: none of its certificates is usable as a CA")]
    NoUsableCa { path: std::path::PathBuf },
}

/// The connector factory handed to `postgres::Config::connect`.
#[derive(Clone)]
pub(crate) struct PgTls {
    config: Arc<rustls::ClientConfig>,
    /// What the certificate is checked against, for messages.
    ca: String,
}

impl PgTls {
    /// The rustls configuration for `tls`; reads the CA file (an error names it).
    pub(crate) fn new(tls: &DatabaseTls) -> Result<PgTls, PgTlsError> {
        let provider = crate::tls::provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(PgTlsError::Protocols)?;
        let algorithms = provider.signature_verification_algorithms;
        let (verifier, ca): (Arc<dyn ServerCertVerifier>, String) = match &tls.verify {
            Verify::Nothing => (
                Arc::new(AnyCertificate { algorithms }),
                "no CA (sslmode=require checks no certificate)".to_string(),
            ),
            Verify::Chain(ca) => (
                Arc::new(ChainOnly(webpki_verifier(ca, provider)?)),
                ca.describe(),
            ),
            Verify::ChainAndName(ca) => (webpki_verifier(ca, provider)?, ca.describe()),
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(PgTls {
            config: Arc::new(config),
            ca,
        })
    }
}

/// The standard verifier (chain, then name) over the roots of `ca`.
fn webpki_verifier(
    ca: &CaSource,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, PgTlsError> {
    let roots = match ca {
        CaSource::System => crate::tls::verify::system_roots().map_err(PgTlsError::SystemRoots)?,
        CaSource::File(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = crate::tls::verify::read_ca_file(path).map_err(PgTlsError::CaFile)?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(PgTlsError::NoUsableCa { path: path.clone() });
            }
            roots
        }
    };
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(PgTlsError::Verifier)
}

impl<S> MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    /// `host` is empty for a Unix socket: the driver asks before it knows whether TLS
    /// will be used (over a socket the server declines it), so a name TLS cannot check
    /// fails the handshake, not this.
    fn make_tls_connect(&mut self, host: &str) -> Result<PgTlsConnect, io::Error> {
        Ok(PgTlsConnect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name: ServerName::try_from(host.to_string()).ok(),
            host: host.to_string(),
            ca: self.ca.clone(),
        })
    }
}

/// One connection's handshake.
pub(crate) struct PgTlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: Option<ServerName<'static>>,
    host: String,
    ca: String,
}

type Handshake<S> = Pin<Box<dyn Future<Output = Result<PgTlsStream<S>, io::Error>> + Send>>;

impl<S> TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Handshake<S>;

    fn connect(self, stream: S) -> Handshake<S> {
        let PgTlsConnect {
            connector,
            name,
            host,
            ca,
        } = self;
        Box::pin(async move {
            let Some(name) = name else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("`{host}` is not a host name TLS can check"),
                ));
            };
            match connector.connect(name, stream).await {
                Ok(tls) => Ok(PgTlsStream(tls)),
                Err(e) => Err(io::Error::other(handshake_failure(&host, &ca, &e))),
            }
        })
    }
}

/// Why the handshake with `host` failed, in words an operator can act on.
pub(crate) fn handshake_failure(host: &str, ca: &str, e: &io::Error) -> String {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(cause)) => {
            let what = match cause {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    format!("is not trusted: it is not signed by a CA of {ca}")
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    format!("does not name {host} (host name mismatch)")
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "has expired".to_string()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "is not valid yet".to_string()
                }
                _ => format!("was refused (checked against {ca})"),
            };
            format!("the certificate of the database server {host} {what} ({cause:?})")
        }
        Some(other) => format!("TLS with the database server {host} failed: {other}"),
        None => format!("TLS with the database server {host} failed: {e}"),
    }
}

/// `verify-ca`: the chain must reach a CA; the name is not checked. The standard
/// verifier checks the chain before the name, so its name error means the chain held.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require` without a CA: any certificate (libpq's behaviour); the handshake's
/// signatures are still checked, so the session is bound to the key presented.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    crate::tls::verify::handshake_signatures_by_algorithms!();
}

/// A TLS connection to the database.
pub(crate) struct PgTlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for PgTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
