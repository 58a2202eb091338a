//! The Salt master's configuration file (`DIR/master`), read in one place.
//!
//! Saltpeter needs a few of its settings: the pki and socket directories (placed under
//! `root_dir` as Salt does) and the first `base` file root. Each caller names the settings
//! it reads in a struct of its own and `read` parses the file into it, so a setting of
//! an unexpected shape spoils only the reads that need it. A missing, unreadable or
//! unparsable file gives Salt's defaults: whatever uses the path then names the path it
//! tried. A leaf: it names no other module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Salt's configuration directory when none is given.
pub(crate) const DEFAULT_CONFIG_DIR: &str = "/etc/salt";

/// The master's configuration file in `config_dir` (`None`: Salt's default directory).
pub(crate) fn file(config_dir: Option<&str>) -> PathBuf {
    Path::new(config_dir.unwrap_or(DEFAULT_CONFIG_DIR)).join("master")
}

/// The settings `T` names of the master's configuration in `config_dir`; `None` when the
/// file is missing, unreadable or not what `T` expects.
pub(crate) fn read<T: serde::de::DeserializeOwned>(config_dir: &Path) -> Option<T> {
    let text = std::fs::read_to_string(config_dir.join("master")).ok()?;
    serde_saphyr::from_str::<T>(&text).ok()
}

/// The master's pki directory (`pki_dir`, under `root_dir` as Salt places it), else
/// Salt's default `/etc/salt/pki/master`.
pub(crate) fn pki_dir(config_dir: &Path) -> PathBuf {
    rooted_path(config_dir, |c| c.pki_dir, "/etc/salt/pki/master")
}

/// The master's socket directory (`sock_dir` under `root_dir`), else Salt's default
/// `/var/run/salt/master`.
pub(crate) fn sock_dir(config_dir: &Path) -> PathBuf {
    rooted_path(config_dir, |c| c.sock_dir, "/var/run/salt/master")
}

/// The first `base` directory of the master's `file_roots` (default `/srv/salt`).
pub(crate) fn file_root(config_dir: Option<&str>) -> PathBuf {
    #[derive(serde::Deserialize)]
    struct FileRoots {
        file_roots: Option<BTreeMap<String, Vec<String>>>,
    }
    read::<FileRoots>(Path::new(config_dir.unwrap_or(DEFAULT_CONFIG_DIR)))
        .and_then(|c| c.file_roots)
        .and_then(|roots| roots.get("base").and_then(|b| b.first().cloned()))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/srv/salt"))
}

#[derive(serde::Deserialize)]
struct RootedPaths {
    pki_dir: Option<String>,
    sock_dir: Option<String>,
    root_dir: Option<String>,
}

/// A path setting of the master's configuration (`pick`), placed under `root_dir` as
/// Salt does, else `default`.
fn rooted_path(
    config_dir: &Path,
    pick: fn(RootedPaths) -> Option<String>,
    default: &str,
) -> PathBuf {
    let (path, root_dir) = match read::<RootedPaths>(config_dir) {
        Some(c) => {
            let root = c.root_dir.clone();
            (pick(c), root)
        }
        None => (None, None),
    };
    let path = PathBuf::from(path.unwrap_or_else(|| default.into()));
    match root_dir.map(PathBuf::from) {
        // Salt prepends root_dir to paths that are not already below it.
        Some(root) if root != Path::new("/") && !path.starts_with(&root) => {
            root.join(path.strip_prefix("/").unwrap_or(&path))
        }
        _ => path,
    }
}
