//! What main keeps of the Salt calls spread over several servers' masters (docs/ha.md,
//! "Several masters, one database"); `shell/delegate.rs` and `shell/serve_salt.rs` change
//! it, the pure rules are `rules/masters.rs`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::ipc::rpc::CallId;
use crate::wire::link::BlockingReply;
use crate::wire::records::RunId;

/// What main keeps of the exchange with the other servers.
#[derive(Default)]
pub(crate) struct Delegation {
    /// The other servers driving a master, alive, by name.
    pub(crate) peers: Vec<String>,
    /// Minions whose key this server's master accepted.
    pub(crate) own: HashSet<String>,
    /// Minion -> the other servers that published a key for it, by name.
    pub(crate) published: HashMap<String, Vec<String>>,
    /// Minion -> (server, key as PKCS#1 DER) of the other servers, for proofs.
    pub(crate) keys: HashMap<String, Vec<(String, Vec<u8>)>>,
    /// Where the last resolution found each minion live.
    pub(crate) reached: HashMap<String, String>,
    /// Composite calls in flight, by the caller's id.
    pub(crate) calls: HashMap<CallId, Composite>,
    /// This server's part of a composite: its blocking call id -> the composite.
    pub(crate) local_parts: HashMap<CallId, (CallId, usize)>,
    /// Another server's part, by its `salt_calls` row.
    pub(crate) remote_parts: HashMap<i64, RemotePart>,
    /// Calls this server makes for another: its blocking call id -> (row, asker).
    pub(crate) serving: HashMap<CallId, (i64, String)>,
}

/// One call spread over servers.
pub(crate) struct Composite {
    pub(crate) kind: Kind,
    /// Asked of every server (a target expression), not split by owner.
    pub(crate) broadcast: bool,
    pub(crate) parts: Vec<PartState>,
}

pub(crate) enum Kind {
    Resolve,
    Launch(Vec<RunId>),
    Deploy,
}

pub(crate) struct PartState {
    pub(crate) server: String,
    pub(crate) minions: Vec<String>,
    pub(crate) answer: Option<Result<BlockingReply, String>>,
}

pub(crate) struct RemotePart {
    pub(crate) call: CallId,
    pub(crate) index: usize,
    pub(crate) deadline: Instant,
    pub(crate) wait: Duration,
}

impl Delegation {
    /// The keys other servers published for `minion` (proofs, `minion_trust`).
    pub(crate) fn published_keys(&self, minion: &str) -> &[(String, Vec<u8>)] {
        self.keys.get(minion).map_or(&[], Vec::as_slice)
    }
}
