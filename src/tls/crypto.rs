//! The crypto provider both sides use, certificate fingerprints and pins.

use std::sync::Arc;

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

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lower- or upper-case hex; `None` for an odd length or a non-hex digit.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
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
    from_hex(&digits)?.try_into().ok()
}
