//! Several masters on one database (docs/ha.md, "Several masters, one database"): main's
//! Salt calls spread over the servers' masters. Servers on one PostgreSQL database each
//! drive their own salt-master; the leader drives every run as always, and only its Salt
//! calls are spread over the servers whose masters reach the minions:
//!
//! 1. `Main::blocking_call` asks [`Delegation::route`] first. With a shared database, a
//!    salt call and other servers alive (`salt_servers`, from db), the call becomes a
//!    *composite* under the caller's id: a `Resolve` of a job's target expression is
//!    asked of every server (this one through its own blocking); a `Launch`, a `Deploy`
//!    and a `Resolve` of a list are split by owner ([`rules`]). Otherwise the call goes to
//!    this server's blocking unchanged.
//! 2. Another server's part travels through the database: `SendSaltCall` writes a
//!    `salt_calls` row (the request in bincode; nothing secret: a launch carries the
//!    wrapper URL and run ids, never a token), its db takes it, its main makes the call
//!    through its own master ([`serve`]: with its own `SaltSettings`) and writes the
//!    reply; this server's db collects it ([`Delegation::replies`]).
//! 3. Each part's answer goes to its composite (`answers.rs`); once every part answered
//!    (or missed its deadline, [`Delegation::expire`]) the parts merge into one reply
//!    for the caller's id (`Message::SaltCallMerged`), handed over as for any blocking
//!    call.
//!
//! Nothing waits on a server that never answers: its part fails at its deadline (the
//! ping timeout and 15 s; twice the ping timeout for launches and deployments), named
//! in the log and in the reasons of its minions. Rows nobody finishes expire in db.
//!
//! [`Delegation`] is the part: what this server knows of the others (peers, minion keys,
//! where minions were last found live) and the composites in flight are private to it
//! and change only through its methods, which return what to do (`messages::Out`). This
//! server's name and whether the database is shared belong to `Ha` and are handed in.

mod answers;
pub(crate) mod rules;
pub(crate) mod serve;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::ipc::rpc::CallId;
use crate::roles::main::messages::{Message, Out, Then};
use crate::wire::db::{DbRequest, MinionKeys};
use crate::wire::link::{
    BlockingReply, BlockingRequest, ExecutorKind, LaunchTarget, SaltTargetType,
};
use crate::wire::records::RunId;

use rules::Owners;
use serve::kind_name;

/// Minions remembered from resolutions at most (a fleet's worth); past it the memory
/// starts again.
const MAX_REACHED: usize = 200_000;

/// What main keeps of the exchange with the other servers.
#[derive(Default)]
pub(crate) struct Delegation {
    /// The other servers driving a master, alive, by name.
    peers: Vec<String>,
    /// Minions whose key this server's master accepted.
    own: HashSet<String>,
    /// Minion -> the other servers that published a key for it, by name.
    published: HashMap<String, Vec<String>>,
    /// Minion -> (server, key as PKCS#1 DER) of the other servers, for proofs.
    keys: HashMap<String, Vec<(String, Vec<u8>)>>,
    /// Where the last resolution found each minion live.
    reached: HashMap<String, String>,
    /// Composite calls in flight, by the caller's id.
    calls: HashMap<CallId, Composite>,
    /// Another server's part, by its `salt_calls` row.
    remote_parts: HashMap<i64, RemotePart>,
}

/// One call spread over servers.
struct Composite {
    kind: Kind,
    /// Asked of every server (a target expression), not split by owner.
    broadcast: bool,
    parts: Vec<PartState>,
}

enum Kind {
    Resolve,
    Launch(Vec<RunId>),
    Deploy,
}

struct PartState {
    server: String,
    minions: Vec<String>,
    answer: Option<Result<BlockingReply, String>>,
}

struct RemotePart {
    call: CallId,
    index: usize,
    deadline: Instant,
    wait: Duration,
}

/// One part of a plan: the server, its request, its minions (empty: the whole
/// expression).
type Planned = (String, BlockingRequest, Vec<String>);

impl Delegation {
    /// The keys other servers published for `minion` (proofs, `minion_trust`).
    pub(crate) fn published_keys(&self, minion: &str) -> &[(String, Vec<u8>)] {
        self.keys.get(minion).map_or(&[], Vec::as_slice)
    }

    /// Step 1: where blocking call `id` goes. `None`: to this server's blocking,
    /// unchanged; else it is spread over servers, a composite under `id`, and what its
    /// parts ask for (this server's part through its own blocking, the others' rows in
    /// db). `me`: this server's name; `shared`: the database is shared with other
    /// servers; `ping_timeout_s`: from `saltpeter_config` (how long another server has to
    /// answer a launch or deployment).
    pub(crate) fn route(
        &mut self,
        id: CallId,
        req: &BlockingRequest,
        me: &str,
        shared: bool,
        ping_timeout_s: u64,
    ) -> Option<Out> {
        if !shared || self.peers.is_empty() {
            return None;
        }
        let plan: Option<Vec<Planned>> = match req {
            BlockingRequest::Resolve {
                target_type,
                target,
                ..
            } if *target_type != SaltTargetType::List => {
                let mut parts = vec![(me.to_string(), req.clone(), Vec::new())];
                for peer in &self.peers {
                    parts.push((peer.clone(), req.clone(), Vec::new()));
                }
                log::info!(
                    "resolving {target} through {me} and {}",
                    self.peers.join(", ")
                );
                Some(parts)
            }
            BlockingRequest::Resolve { target, .. } => {
                let minions: Vec<String> = target
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect();
                self.split(me, req, &minions)
            }
            BlockingRequest::Launch {
                executor: ExecutorKind::Salt,
                targets,
                ..
            } => {
                let minions: Vec<String> = targets.iter().map(|t| t.machine.clone()).collect();
                self.split(me, req, &minions)
            }
            BlockingRequest::Deploy { minions, .. } => self.split(me, req, minions),
            _ => None,
        };
        let plan = plan?;
        let kind = match req {
            BlockingRequest::Launch { runs, .. } => Kind::Launch(runs.clone()),
            BlockingRequest::Deploy { .. } => Kind::Deploy,
            _ => Kind::Resolve,
        };
        let broadcast = plan.iter().all(|(_, _, minions)| minions.is_empty());
        let wait = part_wait(req, ping_timeout_s);
        self.calls.insert(
            id,
            Composite {
                kind,
                broadcast,
                parts: plan
                    .iter()
                    .map(|(server, _, minions)| PartState {
                        server: server.clone(),
                        minions: minions.clone(),
                        answer: None,
                    })
                    .collect(),
            },
        );
        let mut out = Out::new();
        for (index, (server, part, minions)) in plan.into_iter().enumerate() {
            if server == me {
                out.local_blocking(part, move |result| Message::SaltPartAnswered {
                    call: id,
                    index,
                    result,
                });
            } else {
                if !minions.is_empty() {
                    log::info!(
                        "{} of {} minion(s) goes through {server}'s master",
                        kind_name(&part),
                        minions.len()
                    );
                }
                out.extend(self.send_part(me, id, index, &server, &part, wait));
            }
        }
        Some(out)
    }

    /// The call's minions by owner, one request per owner; `None` when every one is this
    /// server's (the call goes unchanged).
    fn split(&self, me: &str, req: &BlockingRequest, minions: &[String]) -> Option<Vec<Planned>> {
        let owners = Owners {
            me,
            own: &self.own,
            published: &self.published,
            peers: &self.peers,
            reached: &self.reached,
        };
        let parts = owners.split(minions);
        if parts.iter().all(|(server, _)| server == me) {
            return None;
        }
        Some(
            parts
                .into_iter()
                .map(|(server, minions)| {
                    let part = with_minions(req, &minions);
                    (server, part, minions)
                })
                .collect(),
        )
    }

    /// Step 2, asking: write the part's row; its id is where the answer will come from
    /// (`Message::SaltCallSent`, then [`Delegation::replies`]).
    fn send_part(
        &mut self,
        me: &str,
        call: CallId,
        index: usize,
        server: &str,
        req: &BlockingRequest,
        wait: Duration,
    ) -> Out {
        let request = match bincode::serialize(req) {
            Ok(bytes) => bytes,
            Err(e) => {
                return self.part_answered(
                    me,
                    call,
                    index,
                    Err(format!("could not encode the call: {e}")),
                );
            }
        };
        let mut out = Out::new();
        out.db(
            DbRequest::SendSaltCall {
                from: me.to_string(),
                to: server.to_string(),
                request,
            },
            Then::tell(move |result| Message::SaltCallSent {
                call,
                index,
                wait,
                result,
            }),
        );
        out
    }

    /// db's news of the other servers alive.
    pub(crate) fn peers(&mut self, peers: Vec<String>) {
        self.peers = peers;
    }

    /// db's news of the minion keys: this master's minions and the others' keys.
    pub(crate) fn keys(&mut self, keys: MinionKeys) {
        self.own = keys.own.into_iter().collect();
        self.published.clear();
        self.keys.clear();
        for (server, minion, key) in keys.others {
            self.published
                .entry(minion.clone())
                .or_default()
                .push(server.clone());
            self.keys.entry(minion).or_default().push((server, key));
        }
        log::info!(
            "minion keys: {} accepted by this server's master, {} published by other servers",
            self.own.len(),
            self.keys.len()
        );
    }
}

/// `req` for `minions` only.
fn with_minions(req: &BlockingRequest, minions: &[String]) -> BlockingRequest {
    let mut part = req.clone();
    match &mut part {
        BlockingRequest::Resolve { target, .. } => *target = minions.join(","),
        BlockingRequest::Launch { targets, .. } => {
            *targets = minions
                .iter()
                .map(|machine| LaunchTarget {
                    machine: machine.clone(),
                    token: None,
                })
                .collect();
        }
        BlockingRequest::Deploy { minions: m, .. } => *m = minions.to_vec(),
        _ => {}
    }
    part
}

/// How long another server has to answer its part.
fn part_wait(req: &BlockingRequest, ping_timeout_s: u64) -> Duration {
    let secs = match req {
        BlockingRequest::Resolve { salt, .. } => salt.timeout_s + 15,
        _ => (2 * ping_timeout_s + 15).min(110),
    };
    Duration::from_secs(secs)
}
