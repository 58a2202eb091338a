//! The state of wrappers: how main launches them, which build each minion has, refused
//! hellos (`launcher`, `fleet`, `welcome`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::logsafe::PerKey;
use crate::wire::records::Millis;

/// What main knows about launching wrappers.
#[derive(Default)]
pub(crate) struct Launcher {
    /// Measured salt launch latency, from a round's publish to its answer (one estimate
    /// for every salt job: their launches share publishes, so the jobs of a slot share
    /// one lead and one round). Until measured the lead is the cap.
    pub launch_latency: Option<Duration>,
    /// Measured target resolution before a launch (a ping round through a top master of
    /// syndics costs its `syndic_wait`; the master's own match, milliseconds): part of
    /// the lead, since a run is resolved before it joins its launch round.
    pub resolve_latency: Option<Duration>,
    /// Resolutions out: when each call went.
    pub resolving: std::collections::HashMap<crate::ipc::CallId, std::time::Instant>,
    /// `#sha256=HEX` of the hub's certificate, for wrappers to pin (`None`: `tls: false`).
    pub wrapper_pin: Option<String>,
    /// The master's pki directory, resolved once per `salt_config_dir` (the key).
    pub master_pki: Option<(PathBuf, PathBuf)>,
    /// The accepted minion keys, parsed once per file version.
    pub keys: crate::minion_key::KeyCache,
}

pub(crate) type Key = (String, String);

/// A deployment that did not put the build on a minion.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub why: String,
    /// The minion did not return (Salt's word): its launch may still reach it.
    pub silent: bool,
    pub(crate) at: Instant,
}

#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) sha256: String,
    pub(crate) seen: Millis,
    /// When this row was last written to db.
    pub(crate) stored: Option<Instant>,
}

/// Which build each minion has, and the deployments in flight.
#[derive(Default)]
pub(crate) struct Fleet {
    pub(crate) builds: HashMap<Key, Seen>,
    /// The rows are loaded from db (`load_call` is the load in flight).
    pub(crate) loaded: bool,
    pub(crate) load_call: Option<CallId>,
    /// SHA-256 of this build's wrapper, as published for the minions (`None`: not yet
    /// known; `hash_call` asks for it).
    pub(crate) this_build: Option<String>,
    pub(crate) hash_call: Option<CallId>,
    /// Why publishing this build's wrapper failed, and when (it is tried again for a run
    /// that starts waiting after that).
    pub(crate) hash_failed: Option<(String, Instant)>,
    /// Deployments in flight: the call, the path and its minions.
    pub(crate) deploying: HashMap<CallId, (String, Vec<String>)>,
    pub(crate) in_flight: HashSet<Key>,
    pub(crate) failed: HashMap<Key, Failure>,
    /// The stale minions of the fleet were sent their upgrade.
    pub(crate) upgraded: bool,
    /// Deployments started since this daemon started, per minion (for `wrapper status`).
    pub(crate) deployments: BTreeMap<String, u32>,
}

/// The refusal rate limit, per peer address.
#[derive(Debug)]
pub(crate) struct Refusals(pub(crate) PerKey<String>);
