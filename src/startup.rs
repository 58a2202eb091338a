//! Settings the supervisor needs before anything starts: directories and listening
//! addresses, from `saltpeter_config` (start-only keys).

use std::path::{Path, PathBuf};

use crate::supervisor::preflight::{Listen, StartError};

pub struct Startup {
    pub state_dir: Option<PathBuf>,
    pub runtime_dir: Option<PathBuf>,
    pub listen: Listen,
}

/// Read the start-only keys of the configuration in `config_dir`. Job errors do not stop
/// the daemon (those jobs are disabled alone); an unreadable directory does.
pub fn settings(config_dir: &Path) -> Result<Startup, StartError> {
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
    Ok(Startup {
        state_dir: sp.state_dir.clone(),
        runtime_dir: sp.runtime_dir.clone(),
        listen: Listen {
            machines: addr(&sp.machines_ws_bind_addr, sp.machines_ws_port),
            api: None,
        },
    })
}
