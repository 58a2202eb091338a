//! Start-up checks of the supervisor, before anything is started.
//!
//! A linear list of fallible steps, each with its own error: the configuration directory
//! must be readable, the state directory writable, and the admin socket must not belong
//! to a live daemon (a stale one is removed). The listening sockets are bound here too, so
//! a port in use is reported before any child exists; the hub inherits them. Every error
//! is one line naming the path (or address) and the cause; the daemon then exits 2.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::paths::Dirs;
pub(crate) use crate::supervisor::start_error::StartError;

/// What the supervisor holds once the checks passed.
pub(crate) struct Prepared {
    pub dirs: Dirs,
    /// The state directory's lock, held until the runtime files are removed at exit.
    pub lock: Option<crate::supervisor::lock::StateLock>,
    /// The admin socket this daemon bound (device, inode): only that one is removed.
    pub socket_id: Option<(u64, u64)>,
    pub admin: UnixListener,
    pub wrappers: TcpListener,
    pub api: Option<TcpListener>,
}

/// Listening addresses from `saltpeter_config` (start-only keys).
#[derive(Debug, Clone)]
pub(crate) struct Listen {
    pub machines: String,
    pub api: Option<String>,
    /// `saltpeter_config.admin_group`: the admin socket's group (see `crate::access`).
    pub admin_group: Option<String>,
    /// `tls`, `tls_cert`, `tls_key`: checked (and a self-signed certificate created)
    /// before anything binds.
    pub tls: crate::tls::material::Settings,
}

pub(crate) fn check_config_dir(path: &Path) -> Result<(), StartError> {
    fs::read_dir(path)
        .map(|_| ())
        .map_err(|source| StartError::ConfigDir {
            path: path.to_path_buf(),
            source,
        })
}

pub(crate) fn check_state_dir(path: &Path) -> Result<(), StartError> {
    let err = |source| StartError::StateDir {
        path: path.to_path_buf(),
        source,
    };
    fs::create_dir_all(path).map_err(err)?;
    let probe = path.join(format!(".saltpeter-write-test-{}", std::process::id()));
    fs::write(&probe, b"").map_err(err)?;
    fs::remove_file(&probe).map_err(err)?;
    Ok(())
}

/// Create the runtime directory; refuse a live daemon's socket, remove a stale one.
pub(crate) fn claim_runtime_dir(dirs: &Dirs) -> Result<(), StartError> {
    let path = &dirs.runtime;
    fs::create_dir_all(path).map_err(|source| StartError::RuntimeDir {
        path: path.clone(),
        source,
    })?;
    let socket = dirs.admin_socket();
    if socket.exists() {
        match UnixStream::connect(&socket) {
            Ok(_) => return Err(StartError::AlreadyRunning { path: socket }),
            Err(_) => {
                log::info!("removing stale admin socket {}", socket.display());
                fs::remove_file(&socket).map_err(|source| StartError::RuntimeDir {
                    path: socket.clone(),
                    source,
                })?;
            }
        }
    }
    Ok(())
}

pub(crate) fn bind_admin(dirs: &Dirs) -> Result<UnixListener, StartError> {
    let path = dirs.admin_socket();
    let err = |source| StartError::BindAdmin {
        path: path.clone(),
        source,
    };
    let listener = UnixListener::bind(&path).map_err(err)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o660)).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

/// Give the admin socket the admin group (`crate::access`), so its members can connect;
/// without one the socket stays the daemon's (root and the daemon's user only).
pub(crate) fn set_admin_group(dirs: &Dirs, configured: Option<&str>) -> Result<(), StartError> {
    let path = dirs.admin_socket();
    let group = match crate::access::admin_group(configured) {
        Ok(group) => group,
        Err(e) => {
            log::warn!("{e}; only root may use the admin socket {}", path.display());
            return Ok(());
        }
    };
    if let Some((name, gid)) = group {
        nix::unistd::chown(&path, None, Some(gid)).map_err(|e| StartError::BindAdmin {
            path: path.clone(),
            source: io::Error::other(format!("could not give it the group {name}: {e}")),
        })?;
        log::debug!("admin socket {} belongs to group {name}", path.display());
    }
    Ok(())
}

pub(crate) fn bind_tcp(what: &'static str, addr: &str) -> Result<TcpListener, StartError> {
    let err = |source| StartError::BindTcp {
        what,
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

pub(crate) fn write_pid_file(dirs: &Dirs) -> Result<(), StartError> {
    let path = dirs.pid_file();
    fs::write(&path, format!("{}\n", std::process::id()))
        .map_err(|source| StartError::PidFile { path, source })
}

/// Every check in order; on success the listening sockets are bound.
pub(crate) fn prepare(dirs: Dirs, listen: &Listen) -> Result<Prepared, StartError> {
    check_config_dir(&dirs.config)?;
    check_state_dir(&dirs.state)?;
    // Before the runtime directory: a daemon still stopping keeps its socket and pid file.
    let lock = crate::supervisor::lock::acquire(&dirs.state, crate::supervisor::lock::wait())?;
    claim_runtime_dir(&dirs)?;
    if let Some(material) = crate::tls::material::prepare(&listen.tls, &dirs.state)? {
        log::info!(
            "TLS on the wrapper port and the API: {} (sha256 {})",
            material.cert_path.display(),
            crate::tls::hex(&material.fingerprint)
        );
    }
    let wrappers = bind_tcp("wrappers", &listen.machines)?;
    let api = match &listen.api {
        Some(addr) => Some(bind_tcp("the HTTP API", addr)?),
        None => None,
    };
    let admin = bind_admin(&dirs)?;
    set_admin_group(&dirs, listen.admin_group.as_deref())?;
    write_pid_file(&dirs)?;
    let socket_id = file_id(&dirs.admin_socket());
    Ok(Prepared {
        dirs,
        lock: Some(lock),
        socket_id,
        admin,
        wrappers,
        api,
    })
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Remove what this daemon left in the runtime directory: the admin socket it bound
/// (`socket_id`) and the pid file if it still names this process. Another daemon's files
/// (one that shares the runtime directory) are left alone.
pub(crate) fn remove_runtime_files(dirs: &Dirs, socket_id: Option<(u64, u64)>) {
    let socket = dirs.admin_socket();
    let pid_file = dirs.pid_file();
    let mut ours = Vec::new();
    if socket_id.is_some() && file_id(&socket) == socket_id {
        ours.push(socket);
    }
    let me = std::process::id().to_string();
    if fs::read_to_string(&pid_file).is_ok_and(|pid| pid.trim() == me) {
        ours.push(pid_file);
    }
    for path in ours {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("could not remove {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path) -> Dirs {
        Dirs {
            config: root.join("config"),
            state: root.join("state"),
            runtime: root.join("run"),
        }
    }

    #[test]
    fn missing_config_dir_names_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let d = dirs(tmp.path());
        let err = check_config_dir(&d.config).unwrap_err().to_string();
        assert!(err.contains(&d.config.display().to_string()), "{err}");
        assert!(err.contains("No such file"), "{err}");
    }

    #[test]
    fn state_dir_under_a_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, b"x").unwrap();
        let err = check_state_dir(&file.join("state"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("state directory"), "{err}");
    }

    #[test]
    fn live_socket_refused_stale_socket_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = dirs(tmp.path());
        fs::create_dir_all(&d.runtime).unwrap();
        let live = UnixListener::bind(d.admin_socket()).unwrap();
        assert!(matches!(
            claim_runtime_dir(&d),
            Err(StartError::AlreadyRunning { .. })
        ));
        drop(live); // the socket file stays, nobody listens: stale
        assert!(d.admin_socket().exists());
        claim_runtime_dir(&d).unwrap();
        assert!(!d.admin_socket().exists());
    }
}
