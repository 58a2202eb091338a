//! Several masters on one database, the pure part (docs/ha.md, "Several masters, one
//! database"): which server's master makes a Salt call for a minion, and how the
//! answers of several servers become the one answer the caller waits for. The part that
//! sends and collects the parts is `Delegation` (`mod.rs`, `answers.rs`).
//!
//! 1. **Owner** of a minion ([`Owners::owner_of`]): the server the last resolution found
//!    it live on (this server if it was one of them), else this server if its own
//!    master accepted the key, else the first other server alive, by name, whose
//!    published keys hold it, else this server (whose master then answers for it).
//! 2. **Split** ([`Owners::split`]): the minions of a call, by owner, this server's part
//!    first.
//! 3. **Merge** of resolutions ([`merge_resolutions`]): live is the union (a minion
//!    live on several goes to this server if it is one of them, else to the first by
//!    name); unreachable is what was matched but is live nowhere; `no_match` only if
//!    every server said so; `from_cache` only if every answer was. A part that failed
//!    adds nothing, except in a split call, where its own minions become unreachable
//!    with its reason.
//! 4. Launch and deploy answers are concatenated ([`merge_launches`],
//!    [`merge_deploys`]), each outcome tagged with the server that made it; a part that
//!    failed fails its own minions, naming the server.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::wire::link::{MinionOutcome, Resolution};
use crate::wire::records::RunId;

/// What decides a minion's owner.
pub(crate) struct Owners<'a> {
    pub me: &'a str,
    /// Minions whose key this server's own master accepted.
    pub own: &'a HashSet<String>,
    /// Minion -> the other servers (by name) that published a key for it.
    pub published: &'a HashMap<String, Vec<String>>,
    /// The other servers alive, by name.
    pub peers: &'a [String],
    /// Where the last resolution found each minion live.
    pub reached: &'a HashMap<String, String>,
}

impl Owners<'_> {
    /// The server that makes the call for `minion` (step 1).
    pub(crate) fn owner_of<'s>(&'s self, minion: &str) -> &'s str {
        let alive = |server: &str| self.peers.iter().any(|p| p == server);
        if let Some(server) = self.reached.get(minion)
            && (server == self.me || alive(server))
        {
            return server;
        }
        if self.own.contains(minion) {
            return self.me;
        }
        self.published
            .get(minion)
            .and_then(|servers| servers.iter().find(|s| alive(s)))
            .map_or(self.me, String::as_str)
    }

    /// `minions` by owner, this server's part first, then the others by name (step 2).
    pub(crate) fn split(&self, minions: &[String]) -> Vec<(String, Vec<String>)> {
        let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for minion in minions {
            by_owner
                .entry(self.owner_of(minion))
                .or_default()
                .push(minion.clone());
        }
        let mut parts = Vec::with_capacity(by_owner.len());
        if let Some(mine) = by_owner.remove(self.me) {
            parts.push((self.me.to_string(), mine));
        }
        parts.extend(by_owner.into_iter().map(|(s, m)| (s.to_string(), m)));
        parts
    }
}

/// One server's answer to its part of a call: its name, the minions it was asked
/// about (empty when it was asked the whole expression), and what it said.
pub(crate) struct Part<T> {
    pub server: String,
    pub minions: Vec<String>,
    pub answer: Result<T, String>,
}

/// The merged resolution, and where each live minion goes (step 3). `Err` when every
/// part failed.
pub(crate) fn merge_resolutions(
    me: &str,
    parts: Vec<Part<Resolution>>,
) -> Result<(Resolution, Vec<(String, String)>), String> {
    let mut live_on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unreachable: BTreeMap<String, String> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut answered, mut no_match, mut from_cache) = (0, true, true);
    for part in parts {
        match part.answer {
            Ok(mut res) => {
                // Another server's answer comes from a database row: its ids are
                // checked as this server's blocking checks its own.
                res.refuse_unplain_ids();
                answered += 1;
                no_match &= res.no_match;
                from_cache &= res.from_cache;
                for minion in res.live {
                    live_on.entry(minion).or_default().push(part.server.clone());
                }
                for (minion, why) in res.unreachable {
                    unreachable.entry(minion).or_insert(why);
                }
            }
            Err(why) => {
                no_match = false;
                for minion in &part.minions {
                    unreachable
                        .entry(minion.clone())
                        .or_insert_with(|| format!("server {} did not answer: {why}", part.server));
                }
                failures.push(format!("{}: {why}", part.server));
            }
        }
    }
    if answered == 0 {
        return Err(failures.join("; "));
    }
    let mut reached = Vec::with_capacity(live_on.len());
    for (minion, servers) in &live_on {
        let server = if servers.iter().any(|s| s == me) {
            me.to_string()
        } else {
            servers
                .iter()
                .min()
                .cloned()
                .unwrap_or_else(|| me.to_string())
        };
        reached.push((minion.clone(), server));
    }
    let merged = Resolution {
        live: live_on.keys().cloned().collect(),
        unreachable: unreachable
            .into_iter()
            .filter(|(m, _)| !live_on.contains_key(m))
            .collect(),
        no_match: no_match && live_on.is_empty(),
        from_cache,
    };
    Ok((merged, reached))
}

/// The outcomes of a launch's parts, tagged with their server; a part that failed fails
/// each of its minions in each run (step 4).
pub(crate) fn merge_launches(
    runs: &[RunId],
    parts: Vec<Part<Vec<(RunId, MinionOutcome)>>>,
) -> Vec<(RunId, MinionOutcome)> {
    let mut all = Vec::new();
    for part in parts {
        match part.answer {
            Ok(outcomes) => all.extend(outcomes.into_iter().map(|(run, o)| {
                let mut o = o.bounded();
                o.server = Some(part.server.clone());
                (run, o)
            })),
            Err(why) => {
                for run in runs {
                    for minion in &part.minions {
                        all.push((*run, failed(&part.server, minion, &why)));
                    }
                }
            }
        }
    }
    all
}

/// The outcomes of a deployment's parts and the hash of the wrapper deployed (the
/// first part's that answered); `Err` when every part failed (step 4).
pub(crate) fn merge_deploys(
    parts: Vec<Part<(Vec<MinionOutcome>, String)>>,
) -> Result<(Vec<MinionOutcome>, String), String> {
    let mut outcomes = Vec::new();
    let mut hash = None;
    let mut failures = Vec::new();
    for part in parts {
        match part.answer {
            Ok((done, h)) => {
                hash.get_or_insert(h);
                outcomes.extend(done.into_iter().map(|o| {
                    let mut o = o.bounded();
                    o.server = Some(part.server.clone());
                    o
                }));
            }
            Err(why) => {
                failures.push(format!("{}: {why}", part.server));
                outcomes.extend(part.minions.iter().map(|m| failed(&part.server, m, &why)));
            }
        }
    }
    match hash {
        Some(hash) => Ok((outcomes, hash)),
        None => Err(failures.join("; ")),
    }
}

fn failed(server: &str, minion: &str, why: &str) -> MinionOutcome {
    MinionOutcome {
        machine: minion.to_string(),
        result: Err(format!(
            "server {server}, whose master reaches {minion}: {}",
            crate::logsafe::clip(why, crate::logsafe::REASON_MAX)
        )),
        silent: None,
        unreachable: None,
        server: Some(server.to_string()),
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
