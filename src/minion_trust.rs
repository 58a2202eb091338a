//! Which accepted key stands for a minion when more than one Salt master accepts keys:
//! a top master with syndics below it, or several masters (docs/security.md, "Minions
//! behind syndics and other masters").
//!
//! The daemon trusts exactly the pki directories it is configured with: its own master's
//! (`salt_pki_dir`, else the master configuration's `pki_dir`) and each of
//! `salt_pki_dirs` (the syndic masters', or copies of their `minions/`). A key counts
//! only from a `minions/` directory, where a master keeps the keys it *accepted*. For a
//! proof from minion X:
//!
//! 1. name `DIR/minions/X` in every trusted directory (an id that cannot name a file is
//!    refused);
//! 2. read those that exist: a missing file means "not accepted there", any other
//!    failure to read or parse one refuses (an unreadable file could hide a conflict);
//! 3. no key anywhere: refused. Keys that differ: refused as ambiguous, whatever the
//!    signature, until an operator removes one (picking either would let whoever got a
//!    key accepted on the laxest master — `auto_accept` on one syndic — pass as X);
//! 4. the one key (however many masters hold it) checks the signature.
//!
//! With several masters on one database (docs/ha.md), the keys the other servers'
//! masters accepted and published (`minion_keys`, read by db) are one more source, under
//! the same rules: each counts as a directory that holds the key, and a key that differs
//! from any other source's is ambiguous.

use std::path::{Path, PathBuf};

use crate::minion_key::{KeyCache, KeyError, accepted_key_path, verify_with_key};

/// Why a proof is refused; the message goes into the `wrapper_refused` event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refusal {
    #[error("the master has no accepted key for {minion} (looked in {tried})")]
    NotAccepted { minion: String, tried: String },
    #[error(
        "{minion} is accepted with different keys in {} and {}: refused until one of them is removed",
        first.display(),
        second.display()
    )]
    Ambiguous {
        minion: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "the signature does not match the key the master accepted for {minion} ({})",
        path.display()
    )]
    BadSignature { minion: String, path: PathBuf },
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// A proof to check: the hub's challenge, the run and the minion it claims, and the
/// hex signature.
pub(crate) struct Proof<'a> {
    pub challenge: &'a str,
    pub run: u64,
    pub minion: &'a str,
    pub signature: &'a str,
}

/// Check `proof` against the key the trusted `pki_dirs` accepted for its minion, and
/// the keys other servers `published` for it, (server, PKCS#1 DER) (see the module
/// note); `Ok` is the key file that proved it (the first of those holding it; a
/// published key is named `minion_keys:<server>/<minion>`).
pub(crate) fn check_proof(
    cache: &mut KeyCache,
    pki_dirs: &[&Path],
    published: &[(String, Vec<u8>)],
    proof: &Proof<'_>,
) -> Result<PathBuf, Refusal> {
    let minion = proof.minion;
    let mut found: Option<(PathBuf, Vec<u8>)> = None;
    let mut sources = Vec::with_capacity(pki_dirs.len() + published.len());
    for dir in pki_dirs {
        let path = accepted_key_path(dir, minion)?;
        let Some(key) = cache.accepted(&path)? else {
            continue;
        };
        sources.push((path, key));
    }
    for (server, key) in published {
        sources.push((published_source(server, minion), key.clone()));
    }
    for (path, key) in sources {
        match &found {
            None => found = Some((path, key)),
            Some((first, seen)) if *seen != key => {
                return Err(Refusal::Ambiguous {
                    minion: minion.to_string(),
                    first: first.clone(),
                    second: path,
                });
            }
            Some(_) => {}
        }
    }
    let Some((path, key)) = found else {
        let tried = pki_dirs
            .iter()
            .map(|d| d.join("minions").display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Refusal::NotAccepted {
            minion: minion.to_string(),
            tried,
        });
    };
    if verify_with_key(&key, proof.challenge, proof.run, minion, proof.signature) {
        Ok(path)
    } else {
        Err(Refusal::BadSignature {
            minion: minion.to_string(),
            path,
        })
    }
}

/// How a key another server published is named in messages.
pub(crate) fn published_source(server: &str, minion: &str) -> PathBuf {
    PathBuf::from(format!("minion_keys:{server}/{minion}"))
}

#[cfg(test)]
#[path = "minion_trust_tests.rs"]
mod tests;
