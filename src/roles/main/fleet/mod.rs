//! The fleet (docs/salt.md, "Deployment"): which build of `saltpeter-wrapper` each minion
//! has, at which path, and the deployments that put this build where it is missing or
//! stale; beside it, how main launches wrappers (`launcher.rs`).
//!
//! What main knows comes from db at start (it survives restarts and is shared by the
//! servers of one PostgreSQL database), from every vetted hello (the wrapper reports the
//! SHA-256 of its own executable) and from deployments. A minion whose recorded build is
//! missing or stale gets exactly one deployment in flight, which every run that needs it
//! waits for ([`Fleet::need`]); once this build's hash is known, every recorded minion
//! with an older build is upgraded at once, ahead of the slots that need it.
//!
//! [`Fleet`] is the part: its state is private and changes only through its methods,
//! which return what to do (`messages::Out`). The configuration and where the daemon is
//! in its life ([`Daemon`]) are handed in by whoever asks; time is an input ([`Now`]).
//! Outline:
//! 1. [`Fleet::start`] (start-up, adoption as leader): load the recorded builds from db
//!    (`Message::FleetLoaded`) and have blocking publish this build's wrapper and hash it
//!    (`Message::WrapperHashed`).
//! 2. [`Fleet::hello`] and [`Fleet::missing`]: what wrappers and launches say of a
//!    minion's build, kept and written to db.
//! 3. [`Fleet::need`] (a run's `deploy_wrappers` step): ready, wait, or failed; starts the
//!    one deployment its minions lack (`deploy.rs`, `Message::WrappersDeployed`).
//! 4. Every change a run may wait for posts `Message::FleetChanged`, which wakes
//!    `WakeEvent::Fleet`; the one upgrade of the stale minions is tried after every such
//!    change, at the end of start-up (`Message::StartupDone`) and after a reload
//!    (`Message::ConfigReloaded`): whichever makes its conditions true.
//! 5. `saltpeterctl wrapper deploy` (`on_demand.rs`) and `wrapper status` ([`Fleet::status`]).

mod deploy;
pub(crate) mod launcher;
pub(crate) mod on_demand;
pub(crate) mod plugin_builds;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::config::{Executor, LoadedConfig, SaltpeterConfig};
use crate::ipc::rpc::{Call, Due};
use crate::roles::main::messages::{BlockingResult, DbResult, Message, Out, Then};
use crate::wire::admin::MinionWrapper;
use crate::wire::db::{DbRequest, WrapperSeen, calls};
use crate::wire::link::{BlockingRequest, WrapperBuild, blocking_calls};
use crate::wire::records::{Millis, now_ms};

pub(crate) use launcher::Launcher;

/// A build seen again is written to db at most this often (its `seen` time).
const REFRESH_EVERY: Duration = Duration::from_secs(3600);
/// How long db may hold a build's record to commit it with others.
const RECORD_WITHIN_MS: i64 = 60_000;

/// A minion and the path of the wrapper on it.
type Key = (String, String);

/// When a fleet event happens: the loop's clock (how old a record or a failure is) and
/// the wall clock (the `seen` time db keeps).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub at: Instant,
    pub wall: Millis,
}

impl Now {
    /// The time now.
    pub(crate) fn read() -> Now {
        Now {
            at: Instant::now(),
            wall: now_ms(),
        }
    }
}

/// The daemon around the fleet, as each event finds it: the settings in effect and where
/// the daemon is in its life.
#[derive(Clone, Copy)]
pub(crate) struct Daemon<'a> {
    pub sp: &'a SaltpeterConfig,
    /// The runs in flight are being restored (start-up): the upgrade waits.
    pub recovering: bool,
    /// An ordered stop began: a deployment lost with blocking failed nothing.
    pub stopping: bool,
}

/// What the minions of a batch need before their launch ([`Fleet::need`]).
#[derive(Debug)]
pub(crate) enum Need {
    Ready,
    /// A deployment (or what it waits for) is in flight: wait for `WakeEvent::Fleet`.
    Wait,
    /// Deployments that ended without the build, since the caller started waiting.
    Failed(Vec<(String, Failure)>),
}

/// A deployment that did not put the build on a minion.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub why: String,
    /// The minion did not return (Salt's word): its launch may still reach it.
    pub silent: bool,
    at: Instant,
}

/// A build recorded for a minion.
#[derive(Debug, Clone)]
struct Seen {
    sha256: String,
    seen: Millis,
    /// When this row was last written to db.
    stored: Option<Instant>,
}

/// Which build each minion has, and the deployments in flight.
#[derive(Default)]
pub(crate) struct Fleet {
    builds: HashMap<Key, Seen>,
    /// The rows are loaded from db (`loading`: the load is in flight).
    loaded: bool,
    loading: bool,
    /// SHA-256 of this build's wrapper, as published for the minions (`None`: not yet
    /// known; `hashing`: blocking is asked for it).
    this_build: Option<String>,
    hashing: bool,
    /// Why publishing this build's wrapper failed, and when (it is tried again for a run
    /// that starts waiting after that).
    hash_failed: Option<(String, Instant)>,
    /// Deployments in flight (their minions are in `in_flight`).
    deploying: usize,
    in_flight: HashSet<Key>,
    failed: HashMap<Key, Failure>,
    /// The stale minions of the fleet were sent their upgrade.
    upgraded: bool,
    /// Deployments started since this daemon started, per minion (for `wrapper status`).
    deployments: BTreeMap<String, u32>,
    /// The machines of executor plugins known to have this build.
    plugins: plugin_builds::PluginBuilds,
}

/// Whether deployment makes sense in this configuration.
pub(crate) fn applies(config: &LoadedConfig) -> bool {
    config.saltpeter.executor == Executor::Salt
        || config.valid_jobs().any(|j| j.executor == Executor::Salt)
}

/// The operator serves the wrapper (`wrapper_source`): its hash is not this build's.
fn operator_source(sp: &SaltpeterConfig) -> bool {
    sp.wrapper_source.is_some()
}

/// The operator installs the wrapper (`wrapper_deploy: false`): the daemon neither
/// publishes, deploys nor upgrades it; a launch to a minion without it fails there.
fn operator_installs(sp: &SaltpeterConfig) -> bool {
    !sp.wrapper_deploy
}

impl Fleet {
    /// The machines of executor plugins and their builds.
    pub(crate) fn plugin_builds(&mut self) -> &mut plugin_builds::PluginBuilds {
        &mut self.plugins
    }

    /// The build recorded for `minion` at `path`.
    pub(crate) fn build_of(&self, minion: &str, path: &str) -> Option<&str> {
        self.builds
            .get(&(minion.to_string(), path.to_string()))
            .map(|s| s.sha256.as_str())
    }

    /// Something is in flight that will wake `WakeEvent::Fleet` waiters.
    pub(crate) fn busy(&self) -> bool {
        self.loading || self.hashing || self.deploying > 0
    }

    pub(crate) fn deployments_total(&self) -> u64 {
        self.deployments.values().map(|n| u64::from(*n)).sum()
    }

    pub(crate) fn this_build(&self) -> Option<&str> {
        self.this_build.as_deref()
    }

    /// Every minion with its build, for `saltpeterctl wrapper status`.
    pub(crate) fn status(&self) -> Vec<MinionWrapper> {
        let mut rows: Vec<_> = self
            .builds
            .iter()
            .map(|((minion, path), seen)| MinionWrapper {
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

    /// Start-up (and adoption as leader): load the fleet from db; learn this build's hash.
    pub(crate) fn start(&mut self, config: &LoadedConfig) -> Out {
        let mut out = Out::new();
        if !self.loading && !self.loaded {
            out.db(
                DbRequest::Wrappers,
                Then::tell(|result| Message::FleetLoaded { result }),
            );
            self.loading = true;
        }
        if applies(config) && !operator_installs(&config.saltpeter) {
            self.ask_hash(&config.saltpeter, &mut out);
        }
        out
    }

    /// Publish this build's wrapper for the minions and learn its hash (a deployment to no
    /// minion: blocking's helper copies and hashes it off the loop). With `wrapper_source`
    /// the operator serves the wrapper: any build a minion has is taken as current.
    fn ask_hash(&mut self, sp: &SaltpeterConfig, out: &mut Out) {
        if self.hashing || self.this_build.is_some() || operator_source(sp) {
            return;
        }
        out.blocking(
            BlockingRequest::Deploy {
                salt: launcher::salt_settings(sp),
                minions: Vec::new(),
                wrapper_path: launcher::default_wrapper_path(sp),
                wrapper_source: sp.wrapper_source.clone(),
            },
            |result| Message::WrapperHashed { result },
        );
        self.hashing = true;
    }

    /// db's answer to the load (`Message::FleetLoaded`).
    pub(crate) fn loaded(&mut self, daemon: Daemon, result: DbResult, now: Now) -> Out {
        self.loading = false;
        match calls::Wrappers::take(result) {
            Ok(rows) => {
                log::info!("fleet: {} minion wrapper(s) recorded", rows.len());
                for row in rows {
                    let key = (row.minion, row.path);
                    let newer = self.builds.get(&key).is_none_or(|s| s.seen <= row.seen);
                    if newer {
                        let seen = Seen {
                            sha256: row.sha256,
                            seen: row.seen,
                            stored: Some(now.at),
                        };
                        self.builds.insert(key, seen);
                    }
                }
            }
            // Without the rows every minion looks unknown: a deployment finds the wrappers
            // in place (Salt compares the hash) and costs one publish, nothing worse.
            Err(e) => log::warn!("fleet: could not load the minions' wrappers ({e})"),
        }
        self.loaded = true;
        let mut out = changed();
        out.extend(self.upgrade_stale(daemon));
        out
    }

    /// Blocking's answer to the publication of this build's wrapper
    /// (`Message::WrapperHashed`).
    pub(crate) fn hashed(&mut self, daemon: Daemon, result: BlockingResult, now: Now) -> Out {
        self.hashing = false;
        match blocking_calls::Deploy::take(result) {
            Ok((_, hash)) => {
                log::info!("fleet: this build's wrapper is sha256 {hash}");
                self.this_build = Some(hash);
                self.hash_failed = None;
            }
            Err(e) => {
                log::error!("fleet: could not publish this build's wrapper: {e}");
                self.hash_failed = Some((e.to_string(), now.at));
            }
        }
        let mut out = changed();
        out.extend(self.upgrade_stale(daemon));
        out
    }

    /// A vetted hello from a minion-key wrapper reported its build.
    pub(crate) fn hello(&mut self, minion: &str, build: WrapperBuild, now: Now) -> Out {
        let key = (minion.to_string(), build.path);
        // The same build seen again is written back at most every `REFRESH_EVERY`.
        if let Some(s) = self.builds.get_mut(&key)
            && s.sha256 == build.sha256
            && s.stored.is_some_and(|t| now.at < t + REFRESH_EVERY)
        {
            s.seen = now.wall;
            return Out::new();
        }
        let mut out = Out::new();
        self.store(key, build.sha256, now, &mut out);
        out
    }

    /// `sha256` is on the minion at the key's path as of now: kept and written to db.
    fn store(&mut self, key: Key, sha256: String, now: Now, out: &mut Out) {
        let seen = Seen {
            sha256,
            seen: now.wall,
            stored: Some(now.at),
        };
        // Fleet state that every hello refreshes: a build lost in a crash costs one
        // deployment check, so it rides along with the next commit within a minute.
        out.db_due(
            DbRequest::RecordWrappers(vec![WrapperSeen {
                minion: key.0.clone(),
                path: key.1.clone(),
                sha256: seen.sha256.clone(),
                seen: seen.seen,
            }]),
            Then::Write("a minion's wrapper build"),
            Due::By(now.wall + RECORD_WITHIN_MS),
        );
        self.builds.insert(key, seen);
    }

    /// A launch found no wrapper at `path` on `minion`: deploy again next time.
    pub(crate) fn missing(&mut self, minion: &str, path: &str) -> Out {
        let mut out = Out::new();
        let key = (minion.to_string(), path.to_string());
        if self.builds.remove(&key).is_some() {
            out.db(
                DbRequest::ForgetWrapper {
                    minion: key.0,
                    path: key.1,
                },
                Then::Write("a missing wrapper"),
            );
        }
        out
    }
}

/// The fleet changed: the runs waiting for it look again.
fn changed() -> Out {
    let mut out = Out::new();
    out.post(Message::FleetChanged);
    out
}
