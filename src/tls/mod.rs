//! TLS for the wrapper port and the HTTP API (rustls with the ring provider).
//!
//! - `material`: the server's certificate and key: the operator's (`tls_cert`/`tls_key`)
//!   or a self-signed one created on first start in the state directory (key 0600); its
//!   SHA-256 fingerprint is what wrappers pin.
//! - `stream`: [`Stream`], a non-blocking socket that is plain or TLS, read and written
//!   through `Read`/`Write` so the HTTP parser and tungstenite need not know; it is driven
//!   by the same readiness events as a plain socket and never blocks the loop.
//! - `verify`: the wrapper's side: the pinned fingerprint (`wss://host:port/path#sha256=HEX`)
//!   or, without a pin, the system's CA roots.
//!
//! TLS is on by default; `saltpeter_config.tls: false` turns it off, which the supervisor
//! accepts only for ports bound to loopback addresses.

pub mod material;
pub mod stream;
pub mod verify;

use std::sync::Arc;

pub use material::{Material, TlsError};
pub use stream::Stream;

/// The only crypto provider this build has (`ring`); named explicitly so no process-wide
/// default is needed. AES-128-GCM with SHA-256 comes first (ring's default puts
/// AES-256 with SHA-384 first): the handshake's hashing then uses the CPU's SHA-256
/// instructions, where SHA-384 has none; it was 6 % of the hub's CPU in a firing of
/// 2,000 wrappers. Wrappers and the server both use this order, and the server follows
/// the client's.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|suite| suite.suite() != TLS13_AES_128_GCM_SHA256.suite());
    Arc::new(provider)
}

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

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a DER certificate, as wrappers pin it.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(der).into()
}

/// Parses a pin: 64 hex digits, optionally with `sha256:`/`sha256=` before and colons
/// between bytes (as `openssl x509 -fingerprint -sha256` prints it).
pub fn parse_pin(text: &str) -> Option<[u8; 32]> {
    let t = text.trim();
    let t = t
        .strip_prefix("sha256=")
        .or_else(|| t.strip_prefix("sha256:"))
        .or_else(|| t.strip_prefix("SHA256="))
        .unwrap_or(t);
    let digits: String = t.chars().filter(|c| *c != ':').collect();
    if digits.len() != 64 || !digits.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
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
