//! The simulated minions' keys and the master configuration the daemon reads.
//!
//! Keys: `<cache>/<id>.pem` (private, as `openssl genrsa` writes it) and `<id>.pem.pub`
//! (`openssl rsa -pubout`: `-----BEGIN PUBLIC KEY-----`, what Salt stores for an accepted
//! minion). RSA key generation is slow (tens of milliseconds each; ring cannot do it), so
//! the keys are made once, in parallel (one `openssl` at a time per core), and kept.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{FLEET_FILE, Fleet, INTERPRETER_NAME};

/// Make the keys of `minions` that `cache` does not hold yet; `parallel` at a time.
pub fn ensure_keys(cache: &Path, minions: &[String], parallel: usize) -> Result<usize, String> {
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    // One maker at a time per cache (tests run concurrently); released on drop.
    let lock_path = cache.join(".lock");
    let lock = std::fs::File::create(&lock_path)
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let missing: Vec<&String> = minions
        .iter()
        .filter(|m| !pub_file(cache, m).is_file())
        .collect();
    let mut running: Vec<(Child, &String)> = Vec::new();
    let mut made = 0;
    let mut queue = missing.iter();
    loop {
        while running.len() < parallel.max(1) {
            let Some(minion) = queue.next() else { break };
            running.push((spawn_keygen(cache, minion)?, minion));
        }
        if running.is_empty() {
            break;
        }
        let (mut child, minion) = running.remove(0);
        let status = child.wait().map_err(|e| format!("openssl: {e}"))?;
        if !status.success() || !pub_file(cache, minion).is_file() {
            return Err(format!("could not make the key of {minion} ({status})"));
        }
        made += 1;
    }
    drop(lock);
    Ok(made)
}

fn pub_file(cache: &Path, minion: &str) -> PathBuf {
    cache.join(format!("{minion}.pem.pub"))
}

/// One key: private key, public key, then both renamed into place (an interrupted run
/// leaves no half-made key behind).
fn spawn_keygen(cache: &Path, minion: &str) -> Result<Child, String> {
    let key = cache.join(format!("{minion}.pem"));
    let script = "set -e; openssl genrsa -out \"$1.tmp\" 2048 2>/dev/null; \
                  openssl rsa -in \"$1.tmp\" -pubout -out \"$1.pub.tmp\" 2>/dev/null; \
                  mv \"$1.tmp\" \"$1\"; mv \"$1.pub.tmp\" \"$1.pub\"";
    Command::new("nice")
        .args(["-n", "10", "sh", "-c", script, "keygen"])
        .arg(&key)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not run openssl: {e}"))
}

/// How `python3-simfleet` runs the generator.
pub enum Generator<'a> {
    /// A link to an executable that knows it is the bridge by that name (the bench).
    Link(&'a Path),
    /// A script (`#!/bin/sh ...`) that starts it some other way (the tests).
    Script(&'a str),
}

/// Where things are in a simulated master's directory.
pub struct Master {
    /// `salt_config_dir` for the daemon (holds `master` and `simfleet.json`).
    pub config_dir: PathBuf,
    /// `salt_bin` for the daemon: `#!<config_dir>/python3-simfleet`.
    pub salt_bin: PathBuf,
    pub pki_dir: PathBuf,
}

/// Write a master under `dir`: its `master` file (pki dir, file roots), the accepted
/// public keys of `accepted` (minion → the key file to accept for it; normally its own
/// `.pem.pub`), the fleet file, `python3-simfleet` (the generator) and the `salt` script
/// that names it as its interpreter.
pub fn write_master(
    dir: &Path,
    fleet: &Fleet,
    accepted: &[(String, PathBuf)],
    generator: Generator<'_>,
) -> Result<Master, String> {
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    let config_dir = dir.join("master");
    let pki_dir = dir.join("pki");
    let roots = dir.join("file_roots");
    for d in [&config_dir, &pki_dir.join("minions"), &roots] {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let master = config_dir.join("master");
    let text = format!(
        "pki_dir: {}\nfile_roots:\n  base:\n    - {}\n",
        pki_dir.display(),
        roots.display()
    );
    std::fs::write(&master, text).map_err(|e| io(&master, e))?;
    for (minion, key) in accepted {
        let to = pki_dir.join("minions").join(minion);
        std::fs::copy(key, &to).map_err(|e| io(&to, e))?;
    }
    let fleet_file = config_dir.join(FLEET_FILE);
    let json = serde_json::to_string(fleet).map_err(|e| e.to_string())?;
    std::fs::write(&fleet_file, json).map_err(|e| io(&fleet_file, e))?;
    let link = config_dir.join(INTERPRETER_NAME);
    let _ = std::fs::remove_file(&link);
    match generator {
        Generator::Link(exe) => std::os::unix::fs::symlink(exe, &link).map_err(|e| io(&link, e))?,
        Generator::Script(text) => {
            std::fs::write(&link, text).map_err(|e| io(&link, e))?;
            std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| io(&link, e))?;
        }
    }
    let salt_bin = config_dir.join("salt");
    let script = format!(
        "#!{}\n# A simulated fleet's `salt`: only its interpreter matters (the salt bridge).\n",
        link.display()
    );
    std::fs::write(&salt_bin, script).map_err(|e| io(&salt_bin, e))?;
    std::fs::set_permissions(&salt_bin, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(&salt_bin, e))?;
    Ok(Master {
        config_dir,
        salt_bin,
        pki_dir,
    })
}

/// `sim0`, `sim1`, ...
pub fn minion_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("sim{i}")).collect()
}

/// Each minion accepted with its own public key.
pub fn own_keys(cache: &Path, minions: &[String]) -> Vec<(String, PathBuf)> {
    minions
        .iter()
        .map(|m| (m.clone(), pub_file(cache, m)))
        .collect()
}
