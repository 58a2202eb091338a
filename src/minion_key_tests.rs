//! Unit tests of minion-key proofs: the four PEM shapes Salt and OpenSSL write, and every
//! way a proof must fail (another key, another challenge, run or minion, garbage).

use super::*;

const A_PKCS1: &str = include_str!("../tests/fixtures/minion-keys/a.pem");
const A_PKCS8: &str = include_str!("../tests/fixtures/minion-keys/a.pk8");
const A_SPKI: &str = include_str!("../tests/fixtures/minion-keys/a.pub");
const A_RSAPUB: &str = include_str!("../tests/fixtures/minion-keys/a.rsapub");
const B_PKCS1: &str = include_str!("../tests/fixtures/minion-keys/b.pem");
const B_SPKI: &str = include_str!("../tests/fixtures/minion-keys/b.pub");

fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_proof_verifies_with_the_matching_public_key_only() {
    let dir = tempfile::tempdir().unwrap();
    let a = key_file(dir.path(), "a.pem", A_PKCS1);
    let challenge = new_challenge();
    let sig = sign_proof(&a, &challenge, 42, "minion-01").unwrap();
    for public in [A_SPKI, A_RSAPUB] {
        assert_eq!(
            verify_proof(public.as_bytes(), &challenge, 42, "minion-01", &sig),
            Ok(true)
        );
    }
    // Another minion's key, another challenge, run or minion id: refused.
    assert_eq!(
        verify_proof(B_SPKI.as_bytes(), &challenge, 42, "minion-01", &sig),
        Ok(false)
    );
    let other = new_challenge();
    assert_ne!(other, challenge);
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &other, 42, "minion-01", &sig),
        Ok(false)
    );
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &challenge, 43, "minion-01", &sig),
        Ok(false)
    );
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &challenge, 42, "minion-02", &sig),
        Ok(false)
    );
    // A forged or malformed signature.
    let mut forged = sig.clone().into_bytes();
    forged[10] = if forged[10] == b'0' { b'1' } else { b'0' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &challenge, 42, "minion-01", &forged),
        Ok(false)
    );
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &challenge, 42, "minion-01", "zz"),
        Ok(false)
    );
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), &challenge, 42, "minion-01", ""),
        Ok(false)
    );
}

#[test]
fn pkcs8_private_keys_sign_too() {
    let dir = tempfile::tempdir().unwrap();
    let a8 = key_file(dir.path(), "a.pk8", A_PKCS8);
    let sig = sign_proof(&a8, "00ff", 1, "m").unwrap();
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), "00ff", 1, "m", &sig),
        Ok(true)
    );
    let b = key_file(dir.path(), "b.pem", B_PKCS1);
    let sig_b = sign_proof(&b, "00ff", 1, "m").unwrap();
    assert_eq!(
        verify_proof(A_SPKI.as_bytes(), "00ff", 1, "m", &sig_b),
        Ok(false)
    );
}

#[test]
fn bad_key_files_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    assert!(matches!(
        sign_proof(&missing, "00", 1, "m"),
        Err(KeyError::Read { .. })
    ));
    let garbage = key_file(dir.path(), "g.pem", "not a key at all");
    assert!(matches!(
        sign_proof(&garbage, "00", 1, "m"),
        Err(KeyError::Pem { .. })
    ));
    let public = key_file(dir.path(), "p.pem", A_SPKI);
    let err = sign_proof(&public, "00", 1, "m").unwrap_err();
    assert!(err.to_string().contains("not a private key"), "{err}");
    let cut = key_file(dir.path(), "cut.pem", &A_PKCS1[..200]);
    assert!(sign_proof(&cut, "00", 1, "m").is_err());
    let big = key_file(dir.path(), "big.pem", &"A".repeat(70_000));
    assert!(matches!(
        sign_proof(&big, "00", 1, "m"),
        Err(KeyError::Read { .. })
    ));
    // A private key where a public one belongs, and truncated DER, are errors, not panics.
    assert!(verify_proof(A_PKCS1.as_bytes(), "00", 1, "m", "00").is_err());
    let truncated = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----\n";
    assert!(verify_proof(truncated.as_bytes(), "00", 1, "m", "00").is_err());
}

#[test]
fn minion_ids_cannot_leave_the_key_directory() {
    let dir = Path::new("/etc/salt/pki/master");
    assert_eq!(
        accepted_key_path(dir, "web-01.example.net").unwrap(),
        dir.join("minions/web-01.example.net")
    );
    for bad in ["", ".", "..", "../master.pem", "a/b", "a\nb"] {
        assert!(
            matches!(accepted_key_path(dir, bad), Err(KeyError::BadMinionId(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn base64_and_hex_round_trip_edges() {
    assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
    assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
    assert_eq!(base64_decode("a"), None);
    assert_eq!(base64_decode("a*=="), None);
    assert_eq!(
        from_hex(&hex(&[0, 1, 254, 255])),
        Some(vec![0, 1, 254, 255])
    );
    assert_eq!(from_hex("abc"), None);
    assert_eq!(from_hex("é0"), None);
}

#[test]
fn the_key_cache_follows_the_accepted_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = key_file(dir.path(), "a.pem", A_PKCS1);
    let b = key_file(dir.path(), "b.pem", B_PKCS1);
    let accepted = key_file(dir.path(), "minion-01", A_SPKI);
    let challenge = new_challenge();
    let by_a = sign_proof(&a, &challenge, 7, "minion-01").unwrap();
    let by_b = sign_proof(&b, &challenge, 7, "minion-01").unwrap();
    let mut cache = KeyCache::default();
    for _ in 0..2 {
        assert_eq!(
            cache.verify(&accepted, &challenge, 7, "minion-01", &by_a),
            Ok(true)
        );
        assert_eq!(
            cache.verify(&accepted, &challenge, 7, "minion-01", &by_b),
            Ok(false)
        );
    }
    // The master accepts another key for the id (salt-key -d, then -a): the new one counts.
    // (A file is known by inode, size and modification time; the kernel's clock for the
    // latter ticks every few milliseconds, and salt-key takes far longer than that.)
    std::fs::remove_file(&accepted).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let accepted = key_file(dir.path(), "minion-01", B_SPKI);
    assert_eq!(
        cache.verify(&accepted, &challenge, 7, "minion-01", &by_a),
        Ok(false)
    );
    assert_eq!(
        cache.verify(&accepted, &challenge, 7, "minion-01", &by_b),
        Ok(true)
    );
    // The key is deleted: nothing proves the minion any more.
    std::fs::remove_file(&accepted).unwrap();
    assert!(matches!(
        cache.verify(&accepted, &challenge, 7, "minion-01", &by_b),
        Err(KeyError::Read { .. })
    ));
}
