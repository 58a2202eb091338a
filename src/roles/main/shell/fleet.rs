//! The wrapper as fleet state (docs/salt.md, "Deployment"): which build of
//! `saltpeter-wrapper` each minion has, at which path.
//!
//! What main knows comes from db at start (it survives restarts and is shared by the
//! servers of one PostgreSQL database), from every vetted hello (the wrapper reports the
//! SHA-256 of its own executable) and from deployments. A minion whose recorded build is
//! missing or stale gets exactly one deployment in flight, which every run that needs it
//! waits for (`need`); once this build's hash is known, every recorded minion with an
//! older build is upgraded at once, ahead of the slots that need it.

use crate::roles::main::state::wrappers::{Failure, Fleet, Key, Seen};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::config::Executor;
use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError, Due};
use crate::roles::main::state::{DbWait, Main};
use crate::wire::db::{DbReply, DbRequest, WrapperSeen, calls};
use crate::wire::link::{BlockingRequest, WrapperBuild, blocking_calls};
use crate::wire::records::now_ms;
use crate::workflow::{WakeEvent, WakeKey};

/// A build seen again is written to db at most this often (its `seen` time).
const REFRESH_EVERY: Duration = Duration::from_secs(3600);
/// How long db may hold a build's record to commit it with others.
const RECORD_WITHIN_MS: i64 = 60_000;

/// What the minions of a batch need before their launch.
#[derive(Debug)]
pub(crate) enum Need {
    Ready,
    /// A deployment (or what it waits for) is in flight: wait for `WakeEvent::Fleet`.
    Wait,
    /// Deployments that ended without the build, since the caller started waiting.
    Failed(Vec<(String, Failure)>),
}

/// The operator serves the wrapper (`wrapper_source`): its hash is not this build's.
fn operator_source(core: &Main) -> bool {
    core.config.saltpeter.wrapper_source.is_some()
}

/// Whether deployment makes sense in this configuration.
pub(crate) fn applies(core: &Main) -> bool {
    core.config.saltpeter.executor == Executor::Salt
        || core
            .config
            .valid_jobs()
            .any(|j| j.executor == Executor::Salt)
}

/// The operator installs the wrapper (`wrapper_deploy: false`): the daemon neither
/// publishes, deploys nor upgrades it; a launch to a minion without it fails there.
fn operator_installs(core: &Main) -> bool {
    !core.config.saltpeter.wrapper_deploy
}

fn wake(core: &mut Main) {
    core.wake(WakeKey::event(WakeEvent::Fleet));
}

impl Fleet {
    /// The build recorded for `minion` at `path`.
    pub(crate) fn build_of(&self, minion: &str, path: &str) -> Option<&str> {
        self.builds
            .get(&(minion.to_string(), path.to_string()))
            .map(|s| s.sha256.as_str())
    }

    /// Something is in flight that will wake `WakeEvent::Fleet` waiters.
    pub(crate) fn busy(&self) -> bool {
        self.load_call.is_some() || self.hash_call.is_some() || !self.deploying.is_empty()
    }

    pub(crate) fn deployments_total(&self) -> u64 {
        self.deployments.values().map(|n| u64::from(*n)).sum()
    }

    pub(crate) fn this_build(&self) -> Option<&str> {
        self.this_build.as_deref()
    }

    /// Every minion with its build, for `saltpeterctl wrapper status`.
    pub(crate) fn status(&self) -> Vec<crate::wire::admin::MinionWrapper> {
        let mut rows: Vec<_> = self
            .builds
            .iter()
            .map(|((minion, path), seen)| crate::wire::admin::MinionWrapper {
                minion: minion.clone(),
                path: path.clone(),
                sha256: seen.sha256.clone(),
                seen: seen.seen,
                current: self.this_build.as_deref() == Some(seen.sha256.as_str()),
                deploying: self.in_flight.contains(&(minion.clone(), path.clone())),
                deployments: self.deployments.get(minion).copied().unwrap_or(0),
            })
            .collect();
        rows.sort_by(|a, b| (&a.minion, &a.path).cmp(&(&b.minion, &b.path)));
        rows
    }
}

/// Start-up (and adoption as leader): load the fleet from db; learn this build's hash.
pub(crate) fn start(core: &mut Main) {
    if core.fleet.load_call.is_none() && !core.fleet.loaded {
        let id = core.db_call(
            DbRequest::Wrappers,
            DbWait::then(|core, _, result| loaded(core, result)),
        );
        core.fleet.load_call = Some(id);
    }
    if applies(core) && !operator_installs(core) {
        ask_hash(core);
    }
}

/// Publish this build's wrapper for the minions and learn its hash (a deployment to no
/// minion: blocking's helper copies and hashes it off the loop). With `wrapper_source`
/// the operator serves the wrapper: any build a minion has is taken as current.
fn ask_hash(core: &mut Main) {
    if core.fleet.hash_call.is_some() || core.fleet.this_build.is_some() || operator_source(core) {
        return;
    }
    let id = core.blocking_call(BlockingRequest::Deploy {
        salt: core.salt_settings(),
        minions: Vec::new(),
        wrapper_path: core.default_wrapper_path(),
        wrapper_source: core.config.saltpeter.wrapper_source.clone(),
    });
    core.fleet.hash_call = Some(id);
}

/// db's answer to the load.
pub(crate) fn loaded(core: &mut Main, result: Result<DbReply, CallError>) {
    core.fleet.load_call = None;
    match calls::Wrappers::take(result) {
        Ok(rows) => {
            log::info!("fleet: {} minion wrapper(s) recorded", rows.len());
            for row in rows {
                let key = (row.minion, row.path);
                let newer = core
                    .fleet
                    .builds
                    .get(&key)
                    .is_none_or(|s| s.seen <= row.seen);
                if newer {
                    let seen = Seen {
                        sha256: row.sha256,
                        seen: row.seen,
                        stored: Some(Instant::now()),
                    };
                    core.fleet.builds.insert(key, seen);
                }
            }
        }
        // Without the rows every minion looks unknown: a deployment finds the wrappers
        // in place (Salt compares the hash) and costs one publish, nothing worse.
        Err(e) => log::warn!("fleet: could not load the minions' wrappers ({e})"),
    }
    core.fleet.loaded = true;
    wake(core);
}

/// A vetted hello from a minion-key wrapper reported its build.
pub(crate) fn hello(core: &mut Main, minion: &str, build: WrapperBuild) {
    let key = (minion.to_string(), build.path);
    let now = Instant::now();
    // The same build seen again is written back at most every `REFRESH_EVERY`.
    if let Some(s) = core.fleet.builds.get_mut(&key)
        && s.sha256 == build.sha256
        && s.stored.is_some_and(|t| now < t + REFRESH_EVERY)
    {
        s.seen = now_ms();
        return;
    }
    store(core, key, build.sha256);
}

/// `sha256` is on the minion at the key's path as of now: kept and written to db.
fn store(core: &mut Main, key: Key, sha256: String) {
    let seen = Seen {
        sha256,
        seen: now_ms(),
        stored: Some(Instant::now()),
    };
    record(core, &key, &seen);
    core.fleet.builds.insert(key, seen);
}

fn record(core: &mut Main, key: &Key, seen: &Seen) {
    // Fleet state that every hello refreshes: a build lost in a crash costs one
    // deployment check, so it rides along with the next commit within a minute.
    core.db_call_due(
        DbRequest::RecordWrappers(vec![WrapperSeen {
            minion: key.0.clone(),
            path: key.1.clone(),
            sha256: seen.sha256.clone(),
            seen: seen.seen,
        }]),
        DbWait::write("a minion's wrapper build"),
        Due::By(now_ms() + RECORD_WITHIN_MS),
    );
}

/// A launch found no wrapper at `path` on `minion`: deploy again next time.
pub(crate) fn missing(core: &mut Main, minion: &str, path: &str) {
    let key = (minion.to_string(), path.to_string());
    if core.fleet.builds.remove(&key).is_some() {
        core.db_call(
            DbRequest::ForgetWrapper {
                minion: key.0,
                path: key.1,
            },
            DbWait::write("a missing wrapper"),
        );
    }
}

/// What `minions` need before a launch of the wrapper at `path`; starts the one
/// deployment they lack. `since`: when the caller began waiting (older failures are
/// tried again).
pub(crate) fn need(core: &mut Main, minions: &[String], path: &str, since: Instant) -> Need {
    if !core.fleet.loaded {
        start(core);
        return Need::Wait;
    }
    if operator_installs(core) {
        return Need::Ready;
    }
    let build = core.fleet.this_build.clone();
    if build.is_none() && !operator_source(core) {
        if let Some((why, at)) = core.fleet.hash_failed.clone()
            && at >= since
        {
            let why = format!("this build's wrapper could not be published: {why}");
            let failure = Failure {
                why,
                silent: false,
                at,
            };
            return Need::Failed(
                minions
                    .iter()
                    .map(|m| (m.clone(), failure.clone()))
                    .collect(),
            );
        }
        ask_hash(core);
        if core.fleet.hash_call.is_some() {
            return Need::Wait;
        }
    }
    let mut wait = false;
    let mut failed = Vec::new();
    let mut deploy = Vec::new();
    for m in minions {
        let key = (m.clone(), path.to_string());
        let current = core.fleet.builds.get(&key).is_some_and(|s| match &build {
            Some(build) => s.sha256 == *build,
            None => true,
        });
        if current {
            continue;
        }
        if core.fleet.in_flight.contains(&key) {
            wait = true;
        } else if let Some(f) = core.fleet.failed.get(&key).filter(|f| f.at >= since) {
            failed.push((m.clone(), f.clone()));
        } else {
            deploy.push(m.clone());
        }
    }
    if !deploy.is_empty() {
        deploy_to(core, path, deploy);
        wait = true;
    }
    match (wait, failed.is_empty()) {
        (true, _) => Need::Wait,
        (false, true) => Need::Ready,
        (false, false) => Need::Failed(failed),
    }
}

/// Minion names for a log line: the first few and how many more (a deployment to 10,000
/// minions is one line, not 90 KB).
fn some_names(minions: &[String]) -> String {
    const SHOWN: usize = 5;
    let first = minions[..minions.len().min(SHOWN)].join(", ");
    match minions.len().saturating_sub(SHOWN) {
        0 => first,
        more => format!("{first} and {more} more"),
    }
}

/// One deployment to `minions` (none of them already in flight).
pub(crate) fn deploy_to(core: &mut Main, path: &str, minions: Vec<String>) {
    log::info!(
        "fleet: deploying the wrapper to {} at {path}",
        some_names(&minions)
    );
    let id = core.blocking_call(BlockingRequest::Deploy {
        salt: core.salt_settings(),
        minions: minions.clone(),
        wrapper_path: path.to_string(),
        wrapper_source: core.config.saltpeter.wrapper_source.clone(),
    });
    for m in &minions {
        core.fleet.in_flight.insert((m.clone(), path.to_string()));
        *core.fleet.deployments.entry(m.clone()).or_insert(0) += 1;
    }
    core.fleet.deploying.insert(id, (path.to_string(), minions));
}

/// The loop's pump: take the answers of the hash and the deployments; upgrade the stale
/// minions once the hash and the rows are known.
pub(crate) fn poll(core: &mut Main) {
    if let Some(id) = core.fleet.hash_call
        && let Some(reply) = core.take_blocking_reply::<blocking_calls::Deploy>(id)
    {
        core.fleet.hash_call = None;
        match reply {
            Ok((_, hash)) => {
                log::info!("fleet: this build's wrapper is sha256 {hash}");
                core.fleet.this_build = Some(hash);
                core.fleet.hash_failed = None;
            }
            Err(e) => {
                log::error!("fleet: could not publish this build's wrapper: {e}");
                core.fleet.hash_failed = Some((e.to_string(), Instant::now()));
            }
        }
        wake(core);
    }
    let done: Vec<CallId> = core.fleet.deploying.keys().copied().collect();
    for id in done {
        if let Some(reply) = core.take_blocking_reply::<blocking_calls::Deploy>(id) {
            if reply.is_err() && core.flight.stopping {
                // Blocking went first in an ordered stop: its runs are recovered at the
                // next start, which deploys again; nothing failed here.
                continue;
            }
            deployed(core, id, reply.map_err(|e| e.to_string()));
        }
    }
    upgrade_stale(core);
}

type DeployReply = Result<(Vec<crate::wire::link::MinionOutcome>, String), String>;

fn deployed(core: &mut Main, id: CallId, reply: DeployReply) {
    let Some((path, minions)) = core.fleet.deploying.remove(&id) else {
        return;
    };
    for m in &minions {
        core.fleet.in_flight.remove(&(m.clone(), path.clone()));
    }
    let at = Instant::now();
    match reply {
        Ok((outcomes, hash)) => {
            let hash = match operator_source(core) {
                true => String::new(), // the operator's build: its hello will say
                false => hash,
            };
            if !hash.is_empty() {
                core.fleet.this_build = Some(hash.clone());
            }
            for o in outcomes {
                let key = (o.machine.clone(), path.clone());
                match o.result {
                    Ok(()) => {
                        core.fleet.failed.remove(&key);
                        store(core, key, hash.clone());
                        core.event(
                            "wrapper_deployed",
                            None,
                            None,
                            Some(&o.machine),
                            format!("{path} (sha256 {hash})"),
                        );
                    }
                    Err(why) => {
                        log::warn!("fleet: deploying to {} failed: {why}", o.machine);
                        let silent = o.silent.is_some();
                        core.fleet.failed.insert(key, Failure { why, silent, at });
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
                    at,
                };
                core.fleet.failed.insert((m, path.clone()), failure);
            }
        }
    }
    wake(core);
}

/// Once: every recorded minion whose build is not this one gets it now, one deployment
/// per path (an upgrade reaches the fleet before the slots that need it).
fn upgrade_stale(core: &mut Main) {
    if core.fleet.upgraded
        || !core.fleet.loaded
        || core.flight.recovering
        || operator_installs(core)
    {
        return;
    }
    let Some(build) = core.fleet.this_build.clone() else {
        return;
    };
    core.fleet.upgraded = true;
    let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((minion, path), seen) in &core.fleet.builds {
        let key = (minion.clone(), path.clone());
        if seen.sha256 != build && !core.fleet.in_flight.contains(&key) {
            by_path
                .entry(path.clone())
                .or_default()
                .push(minion.clone());
        }
    }
    for (path, mut minions) in by_path {
        minions.sort();
        deploy_to(core, &path, minions);
    }
}

/// `saltpeterctl wrapper deploy`: what a deployment on demand put where.
pub(crate) fn deployed_on_demand(core: &mut Main, minion: &str, path: &str, hash: &str) {
    store(
        core,
        (minion.to_string(), path.to_string()),
        hash.to_string(),
    );
    if !operator_source(core) {
        core.fleet.this_build = Some(hash.to_string());
    }
}
