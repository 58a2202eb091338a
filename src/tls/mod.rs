//! TLS for the wrapper port and the HTTP API (rustls with the ring provider).
//!
//! - `material`: the server's certificate and key: the operator's (`tls_cert`/`tls_key`)
//!   or a self-signed one created on first start in the state directory (key 0600); its
//!   SHA-256 fingerprint is what wrappers pin.
//! - `stream`: [`Stream`], a non-blocking socket that is plain or TLS, read and written
//!   through `Read`/`Write` so the HTTP parser and tungstenite need not know; it is driven
//!   by the same readiness events as a plain socket and never blocks the loop.
//! - `crypto`: the ring provider in the order both sides use, certificate fingerprints
//!   and the pins that name them.
//! - `verify`: the wrapper's side: the pinned fingerprint (`wss://host:port/path#sha256=HEX`)
//!   or, without a pin, the system's CA roots.
//!
//! TLS is on by default; `saltpeter_config.tls: false` turns it off, which the supervisor
//! accepts only for ports bound to loopback addresses.

mod crypto;
pub(crate) mod material;
pub mod stream;
pub mod verify;

use std::sync::Arc;

pub use crypto::{fingerprint, from_hex, hex, parse_pin, provider};
pub use material::{Material, TlsError};
pub use stream::Stream;

/// Server side configuration over `material`.
pub fn server_config(material: &Material) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .map_err(|e| TlsError::Config(format!("certificate and key do not fit: {e}")))?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_in_the_usual_spellings() {
        let hexed = "ab".repeat(32);
        let want = Some([0xab; 32]);
        assert_eq!(parse_pin(&hexed), want);
        assert_eq!(parse_pin(&format!("sha256={hexed}")), want);
        assert_eq!(parse_pin(&format!("sha256:{}", hexed.to_uppercase())), want);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(parse_pin(&colons), want);
        assert_eq!(parse_pin("abcd"), None);
        assert_eq!(parse_pin(&"zz".repeat(32)), None);
        assert_eq!(parse_pin(&"é".repeat(32)), None);
    }
}
