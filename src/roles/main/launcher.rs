//! How main launches wrappers: the URL and path they get, the pre-staging lead that
//! follows the measured salt launch latency, and which minions already have this build's
//! wrapper.

use std::collections::HashMap;
use std::time::Duration;

use std::path::PathBuf;

use super::{Main, scheduler};
use crate::config;

/// What main knows about launching wrappers.
pub struct Launcher {
    /// Minions known to have the wrapper: (path, hash) deployed there.
    pub deployed: HashMap<String, (String, String)>,
    /// Hash of this build's wrapper, once a deployment reported it.
    pub wrapper_hash: Option<String>,
    /// Measured salt launch latency (the pre-staging lead follows it).
    pub launch_latency: Duration,
    /// `#sha256=HEX` of the hub's certificate, for wrappers to pin (`None`: `tls: false`).
    pub wrapper_pin: Option<String>,
}

impl Default for Launcher {
    fn default() -> Launcher {
        Launcher {
            deployed: HashMap::new(),
            wrapper_hash: None,
            launch_latency: Duration::from_secs(2),
            wrapper_pin: None,
        }
    }
}

/// Whether `url` (from `servers`) names this server's own wrapper port.
fn is_own(url: &str, port: u16, authority: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '#']).next().unwrap_or(rest);
    host_port == authority || (port != 0 && host_port == format!("127.0.0.1:{port}"))
}

impl Main {
    /// URL the wrappers of `job` connect to (several, comma-separated, when `servers`
    /// lists other servers).
    pub fn wrapper_url(&self, job: &config::Job) -> String {
        let host = job
            .server_host
            .clone()
            .or_else(|| self.config.saltpeter.default_saltpeter_server_host.clone())
            .unwrap_or_else(|| match job.executor {
                config::Executor::Local => "127.0.0.1".to_string(),
                config::Executor::Salt => nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "localhost".to_string()),
            });
        // A host given with its port (a proxy or NAT in front of the daemon) is used as is.
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok())
            && host.matches(':').count() == 1;
        let authority = if has_port {
            host
        } else {
            format!("{host}:{}", self.daemon.wrapper_port)
        };
        let own = match &self.launcher.wrapper_pin {
            Some(pin) => format!(
                "wss://{authority}{}{pin}",
                crate::wire::wrapper::WRAPPER_PATH
            ),
            None => format!("ws://{authority}{}", crate::wire::wrapper::WRAPPER_PATH),
        };
        // Several servers sharing the database (docs/ha.md): this one first, then the
        // others, so a wrapper reaches whichever leads when this one is gone.
        let mut urls = vec![own];
        for other in &self.config.saltpeter.servers {
            let same = |u: &String| u.trim_end_matches('/') == other.trim_end_matches('/');
            if !urls.iter().any(same) && !is_own(other, self.daemon.wrapper_port, &authority) {
                urls.push(other.clone());
            }
        }
        urls.join(",")
    }

    /// How far ahead of its slot a run of `job` is launched: salt runs are pre-staged by
    /// twice the measured launch latency plus a second, within `prestage_cap`.
    pub fn prestage_lead(&self, job: &config::Job) -> chrono::Duration {
        self.prestage_lead_of(job.executor)
    }

    fn prestage_lead_of(&self, executor: config::Executor) -> chrono::Duration {
        let cap = Duration::from_secs(self.config.saltpeter.prestage_cap_s);
        if executor != config::Executor::Salt || cap.is_zero() {
            return chrono::Duration::zero();
        }
        let lead = (self.launcher.launch_latency * 2 + Duration::from_secs(1)).min(cap);
        chrono::Duration::from_std(lead).unwrap_or_else(|_| chrono::Duration::zero())
    }

    /// The leads of every job, for the scheduler (they depend only on the executor).
    pub fn leads(&self) -> scheduler::Leads {
        scheduler::Leads {
            salt: self.prestage_lead_of(config::Executor::Salt),
        }
    }

    /// Fold one measured launch (salt call to launched) into the latency estimate.
    pub fn record_launch_latency(&mut self, sample: Duration) {
        // Up at once (a late start is what pre-staging is there to prevent), down slowly.
        self.launcher.launch_latency = if sample > self.launcher.launch_latency {
            sample
        } else {
            (self.launcher.launch_latency * 3 + sample) / 4
        };
    }

    /// How blocking calls salt, from the current `saltpeter_config`.
    pub fn salt_settings(&self) -> crate::wire::link::SaltSettings {
        let sp = &self.config.saltpeter;
        crate::wire::link::SaltSettings {
            salt_bin: sp
                .salt_bin
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "salt".to_string()),
            config_dir: Some(sp.salt_config_dir.to_string_lossy().into_owned()),
            timeout_s: sp.ping_timeout_s,
            concurrency: sp.launch_concurrency,
        }
    }

    /// The wrapper binary for `job` on its targets.
    pub fn wrapper_path(&self, job: &config::Job) -> String {
        if let Some(path) = &job.wrapper_path {
            return path.clone();
        }
        if job.executor == config::Executor::Local
            && let Ok(exe) = std::env::current_exe()
            && let Some(dir) = exe.parent()
        {
            let sibling: PathBuf = dir.join("saltpeter-wrapper");
            if sibling.exists() {
                return sibling.to_string_lossy().into_owned();
            }
        }
        "/usr/local/bin/saltpeter-wrapper".to_string()
    }
}
