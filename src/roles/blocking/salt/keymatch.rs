//! A glob or list target matched against the master's accepted keys here, as Salt's
//! `CkMinions` does for those two kinds, without asking the salt bridge: the bridge's
//! Python match cost about 1.7 ms of CPU per firing, more than the rest of blocking's share.
//!
//! Only what is certain is answered here; anything else is `None` and goes to the bridge
//! as before: another target type, a glob with `[...]` classes, a master whose
//! configuration has includes (`master.d/*.conf` may move `pki_dir` or set
//! `order_masters`), a top master of syndics (`order_masters`: the minions behind its
//! syndics are not among its keys), keys kept elsewhere (`keys.cache_driver`) or that
//! cannot be read, a target that matches no key (only the master says for sure that
//! nothing matches), and a listed name with no key (it may be one of Salt's resources).

use std::path::Path;

use crate::config::windows::glob_match;
use crate::wire::link::{Resolution, SaltTargetType};

/// What the bridge says of a listed minion with no accepted key.
const NO_KEY: &str = "Minion did not return. [No response]";

/// The minions of `target` among the keys accepted by the master configured in
/// `config_dir`, as the bridge's match would answer; `None` when the bridge must decide.
pub(crate) fn from_accepted_keys(
    config_dir: Option<&str>,
    target_type: SaltTargetType,
    target: &str,
) -> Option<Resolution> {
    let config_dir = Path::new(config_dir.unwrap_or(crate::salt_master::DEFAULT_CONFIG_DIR));
    if !matches!(target_type, SaltTargetType::Glob | SaltTargetType::List)
        || (target_type == SaltTargetType::Glob && target.contains('['))
        || !crate::salt_master::read::<MatchSettings>(config_dir)?.keys_are_here()
        || has_dropins(config_dir)
    {
        return None;
    }
    let keys = accepted(&crate::salt_master::pki_dir(config_dir).join("minions"))?;
    let res = resolve(&keys, target_type, target);
    // A name that is no minion's key may be one of Salt's resources (3008), which only
    // the master resolves.
    (!res.live.is_empty() && res.unreachable.is_empty()).then_some(res)
}

/// The match itself, over the accepted key names `keys` (sorted).
fn resolve(keys: &[String], target_type: SaltTargetType, target: &str) -> Resolution {
    let mut res = Resolution {
        from_cache: true,
        ..Default::default()
    };
    if target_type == SaltTargetType::List {
        for minion in target.split(',').filter(|m| !m.is_empty()) {
            if keys.binary_search_by(|k| k.as_str().cmp(minion)).is_ok() {
                res.live.push(minion.to_string());
            } else {
                res.unreachable
                    .push((minion.to_string(), NO_KEY.to_string()));
            }
        }
    } else {
        res.live = keys
            .iter()
            .filter(|k| glob_match(target, k))
            .cloned()
            .collect();
    }
    res
}

/// The accepted keys' names: the plain files of `dir` not starting with a dot, sorted
/// (as Salt lists them); `None` when the directory cannot be read.
fn accepted(dir: &Path) -> Option<Vec<String>> {
    let mut keys = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        if !entry.file_type().ok()?.is_file() {
            continue;
        }
        if let Some(name) = entry.file_name().to_str()
            && !name.starts_with('.')
        {
            keys.push(name.to_string());
        }
    }
    keys.sort();
    Some(keys)
}

/// The master's settings that say whether its accepted keys can be matched here; a
/// file that does not read as these leaves the match to the bridge.
#[derive(serde::Deserialize)]
struct MatchSettings {
    include: Option<serde_json::Value>,
    default_include: Option<serde_json::Value>,
    order_masters: Option<bool>,
    #[serde(rename = "keys.cache_driver")]
    key_cache: Option<String>,
}

impl MatchSettings {
    /// Its keys are the files of `pki_dir/minions` and all of its settings are in its main
    /// file: no includes (`include`, `default_include`), not a top master of syndics
    /// (`order_masters`), no other key store (`keys.cache_driver` other than Salt's
    /// default `localfs_key`).
    fn keys_are_here(&self) -> bool {
        self.include.is_none()
            && self.default_include.is_none()
            && self.order_masters != Some(true)
            && self.key_cache.as_deref().is_none_or(|d| d == "localfs_key")
    }
}

/// The master reads drop-ins (`master.d/*.conf`, Salt's default include): its settings
/// are not all in the file read here.
fn has_dropins(config_dir: &Path) -> bool {
    std::fs::read_dir(config_dir.join("master.d")).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".conf"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        let mut k: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        k.sort();
        k
    }

    #[test]
    fn a_glob_matches_the_accepted_keys_as_fnmatch_does() {
        let k = keys(&["web-1", "web-2", "db-1", "web-10"]);
        let res = resolve(&k, SaltTargetType::Glob, "web-?");
        assert_eq!(res.live, ["web-1", "web-2"]);
        assert!(res.unreachable.is_empty() && res.from_cache && !res.no_match);
        assert_eq!(resolve(&k, SaltTargetType::Glob, "*").live.len(), 4);
        assert!(resolve(&k, SaltTargetType::Glob, "WEB*").live.is_empty());
    }

    #[test]
    fn a_listed_minion_without_a_key_did_not_return() {
        let k = keys(&["a", "b"]);
        let res = resolve(&k, SaltTargetType::List, "b,zz,,a");
        assert_eq!(res.live, ["b", "a"]);
        assert_eq!(res.unreachable, [("zz".to_string(), NO_KEY.to_string())]);
    }

    #[test]
    fn only_certain_answers_are_given_here() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pki = dir.path().join("pki");
        std::fs::create_dir_all(pki.join("minions")).unwrap_or_else(|e| panic!("{e}"));
        for m in ["m1", "m2", ".hidden"] {
            std::fs::write(pki.join("minions").join(m), "key").unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::create_dir(pki.join("minions").join("not-a-key"))
            .unwrap_or_else(|e| panic!("{e}"));
        let master = dir.path().join("master");
        std::fs::write(&master, format!("pki_dir: {}\n", pki.display()))
            .unwrap_or_else(|e| panic!("{e}"));
        let cfg = dir.path().to_str();
        let res = from_accepted_keys(cfg, SaltTargetType::Glob, "*");
        assert_eq!(res.map(|r| r.live), Some(vec!["m1".into(), "m2".into()]));
        let listed = from_accepted_keys(cfg, SaltTargetType::List, "m2,m1");
        assert_eq!(listed.map(|r| r.live), Some(vec!["m2".into(), "m1".into()]));
        // Nothing matched, a listed name without a key, a class, another type: the
        // bridge decides.
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "x*").is_none());
        assert!(from_accepted_keys(cfg, SaltTargetType::List, "m1,zz").is_none());
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "m[12]").is_none());
        assert!(from_accepted_keys(cfg, SaltTargetType::Grain, "os:Debian").is_none());
        // A syndics' top master, or settings in master.d: the bridge decides.
        std::fs::write(
            &master,
            format!("pki_dir: {}\norder_masters: True\n", pki.display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "*").is_none());
        std::fs::write(
            &master,
            format!("pki_dir: {}\nkeys.cache_driver: redis\n", pki.display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "*").is_none());
        // A setting of a shape Salt would not take: not certain either.
        std::fs::write(
            &master,
            format!("pki_dir: {}\norder_masters: [1]\n", pki.display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "*").is_none());
        std::fs::write(&master, format!("pki_dir: {}\n", pki.display()))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(dir.path().join("master.d")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("master.d/x.conf"), "").unwrap_or_else(|e| panic!("{e}"));
        assert!(from_accepted_keys(cfg, SaltTargetType::Glob, "*").is_none());
        // Keys that cannot be read.
        std::fs::remove_file(dir.path().join("master.d/x.conf")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&master, "pki_dir: /nonexistent/pki\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(from_accepted_keys(cfg, SaltTargetType::List, "m1").is_none());
    }
}
