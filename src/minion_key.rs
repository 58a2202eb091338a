//! Wrapper identity from Salt's own keys.
//!
//! A wrapper started through Salt proves it runs on minion X by signing a fresh challenge
//! from the hub with X's Salt private key (`pki_dir/minion.pem` on the minion); the
//! daemon verifies the signature with the public key the master has *accepted* for X
//! (`pki_dir/minions/X` of the master). So nothing secret travels through Salt (the
//! publish carries the server URL and the run id only), a reconnect signs a new
//! challenge, and a captured proof is worth nothing for another connection.
//!
//! Signatures are RSA PKCS#1 v1.5 with SHA-256 (ring), over [`proof_message`]: a domain
//! tag, the challenge, the run and the minion id, so a proof for one (run, minion) is not
//! a proof for another. Salt writes PEM files: private keys as `RSA PRIVATE KEY` (PKCS#1)
//! or `PRIVATE KEY` (PKCS#8), public keys as `PUBLIC KEY` (SubjectPublicKeyInfo) or `RSA
//! PUBLIC KEY` (PKCS#1); the small PEM and DER readers below take all four. Pure
//! functions over bytes, tested without files.

use std::path::{Path, PathBuf};

use ring::rand::SystemRandom;
use ring::signature::{self, RsaKeyPair};

use crate::tls::{from_hex, hex};

/// Domain tag of the signed message (a signature for anything else never matches).
const PROOF_DOMAIN: &[u8] = b"saltpeter-minion-proof-v1";
/// Bytes of a challenge.
pub(crate) const CHALLENGE_BYTES: usize = 32;
/// Largest key file read (Salt's 4096-bit PEM keys are about 3.3 KiB).
const MAX_KEY_FILE: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("could not read key file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("key file {path} holds no PEM block this reader knows ({reason})")]
    Pem {
        path: PathBuf,
        reason: KeyFormatError,
    },
    #[error("key file {path} is not a usable RSA key: {reason}")]
    Key {
        path: PathBuf,
        reason: KeyFormatError,
    },
    #[error("signing failed: {0}")]
    Sign(String),
    #[error("minion id {0:?} cannot name a key file")]
    BadMinionId(String),
}

/// Why bytes are not a key this reader can use: the PEM armour, the DER inside it, or
/// the kind of key it holds.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum KeyFormatError {
    #[error("not text")]
    NotText,
    #[error("no -----BEGIN line")]
    NoBegin,
    #[error("no -----END {label}----- line")]
    NoEnd { label: String },
    #[error("the {label} block is not base64")]
    NotBase64 { label: String },
    #[error("a {label} block is not a private key")]
    NotPrivateKey { label: String },
    #[error("a {label} block is not a public key")]
    NotPublicKey { label: String },
    /// ring refused the private key (its own words: ring's error cannot be compared).
    #[error("{0}")]
    Rejected(String),
    #[error("truncated DER")]
    TruncatedDer,
    #[error("bad DER length")]
    BadDerLength,
    #[error("SubjectPublicKeyInfo is not a SEQUENCE")]
    NotSequence,
    #[error("the public key is not an RSA key")]
    NotRsa,
    #[error("SubjectPublicKeyInfo has no key BIT STRING")]
    NoBitString,
}

/// The bytes a wrapper signs: domain, challenge (hex as sent), run and minion id, each
/// separated by a NUL so no field can run into the next.
pub(crate) fn proof_message(challenge: &str, run: u64, minion: &str) -> Vec<u8> {
    let mut msg = Vec::with_capacity(PROOF_DOMAIN.len() + challenge.len() + minion.len() + 24);
    msg.extend_from_slice(PROOF_DOMAIN);
    msg.push(0);
    msg.extend_from_slice(challenge.as_bytes());
    msg.push(0);
    msg.extend_from_slice(run.to_string().as_bytes());
    msg.push(0);
    msg.extend_from_slice(minion.as_bytes());
    msg
}

/// A fresh random challenge, as hex.
pub(crate) fn new_challenge() -> String {
    let bytes: [u8; CHALLENGE_BYTES] = rand::random();
    hex(&bytes)
}

fn read_small(path: &Path) -> Result<Vec<u8>, KeyError> {
    use std::io::Read;
    let read_err = |reason: String| KeyError::Read {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read_err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_err(e.to_string()))?;
    if bytes.len() as u64 > MAX_KEY_FILE {
        return Err(read_err(format!("larger than {MAX_KEY_FILE} bytes")));
    }
    Ok(bytes)
}

/// Sign the proof for (challenge, run, minion) with the private key in `key_file`.
pub fn sign_proof(
    key_file: &Path,
    challenge: &str,
    run: u64,
    minion: &str,
) -> Result<String, KeyError> {
    let pem = read_small(key_file)?;
    let pem_err = |reason: KeyFormatError| KeyError::Pem {
        path: key_file.to_path_buf(),
        reason,
    };
    let (label, der) = pem_block(&pem).map_err(pem_err)?;
    let key_err = |reason: KeyFormatError| KeyError::Key {
        path: key_file.to_path_buf(),
        reason,
    };
    let pair = match label.as_str() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        _ => return Err(key_err(KeyFormatError::NotPrivateKey { label })),
    }
    .map_err(|e| key_err(KeyFormatError::Rejected(e.to_string())))?;
    let msg = proof_message(challenge, run, minion);
    let mut sig = vec![0u8; pair.public().modulus_len()];
    pair.sign(
        &signature::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        &msg,
        &mut sig,
    )
    .map_err(|e| KeyError::Sign(e.to_string()))?;
    Ok(hex(&sig))
}

/// The accepted public key of `minion` under the master's pki dir: `DIR/minions/ID`.
/// Only keys the master has accepted live there (pending, rejected and denied keys have
/// directories of their own).
pub(crate) fn accepted_key_path(master_pki_dir: &Path, minion: &str) -> Result<PathBuf, KeyError> {
    let usable = !minion.is_empty()
        && minion != "."
        && minion != ".."
        && minion.len() <= 255
        && !minion.contains('/')
        && !minion.chars().any(char::is_control);
    if !usable {
        return Err(KeyError::BadMinionId(minion.to_string()));
    }
    Ok(master_pki_dir.join("minions").join(minion))
}

// The master's pki and socket directories, read from its configuration by the one reader
// of it (`salt_master`), under the names their callers know.
pub(crate) use crate::salt_master::{pki_dir as master_pki_dir, sock_dir as master_sock_dir};

/// Check a proof (hex signature) against the PEM public key in `pem` (the tests' way in;
/// main checks with the keys of a [`KeyCache`], through `minion_trust`).
#[cfg(test)]
pub(crate) fn verify_proof(
    pem: &[u8],
    challenge: &str,
    run: u64,
    minion: &str,
    signature_hex: &str,
) -> Result<bool, KeyFormatError> {
    let rsa_public = rsa_public_key(pem)?;
    Ok(verify_with_key(
        &rsa_public,
        challenge,
        run,
        minion,
        signature_hex,
    ))
}

/// The PKCS#1 RSA public key (DER) in a PEM public key file.
pub(crate) fn rsa_public_key(pem: &[u8]) -> Result<Vec<u8>, KeyFormatError> {
    let (label, der) = pem_block(pem)?;
    match label.as_str() {
        "PUBLIC KEY" => spki_rsa_key(&der),
        "RSA PUBLIC KEY" => Ok(der),
        _ => Err(KeyFormatError::NotPublicKey { label }),
    }
}

pub(crate) fn verify_with_key(
    rsa_public: &[u8],
    challenge: &str,
    run: u64,
    minion: &str,
    signature_hex: &str,
) -> bool {
    let Some(sig) = from_hex(signature_hex) else {
        return false;
    };
    let key = signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, rsa_public);
    key.verify(&proof_message(challenge, run, minion), &sig)
        .is_ok()
}

/// Accepted public keys, each read and parsed once per version of its file: a proof
/// then costs a `stat` and the signature check. A file that changed (its inode, size or
/// modification time) is read again, one that is gone refuses as before.
#[derive(Default)]
pub(crate) struct KeyCache {
    keys: std::collections::HashMap<PathBuf, (FileStamp, Vec<u8>)>,
}

type FileStamp = (u64, u64, i64, i64);

/// Keys kept at most; past it the cache starts again (each key is read once more).
const MAX_CACHED_KEYS: usize = 100_000;

impl KeyCache {
    /// Check a proof against the accepted key in `key_file`, the key parsed once per
    /// file version (the tests' way in; main goes through `minion_trust`).
    #[cfg(test)]
    pub(crate) fn verify(
        &mut self,
        key_file: &Path,
        challenge: &str,
        run: u64,
        minion: &str,
        signature_hex: &str,
    ) -> Result<bool, KeyError> {
        let key = self.accepted(key_file)?.ok_or_else(|| KeyError::Read {
            path: key_file.to_path_buf(),
            reason: "No such file or directory".to_string(),
        })?;
        Ok(verify_with_key(&key, challenge, run, minion, signature_hex))
    }

    /// The parsed public key in `key_file` (PKCS#1 DER), `None` when there is no such
    /// file (the master has not accepted the id); any other failure to read or parse it
    /// is an error, never "no key".
    pub(crate) fn accepted(&mut self, key_file: &Path) -> Result<Option<Vec<u8>>, KeyError> {
        use std::os::unix::fs::MetadataExt;
        let meta = match std::fs::metadata(key_file) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(KeyError::Read {
                    path: key_file.to_path_buf(),
                    reason: e.to_string(),
                });
            }
        };
        let stamp = (meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec());
        if let Some((seen, key)) = self.keys.get(key_file)
            && *seen == stamp
        {
            return Ok(Some(key.clone()));
        }
        let pem = read_small(key_file)?;
        let key = rsa_public_key(&pem).map_err(|reason| KeyError::Key {
            path: key_file.to_path_buf(),
            reason,
        })?;
        if self.keys.len() >= MAX_CACHED_KEYS {
            self.keys.clear();
        }
        self.keys
            .insert(key_file.to_path_buf(), (stamp, key.clone()));
        Ok(Some(key))
    }
}

/// The first PEM block: its label and decoded bytes.
pub(crate) fn pem_block(text: &[u8]) -> Result<(String, Vec<u8>), KeyFormatError> {
    let text = std::str::from_utf8(text).map_err(|_| KeyFormatError::NotText)?;
    let mut lines = text.lines().map(str::trim);
    let label = lines
        .by_ref()
        .find_map(|l| {
            l.strip_prefix("-----BEGIN ")
                .and_then(|rest| rest.strip_suffix("-----"))
        })
        .ok_or(KeyFormatError::NoBegin)?
        .to_string();
    let end = format!("-----END {label}-----");
    let mut body = String::new();
    let mut ended = false;
    for line in lines {
        if line == end {
            ended = true;
            break;
        }
        if line.contains(':') {
            continue; // RFC 1421 headers (Proc-Type, DEK-Info) of old encrypted keys
        }
        body.push_str(line);
    }
    if !ended {
        return Err(KeyFormatError::NoEnd { label });
    }
    let Some(der) = base64_decode(&body) else {
        return Err(KeyFormatError::NotBase64 { label });
    };
    Ok((label, der))
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= value(*c)? << (18 - 6 * i);
        }
        out.push((acc >> 16) as u8);
        if chunk.len() > 2 {
            out.push((acc >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(acc as u8);
        }
    }
    Some(out)
}

/// One DER element at the start of `input`: (tag, contents, rest).
fn der_element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), KeyFormatError> {
    let (&tag, rest) = input.split_first().ok_or(KeyFormatError::TruncatedDer)?;
    let (&first, mut rest) = rest.split_first().ok_or(KeyFormatError::TruncatedDer)?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(KeyFormatError::BadDerLength);
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(KeyFormatError::TruncatedDer);
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The RSAPublicKey inside a SubjectPublicKeyInfo, after checking it is an RSA key.
fn spki_rsa_key(spki: &[u8]) -> Result<Vec<u8>, KeyFormatError> {
    /// DER of the OID 1.2.840.113549.1.1.1 (rsaEncryption).
    const RSA_OID: &[u8] = &[
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
    ];
    let (tag, body, _) = der_element(spki)?;
    if tag != 0x30 {
        return Err(KeyFormatError::NotSequence);
    }
    let (tag, algorithm, rest) = der_element(body)?;
    if tag != 0x30 || !algorithm.starts_with(RSA_OID) {
        return Err(KeyFormatError::NotRsa);
    }
    let (tag, bits, _) = der_element(rest)?;
    match (tag, bits.split_first()) {
        (0x03, Some((0, key))) => Ok(key.to_vec()),
        _ => Err(KeyFormatError::NoBitString),
    }
}

#[cfg(test)]
#[path = "minion_key_tests.rs"]
mod tests;
