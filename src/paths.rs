//! Where Saltpeter keeps its files.
//!
//! Each directory comes from the command line, then `saltpeter_config`, then the variable
//! systemd sets (`$STATE_DIRECTORY`, `$RUNTIME_DIRECTORY`), then the packaged default.

use std::path::{Path, PathBuf};

pub(crate) const DEFAULT_CONFIG_DIR: &str = "/etc/saltpeter";
pub(crate) const DEFAULT_STATE_DIR: &str = "/var/lib/saltpeter";
pub(crate) const DEFAULT_RUNTIME_DIR: &str = "/run/saltpeter";
pub(crate) const ADMIN_SOCKET: &str = "admin.sock";
pub(crate) const PID_FILE: &str = "saltpeter.pid";
pub(crate) const DATABASE: &str = "saltpeter.db";
pub(crate) const SECRET_FILE: &str = "server.secret";
/// The local executor's launch token files, under the state directory.
pub(crate) const LAUNCH_TOKENS: &str = "launch-tokens";

/// The three directories of a daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirs {
    pub config: PathBuf,
    pub state: PathBuf,
    pub runtime: PathBuf,
}

impl Dirs {
    pub(crate) fn admin_socket(&self) -> PathBuf {
        self.runtime.join(ADMIN_SOCKET)
    }

    pub(crate) fn pid_file(&self) -> PathBuf {
        self.runtime.join(PID_FILE)
    }

    pub(crate) fn database(&self) -> PathBuf {
        self.state.join(DATABASE)
    }

    /// The local executor's launch token files (0600, one per launch; the cleanup
    /// removes those no wrapper took).
    pub(crate) fn launch_tokens(&self) -> PathBuf {
        self.state.join(LAUNCH_TOKENS)
    }

    pub(crate) fn secret(&self) -> PathBuf {
        self.state.join(SECRET_FILE)
    }
}

/// The directory options shared by `saltpeter-daemon` and `saltpeter-cleanup`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DirArgs {
    /// Directory of job YAML files.
    #[arg(long, default_value = DEFAULT_CONFIG_DIR)]
    pub config: PathBuf,
    /// Where the database and the server secret live.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where the admin socket and the pid file live.
    #[arg(long)]
    pub runtime_dir: Option<PathBuf>,
}

impl DirArgs {
    /// The directories: command line, then `saltpeter_config` (`state_dir`,
    /// `runtime_dir`, when given), then systemd's variables, then the defaults.
    pub(crate) fn resolve(&self, from_config: (Option<&Path>, Option<&Path>)) -> Dirs {
        Dirs {
            config: self.config.clone(),
            state: pick_dir(
                self.state_dir.as_deref(),
                from_config.0,
                "STATE_DIRECTORY",
                DEFAULT_STATE_DIR,
            ),
            runtime: pick_dir(
                self.runtime_dir.as_deref(),
                from_config.1,
                "RUNTIME_DIRECTORY",
                DEFAULT_RUNTIME_DIR,
            ),
        }
    }
}

/// First of: command line, configuration, systemd's variable, default.
pub(crate) fn pick_dir(
    cli: Option<&Path>,
    config: Option<&Path>,
    env_var: &str,
    default: &str,
) -> PathBuf {
    if let Some(p) = cli.or(config) {
        return p.to_path_buf();
    }
    // systemd may list several directories separated by ':'; the first is ours.
    match std::env::var_os(env_var) {
        Some(v) if !v.is_empty() => {
            let v = v.to_string_lossy().into_owned();
            PathBuf::from(v.split(':').next().unwrap_or(default))
        }
        _ => PathBuf::from(default),
    }
}

/// The admin socket `saltpeterctl` talks to: `--socket`, then `$SALTPETER_SOCKET`, then
/// `$RUNTIME_DIRECTORY` or the default runtime dir.
pub(crate) fn admin_socket_for_ctl(cli: Option<&Path>) -> PathBuf {
    if let Some(p) = cli {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("SALTPETER_SOCKET").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    pick_dir(None, None, "RUNTIME_DIRECTORY", DEFAULT_RUNTIME_DIR).join(ADMIN_SOCKET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_beats_config_beats_default() {
        let cli = PathBuf::from("/a");
        let cfg = PathBuf::from("/b");
        assert_eq!(
            pick_dir(Some(&cli), Some(&cfg), "SALTPETER_TEST_UNSET_VAR", "/c"),
            cli
        );
        assert_eq!(
            pick_dir(None, Some(&cfg), "SALTPETER_TEST_UNSET_VAR", "/c"),
            cfg
        );
        assert_eq!(
            pick_dir(None, None, "SALTPETER_TEST_UNSET_VAR", "/c"),
            PathBuf::from("/c")
        );
    }
}
