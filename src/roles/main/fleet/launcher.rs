//! How main launches wrappers: the URL and path they get, how blocking calls salt, the
//! pre-staging lead that follows the measured salt launch latency, and the minion keys
//! the trusted masters accepted (which minions have which wrapper is the fleet,
//! `mod.rs`).
//!
//! [`Launcher`] keeps what is measured or cached; everything else follows from the
//! configuration, handed in by whoever asks (`shell/launcher.rs` does it for the other
//! parts).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::{self, SaltpeterConfig};
use crate::ipc::CallId;
use crate::minion_key::KeyCache;
use crate::roles::main::rules::scheduler;
use crate::wire::link::{MinionProof, SaltSettings};
use crate::wire::records::RunId;

/// What main measures and caches about launching wrappers.
#[derive(Default)]
pub(crate) struct Launcher {
    /// Measured salt launch latency, from a round's publish to its answer (one estimate
    /// for every salt job: their launches share publishes, so the jobs of a slot share
    /// one lead and one round). Until measured the lead is the cap.
    launch_latency: Option<Duration>,
    /// Measured target resolution before a launch (a ping round through a top master of
    /// syndics costs its `syndic_wait`; the master's own match, milliseconds): part of
    /// the lead, since a run is resolved before it joins its launch round.
    resolve_latency: Option<Duration>,
    /// Resolutions out: when each call went.
    resolving: HashMap<CallId, Instant>,
    /// `#sha256=HEX` of the hub's certificate, for wrappers to pin (`None`: `tls: false`).
    wrapper_pin: Option<String>,
    /// The master's pki directory, resolved once per `salt_config_dir` (the key).
    master_pki: Option<(PathBuf, PathBuf)>,
    /// The accepted minion keys, parsed once per file version.
    keys: KeyCache,
}

/// Whether `url` (from `servers`) names this server's own wrapper port.
fn is_own(url: &str, port: u16, authority: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '#']).next().unwrap_or(rest);
    host_port == authority || (port != 0 && host_port == format!("127.0.0.1:{port}"))
}

/// Fold `sample` into `estimate`: up at once (a late start is what pre-staging is there
/// to prevent), down slowly.
fn fold(estimate: &mut Option<Duration>, sample: Duration) {
    let estimate = estimate.get_or_insert(sample);
    *estimate = if sample > *estimate {
        sample
    } else {
        (*estimate * 3 + sample) / 4
    };
}

impl Launcher {
    /// A launcher whose wrappers pin the hub's certificate by `wrapper_pin`.
    pub(crate) fn new(wrapper_pin: Option<String>) -> Launcher {
        Launcher {
            wrapper_pin,
            ..Default::default()
        }
    }

    /// URL the wrappers of `job` connect to (several, comma-separated, when `servers`
    /// lists other servers); `wrapper_port`: this server's.
    pub(crate) fn wrapper_url(
        &self,
        sp: &SaltpeterConfig,
        wrapper_port: u16,
        job: &config::Job,
    ) -> String {
        let host = job
            .server_host
            .clone()
            .or_else(|| sp.default_saltpeter_server_host.clone())
            .unwrap_or_else(|| match job.executor {
                config::Executor::Local => "127.0.0.1".to_string(),
                config::Executor::Salt | config::Executor::Plugin(_) => nix::unistd::gethostname()
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
            format!("{host}:{wrapper_port}")
        };
        let own = match &self.wrapper_pin {
            Some(pin) => format!(
                "wss://{authority}{}{pin}",
                crate::wire::wrapper::WRAPPER_PATH
            ),
            None => format!("ws://{authority}{}", crate::wire::wrapper::WRAPPER_PATH),
        };
        // Several servers sharing the database (docs/ha.md): this one first, then the
        // others, so a wrapper reaches whichever leads when this one is gone.
        let mut urls = vec![own];
        for other in &sp.servers {
            let same = |u: &String| u.trim_end_matches('/') == other.trim_end_matches('/');
            if !urls.iter().any(same) && !is_own(other, wrapper_port, &authority) {
                urls.push(other.clone());
            }
        }
        urls.join(",")
    }

    /// The leads of every job, for the scheduler: a salt job is launched ahead of its
    /// slot by twice its measured launch latency plus the resolution and a second,
    /// within `prestage_cap`; a salt job not measured yet (the first slots after a
    /// start) by the cap itself, so even its first slot is on time. Local jobs start at
    /// their slot.
    pub(crate) fn leads(&self, sp: &SaltpeterConfig) -> scheduler::Leads {
        let cap = Duration::from_secs(sp.prestage_cap_s);
        let to_chrono = |d: Duration| chrono::Duration::from_std(d).unwrap_or_default();
        let resolve = self.resolve_latency.unwrap_or_default();
        let lead = match self.launch_latency {
            Some(latency) => (latency * 2 + resolve + Duration::from_secs(1)).min(cap),
            None => cap,
        };
        scheduler::Leads {
            salt: to_chrono(lead),
            per_job: Default::default(),
            plugin: to_chrono(PLUGIN_LEAD.min(cap)),
        }
    }

    /// Fold one measured launch (a round's publish to the hello of its last wrapper,
    /// `rounds::Rounds::arrived`) into the estimate.
    pub(crate) fn record_launch_latency(&mut self, sample: Duration) {
        fold(&mut self.launch_latency, sample);
    }

    /// A resolution call went out at `now` (`resolve_targets`).
    pub(crate) fn resolution_sent(&mut self, id: CallId, now: Instant) {
        self.resolving.insert(id, now);
    }

    /// A resolution call answered at `now`: fold its time into the estimate (up at once,
    /// down slowly, as the launch latency).
    pub(crate) fn resolution_answered(&mut self, id: CallId, now: Instant) {
        let Some(sent) = self.resolving.remove(&id) else {
            return;
        };
        fold(
            &mut self.resolve_latency,
            now.saturating_duration_since(sent),
        );
    }

    /// The master's pki directory: `salt_pki_dir`, else what the master's configuration
    /// says (read once per `salt_config_dir`; a small file).
    fn master_pki_dir(&mut self, sp: &SaltpeterConfig) -> PathBuf {
        if let Some(dir) = &sp.salt_pki_dir {
            return dir.clone();
        }
        match &self.master_pki {
            Some((config_dir, pki)) if *config_dir == sp.salt_config_dir => pki.clone(),
            _ => {
                let pki = crate::minion_key::master_pki_dir(&sp.salt_config_dir);
                log::info!(
                    "accepted minion keys are read from {}/minions",
                    pki.display()
                );
                self.master_pki = Some((sp.salt_config_dir.clone(), pki.clone()));
                pki
            }
        }
    }

    /// Check a wrapper's minion-key proof against the key the trusted masters accepted
    /// for `machine` (the own master's pki directory, then `salt_pki_dirs`: module
    /// `minion_trust`), or the keys other servers' masters `published` for it; `Err`
    /// says why it is refused (for the event and the rejection).
    pub(crate) fn check_minion_proof(
        &mut self,
        sp: &SaltpeterConfig,
        published: &[(String, Vec<u8>)],
        run: RunId,
        machine: &str,
        proof: &MinionProof,
    ) -> Result<(), String> {
        let own = self.master_pki_dir(sp);
        let mut dirs = vec![own.as_path()];
        dirs.extend(sp.salt_pki_dirs.iter().map(PathBuf::as_path));
        let proof = crate::minion_trust::Proof {
            challenge: &proof.challenge,
            run,
            minion: machine,
            signature: &proof.signature,
        };
        crate::minion_trust::check_proof(&mut self.keys, &dirs, published, &proof)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// How far ahead of its slot a job of an executor plugin is launched (within
/// `prestage_cap`): its wrappers connect and wait for `go`, so an executor that takes a
/// few hundred milliseconds per host (an SSH connection) still starts the command at the
/// slot.
pub(crate) const PLUGIN_LEAD: Duration = Duration::from_secs(10);

/// How blocking calls salt, from the current `saltpeter_config`.
pub(crate) fn salt_settings(sp: &SaltpeterConfig) -> SaltSettings {
    SaltSettings {
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

/// The wrapper path of salt jobs that do not name their own.
pub(crate) fn default_wrapper_path(sp: &SaltpeterConfig) -> String {
    sp.default_wrapper_path
        .clone()
        .unwrap_or_else(|| "/usr/local/bin/saltpeter-wrapper".to_string())
}

/// The wrapper binary for `job` on its targets.
pub(crate) fn wrapper_path(sp: &SaltpeterConfig, job: &config::Job) -> String {
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
    default_wrapper_path(sp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> config::LoadedConfig {
        let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n";
        crate::config::check_yaml(yaml, chrono::Utc::now())
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_lead_is_the_cap_until_launches_are_measured() {
        let config = config();
        let mut sp = config.saltpeter.clone();
        sp.prestage_cap_s = 30;
        let mut launcher = Launcher::new(None);
        let secs = |l: &Launcher, sp| l.leads(sp).salt.num_milliseconds();
        assert_eq!(secs(&launcher, &sp), 30_000);
        launcher.record_launch_latency(Duration::from_secs(2));
        assert_eq!(
            secs(&launcher, &sp),
            5_000,
            "twice the latency and a second"
        );
        // Down slowly, up at once.
        launcher.record_launch_latency(Duration::from_secs(1));
        assert_eq!(secs(&launcher, &sp), 4_500);
        launcher.record_launch_latency(Duration::from_secs(20));
        assert_eq!(secs(&launcher, &sp), 30_000, "within the cap");
    }

    #[test]
    fn the_resolution_is_part_of_the_lead() {
        let config = config();
        let mut sp = config.saltpeter.clone();
        sp.prestage_cap_s = 30;
        let base = Instant::now();
        let mut launcher = Launcher::new(None);
        launcher.record_launch_latency(Duration::from_secs(1));
        launcher.resolution_sent(9, base);
        launcher.resolution_answered(9, base + Duration::from_secs(2));
        launcher.resolution_answered(9, base + Duration::from_secs(9));
        assert_eq!(launcher.leads(&sp).salt.num_milliseconds(), 5_000);
    }

    #[test]
    fn the_wrapper_url_names_this_server_first_then_the_others() {
        let yaml = "j:\n  schedule: '* * * * *'\n  command: 'true'\n  targets: a\n  \
                    saltpeter_server_host: sp.example\n";
        let config = crate::config::check_yaml(yaml, chrono::Utc::now());
        let Some(job) = config.valid_jobs().next() else {
            panic!("no job: {:?}", config.diagnostics)
        };
        let mut sp = config.saltpeter.clone();
        sp.servers = names(&[
            "wss://sp.example:4506/",
            "wss://127.0.0.1:4506",
            "wss://other.example:4506",
        ]);
        let path = crate::wire::wrapper::WRAPPER_PATH;
        let plain = Launcher::new(None);
        assert_eq!(
            plain.wrapper_url(&sp, 4506, job),
            format!("ws://sp.example:4506{path},wss://other.example:4506")
        );
        let pinned = Launcher::new(Some("#sha256=ab".to_string()));
        assert_eq!(
            pinned.wrapper_url(&sp, 4506, job),
            format!("wss://sp.example:4506{path}#sha256=ab,wss://other.example:4506")
        );
    }
}
