//! Deployments: what the minions of a launch need ([`Fleet::need`]), the one deployment
//! in flight per minion, its end, and the one upgrade of the stale minions.

use std::collections::BTreeMap;

use super::{Daemon, Failure, Fleet, Need, Now, launcher, operator_installs, operator_source};
use crate::config::{LoadedConfig, SaltpeterConfig};
use crate::ipc::rpc::Call;
use crate::roles::main::messages::{BlockingResult, Event, Message, Out};
use crate::wire::link::{BlockingRequest, blocking_calls};

impl Fleet {
    /// What `minions` need before a launch of the wrapper at `path`, and the one
    /// deployment they lack, to start. `since`: when the caller began waiting (older
    /// failures are tried again).
    pub(crate) fn need(
        &mut self,
        config: &LoadedConfig,
        minions: &[String],
        path: &str,
        since: std::time::Instant,
    ) -> (Need, Out) {
        if !self.loaded {
            return (Need::Wait, self.start(config));
        }
        let sp = &config.saltpeter;
        let mut out = Out::new();
        if operator_installs(sp) {
            return (Need::Ready, out);
        }
        let build = self.this_build.clone();
        if build.is_none() && !operator_source(sp) {
            if let Some((why, at)) = self.hash_failed.clone()
                && at >= since
            {
                let why = format!("this build's wrapper could not be published: {why}");
                let failure = Failure {
                    why,
                    silent: false,
                    at,
                };
                let failed = minions
                    .iter()
                    .map(|m| (m.clone(), failure.clone()))
                    .collect();
                return (Need::Failed(failed), out);
            }
            self.ask_hash(sp, &mut out);
            if self.hashing {
                return (Need::Wait, out);
            }
        }
        let mut wait = false;
        let mut failed = Vec::new();
        let mut deploy = Vec::new();
        for m in minions {
            let key = (m.clone(), path.to_string());
            let current = self.builds.get(&key).is_some_and(|s| match &build {
                Some(build) => s.sha256 == *build,
                None => true,
            });
            if current {
                continue;
            }
            if self.in_flight.contains(&key) {
                wait = true;
            } else if let Some(f) = self.failed.get(&key).filter(|f| f.at >= since) {
                failed.push((m.clone(), f.clone()));
            } else {
                deploy.push(m.clone());
            }
        }
        if !deploy.is_empty() {
            out.extend(self.deploy_to(sp, path, deploy));
            wait = true;
        }
        let need = match (wait, failed.is_empty()) {
            (true, _) => Need::Wait,
            (false, true) => Need::Ready,
            (false, false) => Need::Failed(failed),
        };
        (need, out)
    }

    /// One deployment to `minions` (none of them already in flight).
    fn deploy_to(&mut self, sp: &SaltpeterConfig, path: &str, minions: Vec<String>) -> Out {
        log::info!(
            "fleet: deploying the wrapper to {} at {path}",
            some_names(&minions)
        );
        for m in &minions {
            self.in_flight.insert((m.clone(), path.to_string()));
            *self.deployments.entry(m.clone()).or_insert(0) += 1;
        }
        self.deploying += 1;
        let mut out = Out::new();
        let req = BlockingRequest::Deploy {
            salt: launcher::salt_settings(sp),
            minions: minions.clone(),
            wrapper_path: path.to_string(),
            wrapper_source: sp.wrapper_source.clone(),
        };
        let path = path.to_string();
        out.blocking(req, move |result| Message::WrappersDeployed {
            path,
            minions,
            result,
        });
        out
    }

    /// A deployment of the wrapper at `path` to `minions` ended
    /// (`Message::WrappersDeployed`): record what it put where, or why not.
    pub(crate) fn deployed(
        &mut self,
        daemon: Daemon,
        path: String,
        minions: Vec<String>,
        result: BlockingResult,
        now: Now,
    ) -> Out {
        let reply = blocking_calls::Deploy::take(result).map_err(|e| e.to_string());
        if reply.is_err() && daemon.stopping {
            // Blocking went first in an ordered stop: its runs are recovered at the next
            // start, which deploys again; nothing failed here.
            return self.upgrade_stale(daemon);
        }
        let sp = daemon.sp;
        self.deploying = self.deploying.saturating_sub(1);
        for m in &minions {
            self.in_flight.remove(&(m.clone(), path.clone()));
        }
        let mut out = Out::new();
        match reply {
            Ok((outcomes, hash)) => {
                let hash = match operator_source(sp) {
                    true => String::new(), // the operator's build: its hello will say
                    false => hash,
                };
                if !hash.is_empty() {
                    self.this_build = Some(hash.clone());
                }
                for o in outcomes {
                    let key = (o.machine.clone(), path.clone());
                    match o.result {
                        Ok(()) => {
                            self.failed.remove(&key);
                            self.store(key, hash.clone(), now, &mut out);
                            out.event(Event {
                                kind: "wrapper_deployed",
                                job: None,
                                run: None,
                                machine: Some(o.machine),
                                message: format!("{path} (sha256 {hash})"),
                            });
                        }
                        Err(why) => {
                            log::warn!("fleet: deploying to {} failed: {why}", o.machine);
                            let silent = o.silent.is_some();
                            let at = now.at;
                            self.failed.insert(key, Failure { why, silent, at });
                        }
                    }
                }
            }
            Err(why) => {
                log::error!(
                    "fleet: the deployment to {} failed: {why}",
                    some_names(&minions)
                );
                for m in minions {
                    let failure = Failure {
                        why: why.clone(),
                        silent: false,
                        at: now.at,
                    };
                    self.failed.insert((m, path.clone()), failure);
                }
            }
        }
        out.extend(super::changed());
        out.extend(self.upgrade_stale(daemon));
        out
    }

    /// Once: every recorded minion whose build is not this one gets it now, one
    /// deployment per path (an upgrade reaches the fleet before the slots that need it).
    /// Tried whenever one of its conditions may have come true: the rows loaded, this
    /// build's hash known, start-up done (`recovering` over), a reload.
    pub(crate) fn upgrade_stale(&mut self, daemon: Daemon) -> Out {
        let mut out = Out::new();
        let sp = daemon.sp;
        if self.upgraded || !self.loaded || daemon.recovering || operator_installs(sp) {
            return out;
        }
        let Some(build) = self.this_build.clone() else {
            return out;
        };
        self.upgraded = true;
        let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for ((minion, path), seen) in &self.builds {
            let key = (minion.clone(), path.clone());
            if seen.sha256 != build && !self.in_flight.contains(&key) {
                by_path
                    .entry(path.clone())
                    .or_default()
                    .push(minion.clone());
            }
        }
        for (path, mut minions) in by_path {
            minions.sort();
            out.extend(self.deploy_to(sp, &path, minions));
        }
        out
    }
}

/// Minion names for a log line: the first few and how many more (a deployment to 10,000
/// minions is one line, not 90 KB).
pub(super) fn some_names(minions: &[String]) -> String {
    const SHOWN: usize = 5;
    let first = minions[..minions.len().min(SHOWN)].join(", ");
    match minions.len().saturating_sub(SHOWN) {
        0 => first,
        more => format!("{first} and {more} more"),
    }
}
