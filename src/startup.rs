//! Settings the supervisor needs before anything starts: directories and listening
//! addresses from `saltpeter_config` (start-only keys).

use std::path::{Path, PathBuf};

use crate::supervisor::preflight::{Listen, StartError};

pub struct Startup {
    pub state_dir: Option<PathBuf>,
    pub runtime_dir: Option<PathBuf>,
    pub listen: Listen,
}

/// Read the start-only keys of the configuration in `config_dir`.
pub fn settings(config_dir: &Path) -> Result<Startup, StartError> {
    crate::supervisor::preflight::check_config_dir(config_dir)?;
    Ok(Startup {
        state_dir: None,
        runtime_dir: None,
        listen: Listen {
            machines: "0.0.0.0:8889".into(),
            api: None,
        },
    })
}
