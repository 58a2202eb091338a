//! Settings the supervisor needs before anything starts: directories and listening
//! addresses, from `saltpeter_config` (start-only keys).

use std::path::{Path, PathBuf};

use crate::supervisor::preflight::{Listen, StartError};

pub(crate) struct Startup {
    pub state_dir: Option<PathBuf>,
    pub runtime_dir: Option<PathBuf>,
    pub listen: Listen,
    /// `saltpeter_config.watchdog`.
    pub watchdog: std::time::Duration,
}

/// Read the start-only keys of the configuration in `config_dir`. Job errors do not stop
/// the daemon (those jobs are disabled alone); an unreadable directory does.
pub(crate) fn settings(config_dir: &Path) -> Result<Startup, StartError> {
    crate::supervisor::preflight::check_config_dir(config_dir)?;
    // Settings only: the jobs are main's to load and report on.
    let sp = &crate::config::load_settings(config_dir).map_err(|e| StartError::Config {
        path: config_dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let addr = |host: &str, port: u16| {
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    if sp.api_ws
        && sp.api_auth == crate::config::ApiAuth::None
        && !is_loopback(&sp.api_ws_bind_addr)
    {
        return Err(StartError::Config {
            path: config_dir.to_path_buf(),
            message: format!(
                "saltpeter_config.api_auth is `none` but the API is bound to {}: an API without \
                 authentication is only served on a loopback address (127.0.0.1, ::1), behind \
                 a proxy that authenticates",
                sp.api_ws_bind_addr
            ),
        });
    }
    if !sp.tls {
        let plain: Vec<&str> = std::iter::once(sp.machines_ws_bind_addr.as_str())
            .chain(sp.api_ws.then_some(sp.api_ws_bind_addr.as_str()))
            .filter(|host| !is_loopback(host))
            .collect();
        if let Some(host) = plain.first() {
            return Err(StartError::Config {
                path: config_dir.to_path_buf(),
                message: format!(
                    "saltpeter_config.tls is false but a port is bound to {host}: plain text \
                     (commands, secrets and output in clear) is only served on loopback \
                     addresses (127.0.0.1, ::1); remove `tls: false`"
                ),
            });
        }
    }
    Ok(Startup {
        watchdog: std::time::Duration::from_secs(sp.watchdog_s),
        state_dir: sp.state_dir.clone(),
        runtime_dir: sp.runtime_dir.clone(),
        listen: Listen {
            machines: addr(&sp.machines_ws_bind_addr, sp.machines_ws_port),
            api: sp
                .api_ws
                .then(|| addr(&sp.api_ws_bind_addr, sp.api_ws_port)),
            admin_group: sp.admin_group.clone(),
            tls: sp.tls_settings(),
        },
    })
}

/// Whether `host` (an `api_ws_bind_addr`) only accepts connections from this machine.
pub(crate) fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn loopback_addresses() {
        for host in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["0.0.0.0", "::", "10.0.0.1", "example.org"] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
