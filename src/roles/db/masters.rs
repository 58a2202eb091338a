//! db's share of several masters on one database (docs/ha.md, "Several masters, one
//! database"), on PostgreSQL with the salt executor only. db may block on its database
//! and its files, so what reads either lives here, not in main:
//!
//! 1. every [`CALLS_POLL`]: the Salt calls other servers asked of this one are taken
//!    (`DbNotice::SaltCalls`), and the answers to this one's calls are collected
//!    (`DbNotice::SaltReplies`); main makes and answers the calls;
//! 2. every [`REGISTRY_POLL`]: this server's heartbeat in `salt_servers` (only while its
//!    master answers: a server whose master is down is asked nothing), and the other
//!    servers alive (`DbNotice::SaltPeers`, on change);
//! 3. every [`SCAN_EVERY`] (and at start): the accepted keys of this server's master
//!    (`<pki_dir>/minions/*`) published into `minion_keys` (changes only; a key removed
//!    from the master leaves the table), and, whenever the other servers' keys changed,
//!    them and this server's minions to main (`DbNotice::MinionKeys`);
//! 4. with the scan: stale `salt_calls` rows are deleted.
//!
//! A failure of any step is logged and tried again at its next turn; nothing is lost
//! that the step would not read again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::master_probe::MasterProbe;
use super::storage::Storage;
use crate::wire::db::{DbNotice, MinionKeys, SaltCallRow};

/// How often the Salt calls asked of this server, and the answers to its own, are taken.
pub(super) const CALLS_POLL: Duration = Duration::from_millis(200);
/// How often this server says it is alive and reads who else is.
pub(super) const REGISTRY_POLL: Duration = Duration::from_secs(3);
/// How often the master's accepted keys are read and published.
pub(super) const SCAN_EVERY: Duration = Duration::from_secs(60);
/// Largest key file read (as `minion_key`'s).
const MAX_KEY_FILE: u64 = 64 * 1024;

/// What db keeps of the exchange between runs of its timers.
pub(super) struct Masters {
    me: String,
    pki_dir: PathBuf,
    probe: MasterProbe,
    /// The keys the last scan published (minion -> PEM); `None` before the first.
    published: Option<BTreeMap<String, String>>,
    /// Key files read, by minion: (file stamp, PEM), so an unchanged file is not read.
    files: HashMap<String, (FileStamp, String)>,
    last_scan: Option<Instant>,
    /// What main was told last.
    peers_sent: Option<Vec<String>>,
    others_stamp: Option<(i64, i64)>,
    keys_sent: Option<MinionKeys>,
}

type FileStamp = (u64, u64, i64, i64);

impl Masters {
    /// For a server on a shared database whose executor is salt; `None` otherwise.
    pub(super) fn new(
        config: Option<&crate::config::SaltpeterConfig>,
        server: Option<&str>,
    ) -> Option<Masters> {
        let config = config?;
        let me = server?.to_string();
        if config.executor != crate::config::Executor::Salt {
            return None;
        }
        let pki_dir = config
            .salt_pki_dir
            .clone()
            .unwrap_or_else(|| crate::minion_key::master_pki_dir(&config.salt_config_dir));
        Some(Masters {
            me,
            pki_dir,
            probe: MasterProbe::new(&config.salt_config_dir),
            published: None,
            files: HashMap::new(),
            last_scan: None,
            peers_sent: None,
            others_stamp: None,
            keys_sent: None,
        })
    }
}

/// Step 1: the calls asked of this server and the answers to its own, for main.
pub(super) fn poll_calls(masters: &Masters, store: &mut dyn Storage) -> Vec<DbNotice> {
    let me = &masters.me;
    let mut notices = Vec::new();
    match store.take_salt_calls(me) {
        Ok(rows) if rows.is_empty() => {}
        Ok(rows) => notices.push(DbNotice::SaltCalls(
            rows.into_iter()
                .map(|(id, from, request)| SaltCallRow { id, from, request })
                .collect(),
        )),
        Err(e) => log::warn!("could not take the salt calls asked of {me}: {e}"),
    }
    match store.take_salt_replies(me) {
        Ok(rows) if rows.is_empty() => {}
        Ok(rows) => notices.push(DbNotice::SaltReplies(rows)),
        Err(e) => log::warn!("could not take the answers to {me}'s salt calls: {e}"),
    }
    notices
}

/// Steps 2 to 4; what main is to be told.
pub(super) fn poll_registry(masters: &mut Masters, store: &mut dyn Storage) -> Vec<DbNotice> {
    let now = Instant::now();
    let now_ms = crate::wire::records::now_ms();
    let me = masters.me.clone();
    let mut notices = Vec::new();
    // A server whose master is down is asked nothing: it does not say it is alive.
    let peers = if masters.probe.down(now) {
        None
    } else {
        match store.salt_heartbeat(&me, now_ms) {
            Ok(peers) => Some(peers),
            Err(e) => {
                log::warn!("could not register {me}'s salt-master: {e}");
                None
            }
        }
    };
    if let Some(peers) = peers
        && masters.peers_sent.as_ref() != Some(&peers)
    {
        log::info!(
            "servers driving a salt-master besides {me}: {}",
            if peers.is_empty() {
                "none".to_string()
            } else {
                peers.join(", ")
            }
        );
        masters.peers_sent = Some(peers.clone());
        notices.push(DbNotice::SaltPeers(peers));
    }
    let mut own_changed = false;
    if masters
        .last_scan
        .is_none_or(|at| now.duration_since(at) >= SCAN_EVERY)
    {
        masters.last_scan = Some(now);
        let keys = scan_accepted(&masters.pki_dir, &mut masters.files);
        if masters.published.as_ref() != Some(&keys) {
            match store.publish_minion_keys(&me, masters.published.as_ref(), &keys, now_ms) {
                Ok((written, deleted)) => {
                    log::info!(
                        "published the accepted keys of {me}'s master: {} in all, \
                         {written} written, {deleted} removed",
                        keys.len()
                    );
                    masters.published = Some(keys);
                    own_changed = true;
                }
                Err(e) => log::warn!("could not publish the keys of {me}'s master: {e}"),
            }
        }
        match store.expire_salt_calls(now_ms) {
            Ok(0) => {}
            Ok(n) => log::info!("deleted {n} salt call(s) nobody finished within an hour"),
            Err(e) => log::warn!("could not delete stale salt calls: {e}"),
        }
    }
    notices.extend(read_others_keys(masters, store, own_changed));
    notices
}

/// The other servers' keys, when they changed (or this server's did), for main.
fn read_others_keys(
    masters: &mut Masters,
    store: &mut dyn Storage,
    own_changed: bool,
) -> Option<DbNotice> {
    let me = masters.me.clone();
    let stamp = match store.minion_keys_stamp(&me) {
        Ok(stamp) => stamp,
        Err(e) => {
            log::warn!("could not read the other servers' minion keys: {e}");
            return None;
        }
    };
    if !own_changed && masters.others_stamp == Some(stamp) {
        return None;
    }
    let rows = match store.minion_keys_of_others(&me) {
        Ok(rows) => rows,
        Err(e) => {
            log::warn!("could not read the other servers' minion keys: {e}");
            return None;
        }
    };
    masters.others_stamp = Some(stamp);
    let mut others = Vec::with_capacity(rows.len());
    for (server, minion, pem) in rows {
        match crate::minion_key::rsa_public_key(pem.as_bytes()) {
            Ok(der) => others.push((server, minion, der)),
            Err(e) => log::error!(
                "minion_keys: the key {server} published for {minion} is not a usable \
                 RSA public key ({e}); left out (its proofs are checked without it)"
            ),
        }
    }
    let keys = MinionKeys {
        own: masters
            .published
            .as_ref()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
        others,
    };
    if masters.keys_sent.as_ref() == Some(&keys) {
        return None;
    }
    masters.keys_sent = Some(keys.clone());
    Some(DbNotice::MinionKeys(keys))
}

/// The accepted keys under `pki_dir/minions` (minion -> PEM), each file read only when
/// it changed since `files` saw it. Files that are not usable keys are logged and left
/// out: a key this server cannot read is not published as accepted.
pub(super) fn scan_accepted(
    pki_dir: &Path,
    files: &mut HashMap<String, (FileStamp, String)>,
) -> BTreeMap<String, String> {
    use std::os::unix::fs::MetadataExt;
    let dir = pki_dir.join("minions");
    let mut keys = BTreeMap::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) => {
            log::warn!(
                "could not read the accepted minion keys in {}: {e}",
                dir.display()
            );
            return keys;
        }
    };
    for entry in entries.flatten() {
        let Ok(minion) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        if crate::minion_key::accepted_key_path(pki_dir, &minion).is_err() {
            continue;
        }
        let meta = match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => meta,
            _ => continue,
        };
        let stamp = (meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec());
        if let Some((seen, pem)) = files.get(&minion)
            && *seen == stamp
        {
            keys.insert(minion, pem.clone());
            continue;
        }
        match read_key(&path, meta.len()) {
            Ok(pem) => {
                files.insert(minion.clone(), (stamp, pem.clone()));
                keys.insert(minion, pem);
            }
            Err(why) => log::warn!("accepted key {}: {why}; not published", path.display()),
        }
    }
    files.retain(|minion, _| keys.contains_key(minion));
    keys
}

/// Why an accepted key file is not published.
#[derive(Debug, thiserror::Error)]
enum KeyFileError {
    #[error("larger than {} bytes", MAX_KEY_FILE)]
    TooLarge,
    #[error("{0}")]
    Read(std::io::Error),
    #[error("{0}")]
    NotKey(crate::minion_key::KeyFormatError),
    #[error("not text")]
    NotText,
}

fn read_key(path: &Path, len: u64) -> Result<String, KeyFileError> {
    if len > MAX_KEY_FILE {
        return Err(KeyFileError::TooLarge);
    }
    let bytes = std::fs::read(path).map_err(KeyFileError::Read)?;
    crate::minion_key::rsa_public_key(&bytes).map_err(KeyFileError::NotKey)?;
    String::from_utf8(bytes).map_err(|_| KeyFileError::NotText)
}
