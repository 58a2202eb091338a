//! Unit tests of the trust chain over several pki directories: a key found in any one,
//! the same key in two, different keys in two (ambiguous: refused for both signers), a
//! key nobody accepted, and an unreadable key file.

use super::*;
use crate::minion_key::{new_challenge, sign_proof};

const A_PKCS1: &str = include_str!("../tests/fixtures/minion-keys/a.pem");
const A_SPKI: &str = include_str!("../tests/fixtures/minion-keys/a.pub");
const B_PKCS1: &str = include_str!("../tests/fixtures/minion-keys/b.pem");
const B_SPKI: &str = include_str!("../tests/fixtures/minion-keys/b.pub");

/// A pki directory with `minions/` holding the given (id, public key) pairs.
fn pki_dir(root: &Path, name: &str, keys: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("minions")).unwrap();
    std::fs::create_dir_all(dir.join("minions_pre")).unwrap();
    for (id, key) in keys {
        std::fs::write(dir.join("minions").join(id), key).unwrap();
    }
    dir
}

struct Signed {
    challenge: String,
    by_a: String,
    by_b: String,
}

fn signed(root: &Path, minion: &str) -> Signed {
    let a = root.join("a.pem");
    let b = root.join("b.pem");
    std::fs::write(&a, A_PKCS1).unwrap();
    std::fs::write(&b, B_PKCS1).unwrap();
    let challenge = new_challenge();
    Signed {
        by_a: sign_proof(&a, &challenge, 9, minion).unwrap(),
        by_b: sign_proof(&b, &challenge, 9, minion).unwrap(),
        challenge,
    }
}

fn proof<'a>(s: &'a Signed, minion: &'a str, signature: &'a str) -> Proof<'a> {
    Proof {
        challenge: &s.challenge,
        run: 9,
        minion,
        signature,
    }
}

#[test]
fn a_key_accepted_by_any_trusted_master_proves_its_minion() {
    let root = tempfile::tempdir().unwrap();
    let top = pki_dir(root.path(), "top", &[("syndic-1", B_SPKI)]);
    let syndic_1 = pki_dir(root.path(), "syndic-1", &[("minion-01", A_SPKI)]);
    let syndic_2 = pki_dir(root.path(), "syndic-2", &[("minion-02", B_SPKI)]);
    let dirs = [top.as_path(), syndic_1.as_path(), syndic_2.as_path()];
    let s = signed(root.path(), "minion-01");
    let mut cache = KeyCache::default();
    assert_eq!(
        check_proof(&mut cache, &dirs, &[], &proof(&s, "minion-01", &s.by_a)),
        Ok(syndic_1.join("minions/minion-01"))
    );
    // Another key does not prove it, wherever that key is accepted for another id.
    assert!(matches!(
        check_proof(&mut cache, &dirs, &[], &proof(&s, "minion-01", &s.by_b)),
        Err(Refusal::BadSignature { .. })
    ));
    // Only the trusted directories count: without syndic-1 nobody accepted minion-01.
    let err = check_proof(
        &mut cache,
        &[top.as_path(), syndic_2.as_path()],
        &[],
        &proof(&s, "minion-01", &s.by_a),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::NotAccepted { .. }), "{err}");
    assert!(
        err.to_string().contains("no accepted key for minion-01"),
        "{err}"
    );
}

#[test]
fn the_same_key_in_two_masters_is_one_key_and_different_keys_refuse_both() {
    let root = tempfile::tempdir().unwrap();
    let s = signed(root.path(), "minion-01");
    let mut cache = KeyCache::default();
    // Multi-master: every master accepted the minion's one key.
    let m1 = pki_dir(root.path(), "m1", &[("minion-01", A_SPKI)]);
    let m2 = pki_dir(root.path(), "m2", &[("minion-01", A_SPKI)]);
    assert_eq!(
        check_proof(
            &mut cache,
            &[m1.as_path(), m2.as_path()],
            &[],
            &proof(&s, "minion-01", &s.by_a)
        ),
        Ok(m1.join("minions/minion-01"))
    );
    // One master accepted another key under the same id: neither signer passes, in
    // either order of the directories.
    let lax = pki_dir(root.path(), "lax", &[("minion-01", B_SPKI)]);
    for dirs in [[m1.as_path(), lax.as_path()], [lax.as_path(), m1.as_path()]] {
        for sig in [&s.by_a, &s.by_b] {
            let err =
                check_proof(&mut cache, &dirs, &[], &proof(&s, "minion-01", sig)).unwrap_err();
            assert!(matches!(err, Refusal::Ambiguous { .. }), "{err}");
        }
    }
}

#[test]
fn an_unusable_key_file_or_id_refuses_rather_than_being_skipped() {
    let root = tempfile::tempdir().unwrap();
    let s = signed(root.path(), "minion-01");
    let mut cache = KeyCache::default();
    let good = pki_dir(root.path(), "good", &[("minion-01", A_SPKI)]);
    let broken = pki_dir(root.path(), "broken", &[("minion-01", "not a key")]);
    let err = check_proof(
        &mut cache,
        &[good.as_path(), broken.as_path()],
        &[],
        &proof(&s, "minion-01", &s.by_a),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::Key(_)), "{err}");
    for bad in ["../good/minions/minion-01", "", ".."] {
        let err =
            check_proof(&mut cache, &[good.as_path()], &[], &proof(&s, bad, &s.by_a)).unwrap_err();
        assert!(
            matches!(err, Refusal::Key(KeyError::BadMinionId(_))),
            "{err}"
        );
    }
}

/// A key another server published (PKCS#1 DER, as db hands it to main).
fn published(server: &str, spki_pem: &str) -> (String, Vec<u8>) {
    (
        server.to_string(),
        crate::minion_key::rsa_public_key(spki_pem.as_bytes()).unwrap(),
    )
}

#[test]
fn a_key_only_another_server_published_proves_its_minion() {
    let root = tempfile::tempdir().unwrap();
    // This server's master does not know minion-01; server cron-b's master accepted it.
    let own = pki_dir(root.path(), "own", &[("minion-02", B_SPKI)]);
    let s = signed(root.path(), "minion-01");
    let mut cache = KeyCache::default();
    let from_b = [published("cron-b", A_SPKI)];
    assert_eq!(
        check_proof(
            &mut cache,
            &[own.as_path()],
            &from_b,
            &proof(&s, "minion-01", &s.by_a)
        ),
        Ok(published_source("cron-b", "minion-01"))
    );
    // The published key checks the signature like any other.
    assert!(matches!(
        check_proof(
            &mut cache,
            &[own.as_path()],
            &from_b,
            &proof(&s, "minion-01", &s.by_b)
        ),
        Err(Refusal::BadSignature { .. })
    ));
    // The same key here and published elsewhere (multi-master): one key, accepted.
    let both = pki_dir(root.path(), "both", &[("minion-01", A_SPKI)]);
    assert_eq!(
        check_proof(
            &mut cache,
            &[both.as_path()],
            &from_b,
            &proof(&s, "minion-01", &s.by_a)
        ),
        Ok(both.join("minions/minion-01"))
    );
}

#[test]
fn published_keys_that_differ_are_refused_as_ambiguous() {
    let root = tempfile::tempdir().unwrap();
    let own = pki_dir(root.path(), "own", &[]);
    let s = signed(root.path(), "minion-01");
    let mut cache = KeyCache::default();
    // Two other servers publish different keys: refused whoever signs.
    let two = [published("cron-b", A_SPKI), published("cron-c", B_SPKI)];
    for signature in [&s.by_a, &s.by_b] {
        let err = check_proof(
            &mut cache,
            &[own.as_path()],
            &two,
            &proof(&s, "minion-01", signature),
        )
        .unwrap_err();
        assert!(matches!(err, Refusal::Ambiguous { .. }), "{err}");
        assert!(
            err.to_string().contains("minion_keys:cron-c/minion-01"),
            "{err}"
        );
    }
    // This master's key against a different published one: ambiguous too.
    let here = pki_dir(root.path(), "here", &[("minion-01", A_SPKI)]);
    let err = check_proof(
        &mut cache,
        &[here.as_path()],
        &[published("cron-b", B_SPKI)],
        &proof(&s, "minion-01", &s.by_a),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::Ambiguous { .. }), "{err}");
    // Nobody accepted it anywhere: refused.
    let err = check_proof(
        &mut cache,
        &[own.as_path()],
        &[],
        &proof(&s, "minion-01", &s.by_a),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::NotAccepted { .. }), "{err}");
}
