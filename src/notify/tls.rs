//! TLS for what leaves the daemon: HTTPS webhooks and exports, SMTP with STARTTLS or
//! implicit TLS. Runs only inside the `--deliver` helper (blocking I/O with timeouts).
//!
//! The server's certificate must chain to the system's CA roots (the same bundle the
//! wrapper uses, `tls::verify::system_roots`) or to a certificate of
//! `saltpeter_config.notify_ca_file` (a private CA), and must name the host. A failed
//! handshake is a failed attempt whose cause says why ("invalid peer certificate:
//! UnknownIssuer"), recorded with the delivery.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use super::error::DeliveryError;

/// A client-side TLS connection over a TCP stream (the stream's timeouts apply).
pub(crate) type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

use crate::tls::verify::read_ca_file;

/// Client configuration: the system's CA roots plus those of `ca_file`.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, DeliveryError> {
    let mut roots = crate::tls::verify::system_roots().unwrap_or_else(|_| {
        // No system bundle: only a configured CA file can make TLS work.
        rustls::RootCertStore::empty()
    });
    if let Some(path) = ca_file {
        let certs = read_ca_file(path).map_err(DeliveryError::CaFile)?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(DeliveryError::NoUsableCa {
                path: path.to_path_buf(),
            });
        }
    }
    if roots.is_empty() {
        return Err(DeliveryError::NoCa);
    }
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(DeliveryError::TlsSetUp)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// TLS over `tcp` to `host`, the handshake done here (so its failure has its own words).
pub(crate) fn connect(
    tcp: TcpStream,
    host: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<TlsStream, DeliveryError> {
    let name =
        ServerName::try_from(host.to_string()).map_err(|source| DeliveryError::ServerName {
            host: host.to_string(),
            source,
        })?;
    let conn = rustls::ClientConnection::new(config, name).map_err(DeliveryError::TlsSetUp)?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let failed = |source: std::io::Error| DeliveryError::Handshake {
        host: host.to_string(),
        source,
    };
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    DeliveryError::HandshakeSilent {
                        host: host.to_string(),
                    }
                }
                _ => failed(e),
            })?;
    }
    stream.flush().map_err(failed)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::verify::CaError;

    #[test]
    fn ca_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = read_ca_file(&empty).unwrap_err();
        assert!(matches!(err, CaError::NoCertificate { .. }), "{err}");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let missing = dir.path().join("missing.pem");
        let err = read_ca_file(&missing).unwrap_err();
        assert!(matches!(err, CaError::Read { .. }), "{err}");
        assert!(err.to_string().contains("cannot read"), "{err}");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, cert.cert.pem()).unwrap();
        assert_eq!(read_ca_file(&good).unwrap().len(), 1);
        assert!(client_config(Some(&good)).is_ok());
    }

    #[test]
    fn a_silent_tls_server_is_a_timeout_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepted by the backlog, never answered: the handshake must give up.
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        tcp.set_write_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        let config = client_config(Some(&ca)).unwrap();
        let err = connect(tcp, "127.0.0.1", config).map(|_| ()).unwrap_err();
        assert!(
            matches!(err, DeliveryError::HandshakeSilent { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("no answer in time"), "{err}");
        drop(listener);
    }
}
