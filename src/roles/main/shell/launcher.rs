//! How main launches wrappers: the URL and path they get, and the pre-staging lead that
//! follows the measured salt launch latency (which minions have which wrapper is
//! `fleet.rs`).

use std::time::Duration;

use std::path::PathBuf;

use crate::config;
use crate::roles::main::rules::scheduler;
use crate::roles::main::state::Main;

/// Whether `url` (from `servers`) names this server's own wrapper port.
fn is_own(url: &str, port: u16, authority: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '#']).next().unwrap_or(rest);
    host_port == authority || (port != 0 && host_port == format!("127.0.0.1:{port}"))
}

impl Main {
    /// URL the wrappers of `job` connect to (several, comma-separated, when `servers`
    /// lists other servers).
    pub(crate) fn wrapper_url(&self, job: &config::Job) -> String {
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

    /// How far ahead of its slot a run of `job` is launched: a salt job by twice its
    /// measured launch latency plus a second, within `prestage_cap`; a salt job not
    /// measured yet (the first slots after a start) by the cap itself, so even its first
    /// slot is on time. Local jobs start at their slot.
    pub(crate) fn prestage_lead(&self, job: &config::Job) -> chrono::Duration {
        self.leads().of(job)
    }

    /// The leads of every job, for the scheduler.
    pub(crate) fn leads(&self) -> scheduler::Leads {
        let cap = Duration::from_secs(self.config.saltpeter.prestage_cap_s);
        let to_chrono = |d: Duration| chrono::Duration::from_std(d).unwrap_or_default();
        let resolve = self.launcher.resolve_latency.unwrap_or_default();
        let lead = match self.launcher.launch_latency {
            Some(latency) => (latency * 2 + resolve + Duration::from_secs(1)).min(cap),
            None => cap,
        };
        scheduler::Leads {
            salt: to_chrono(lead),
            per_job: Default::default(),
        }
    }

    /// Fold one measured launch (a round's publish to the hello of its last wrapper,
    /// `rounds::Rounds::arrived`) into the estimate.
    pub(crate) fn record_launch_latency(&mut self, sample: Duration) {
        let estimate = self.launcher.launch_latency.get_or_insert(sample);
        // Up at once (a late start is what pre-staging is there to prevent), down slowly.
        *estimate = if sample > *estimate {
            sample
        } else {
            (*estimate * 3 + sample) / 4
        };
    }

    /// A resolution call went out (`resolve_targets`).
    pub(crate) fn resolution_sent(&mut self, id: crate::ipc::CallId) {
        self.launcher
            .resolving
            .insert(id, std::time::Instant::now());
    }

    /// A resolution call answered: fold its time into the estimate (up at once, down
    /// slowly, as the launch latency).
    pub(crate) fn resolution_answered(&mut self, id: crate::ipc::CallId) {
        let Some(sent) = self.launcher.resolving.remove(&id) else {
            return;
        };
        let sample = sent.elapsed();
        let estimate = self.launcher.resolve_latency.get_or_insert(sample);
        *estimate = if sample > *estimate {
            sample
        } else {
            (*estimate * 3 + sample) / 4
        };
    }

    /// How blocking calls salt, from the current `saltpeter_config`.
    pub(crate) fn salt_settings(&self) -> crate::wire::link::SaltSettings {
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
            bridge: sp.salt_bridge,
        }
    }

    /// The master's pki directory: `salt_pki_dir`, else what the master's configuration
    /// says (read once per `salt_config_dir`; a small file).
    fn master_pki_dir(&mut self) -> PathBuf {
        let sp = &self.config.saltpeter;
        if let Some(dir) = &sp.salt_pki_dir {
            return dir.clone();
        }
        match &self.launcher.master_pki {
            Some((config_dir, pki)) if *config_dir == sp.salt_config_dir => pki.clone(),
            _ => {
                let pki = crate::minion_key::master_pki_dir(&sp.salt_config_dir);
                log::info!(
                    "accepted minion keys are read from {}/minions",
                    pki.display()
                );
                self.launcher.master_pki = Some((sp.salt_config_dir.clone(), pki.clone()));
                pki
            }
        }
    }

    /// Check a wrapper's minion-key proof against the key the trusted masters accepted
    /// for `machine` (the own master's pki directory, then `salt_pki_dirs`: module
    /// `minion_trust`); `Err` says why it is refused (for the event and the rejection).
    pub(crate) fn check_minion_proof(
        &mut self,
        run: crate::wire::records::RunId,
        machine: &str,
        proof: &crate::wire::link::MinionProof,
    ) -> Result<(), String> {
        let own = self.master_pki_dir();
        let mut dirs = vec![own.as_path()];
        dirs.extend(
            self.config
                .saltpeter
                .salt_pki_dirs
                .iter()
                .map(PathBuf::as_path),
        );
        let proof = crate::minion_trust::Proof {
            challenge: &proof.challenge,
            run,
            minion: machine,
            signature: &proof.signature,
        };
        let published = self.delegation.published_keys(machine);
        crate::minion_trust::check_proof(&mut self.launcher.keys, &dirs, published, &proof)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The wrapper path of salt jobs that do not name their own.
    pub(crate) fn default_wrapper_path(&self) -> String {
        self.config
            .saltpeter
            .default_wrapper_path
            .clone()
            .unwrap_or_else(|| "/usr/local/bin/saltpeter-wrapper".to_string())
    }

    /// The wrapper binary for `job` on its targets.
    pub(crate) fn wrapper_path(&self, job: &config::Job) -> String {
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
        self.default_wrapper_path()
    }
}
