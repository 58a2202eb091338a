//! Messages of the main <-> blocking link (`wire/link.rs` re-exports them): which
//! executor launches wrappers, the requests blocking serves (launching, resolving,
//! pinging, a plugin's operations) and its replies.

use serde::{Deserialize, Serialize};

use super::records::RunId;
use super::{NoReply, Redacted};
use crate::config::TargetType;
use crate::ipc::rpc::Packet;

/// Which executor launches wrappers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ExecutorKind {
    Salt,
    Local,
    /// An executor plugin (docs/executors.md), and the machines that get this build's
    /// wrapper first (capability `deploy`); never served for another server.
    Plugin {
        spec: Box<crate::executor::spec::PluginSpec>,
        deploy: Vec<String>,
    },
}

/// An executor plugin's operations other than `launch` (`roles/blocking/plugin.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PluginCall {
    /// `check_config` of a configuration being loaded (the request line built by
    /// `config::plugin_check`): answered `Checked`.
    Check { request: String },
    /// `resolve` the expression, then, with `ping_timeout_s`, `ping` what it found:
    /// answered `Resolved` (without a ping every machine found is live).
    Resolve {
        target: String,
        target_type: String,
        ping_timeout_s: Option<u64>,
    },
    /// `ping` these machines: answered `Resolved`.
    Ping {
        machines: Vec<String>,
        timeout_s: u64,
    },
    /// `kill` the wrappers of `run` on `machines` out of band: answered `Launched` (a
    /// failure per machine that was not killed).
    Kill { run: RunId, machines: Vec<String> },
}

/// One wrapper to start. Through Salt nothing secret travels (the wrapper proves the
/// machine with its minion key); the local executor's single-use launch token goes to the
/// wrapper in a 0600 file, never on a command line or in an environment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LaunchTarget {
    pub machine: String,
    pub token: Option<Redacted>,
}

/// How the blocking process calls salt (from `saltpeter_config`, sent with each request
/// so a reload applies at once). Ordered, so launches can be grouped by it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct SaltSettings {
    pub salt_bin: String,
    pub config_dir: Option<String>,
    /// `-t`: how long the CLI waits for returns.
    pub timeout_s: u64,
    /// Concurrent salt processes at most (with the bridge: its workers).
    pub concurrency: u32,
    /// Publish through the long-lived salt bridge (`salt_bridge`), else one `salt`
    /// process per call.
    pub bridge: bool,
}

/// Main -> blocking calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum BlockingRequest {
    /// Start one wrapper per target and run: through Salt one publish for every run of
    /// `runs` on every target (`SP_RUN` lists them; docs/salt.md, "Coalesced launches");
    /// the local executor launches exactly one run.
    Launch {
        executor: ExecutorKind,
        wrapper_path: String,
        runs: Vec<RunId>,
        /// The wrapper URL (`SP_URL`).
        url: String,
        targets: Vec<LaunchTarget>,
        salt: Option<SaltSettings>,
        /// Salt: wait for each minion's return of the launch command. Without, the salt
        /// bridge only publishes (the wrappers' calls are the news; a minion that never
        /// calls back is judged at the pick-up deadline). The command line always waits.
        await_returns: bool,
    },
    /// Which minions of a target expression answer `test.ping`; with `from_cache`, which
    /// ones the master matches from its own data (accepted keys, grains and pillar
    /// caches), without a publish, when the salt bridge can ask it.
    Resolve {
        salt: SaltSettings,
        target: String,
        target_type: SaltTargetType,
        from_cache: bool,
    },
    /// Put this build's wrapper at `wrapper_path` on `minions` (checked by hash).
    Deploy {
        salt: SaltSettings,
        minions: Vec<String>,
        wrapper_path: String,
        /// `saltpeter_config.wrapper_source`: a salt:// URL the operator provides. `None`:
        /// publish this build's wrapper in the master's file roots and use that.
        wrapper_source: Option<String>,
    },
    /// Read and parse the configuration files of `dir` whose fingerprint is not in `known`
    /// (in a child process: a large file must not stall main's loop).
    LoadConfig {
        dir: std::path::PathBuf,
        known: Vec<(std::path::PathBuf, crate::config::Fingerprint)>,
    },
    /// Send one notification (in a `--deliver` helper process, with a deadline).
    Deliver(crate::wire::notify::DeliverOrder),
    /// An operation of an executor plugin.
    Plugin {
        spec: Box<crate::executor::spec::PluginSpec>,
        call: PluginCall,
    },
}

/// Minions of a target expression, by liveness.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Resolution {
    pub live: Vec<String>,
    /// Matched but silent or failing: (minion, why).
    pub unreachable: Vec<(String, String)>,
    /// Salt said no minion matched the expression.
    pub no_match: bool,
    /// Matched from the master's data, not pinged: liveness shows at the launch.
    pub from_cache: bool,
}

impl Resolution {
    /// Minion ids that cannot stand as they are in a log line, an event or a terminal
    /// (`logsafe::is_plain_name`: control, escape or bidi characters, empty, over 255
    /// bytes) are not targets: Salt accepts them (its `valid_id` refuses only `/`, `\`
    /// and NUL), and another server's row may carry anything. Each moves to
    /// `unreachable` under its escaped, clipped id (which no real minion has: Salt
    /// refuses `\`), with why; nothing is launched on it and the run shows it. The
    /// reasons are escaped and clipped too. Returns how many ids were refused.
    pub(crate) fn refuse_unplain_ids(&mut self) -> usize {
        use crate::logsafe::{NAME_MAX, REASON_MAX, clip, is_plain_name};
        let refused: Vec<String> = self
            .live
            .iter()
            .filter(|m| !is_plain_name(m))
            .cloned()
            .collect();
        self.live.retain(|m| is_plain_name(m));
        for (minion, why) in &mut self.unreachable {
            if !is_plain_name(minion) {
                *minion = clip(minion, NAME_MAX);
            }
            *why = clip(why, REASON_MAX);
        }
        for minion in &refused {
            self.unreachable.push((
                clip(minion, NAME_MAX),
                "its minion id is not a usable target name (1 to 255 bytes, no control, \
                 escape or bidi characters): nothing is run on it"
                    .to_string(),
            ));
        }
        refused.len()
    }
}

/// What one minion (or local target) made of a launch or a deployment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MinionOutcome {
    pub machine: String,
    pub result: Result<(), String>,
    /// Salt published the launch but the minion did not return: its wrapper may still
    /// call back; if it never does, this is Salt's word for the record.
    pub silent: Option<String>,
    /// An executor plugin could not reach the machine (its word): unreachable (255).
    pub unreachable: Option<String>,
    /// The server whose master made the call, when another server made it for this one
    /// or several masters share the database (`roles/main/masters/`); set by
    /// main, never by blocking.
    pub server: Option<String>,
}

impl MinionOutcome {
    /// The outcome as another server's `salt_calls` answer may be trusted to say it:
    /// its machine name and reasons escaped and clipped (`logsafe`), as this server's
    /// blocking bounds its own, since main logs and records them.
    pub(crate) fn bounded(mut self) -> MinionOutcome {
        use crate::logsafe::{NAME_MAX, REASON_MAX, clip, is_plain_name};
        if !is_plain_name(&self.machine) {
            self.machine = clip(&self.machine, NAME_MAX);
        }
        let reasons = [
            self.result.as_mut().err(),
            self.silent.as_mut(),
            self.unreachable.as_mut(),
        ];
        for why in reasons.into_iter().flatten() {
            *why = clip(why, REASON_MAX);
        }
        self
    }
}

/// Blocking -> main replies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum BlockingReply {
    /// Per run and target.
    Launched(Vec<(RunId, MinionOutcome)>),
    Resolved(Resolution),
    /// Per minion; `hash` of the wrapper deployed.
    Deployed {
        outcomes: Vec<MinionOutcome>,
        hash: String,
    },
    /// The configuration files read for a `LoadConfig`.
    ConfigParsed(crate::config::ParsedFiles),
    /// What the receiver said, or why the attempt failed.
    Delivered(Result<String, String>),
    /// A plugin's `check_config`: its errors, or why it gave no answer.
    Checked(Result<Vec<crate::executor::protocol::ConfigError>, String>),
}

/// Each blocking request's reply, in one place (see `wire::db::calls`).
pub(crate) mod blocking_calls {
    use super::*;
    use crate::ipc::Role;

    calls! { BlockingReply, Role::Blocking;
        Launch -> Vec<(RunId, MinionOutcome)> { BlockingReply::Launched(outcomes) => outcomes }
        Resolve -> Resolution { BlockingReply::Resolved(resolution) => resolution }
        /// Per minion, and the hash of the wrapper deployed.
        Deploy -> (Vec<MinionOutcome>, String) {
            BlockingReply::Deployed { outcomes, hash } => (outcomes, hash)
        }
        Deliver -> Result<String, String> { BlockingReply::Delivered(result) => result }
    }
}

/// Blocking -> main requests (none today).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum BlockingNotice {}

/// What main sends blocking (it answers no calls: blocking makes none); blocking receives
/// exactly this type.
pub(crate) type MainToBlocking = Packet<BlockingRequest, NoReply>;
/// What blocking sends main; main receives exactly this type.
pub(crate) type BlockingToMain = Packet<BlockingNotice, BlockingReply>;

/// How salt reads a target expression (a job's `target_type`): a closed set on the link,
/// so blocking never meets a word it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SaltTargetType {
    Glob,
    Pcre,
    List,
    Grain,
    GrainPcre,
    Pillar,
    Nodegroup,
    Compound,
    Ipcidr,
}

impl From<TargetType> for SaltTargetType {
    fn from(t: TargetType) -> Self {
        match t {
            TargetType::Glob => SaltTargetType::Glob,
            TargetType::Pcre => SaltTargetType::Pcre,
            TargetType::List => SaltTargetType::List,
            TargetType::Grain => SaltTargetType::Grain,
            TargetType::GrainPcre => SaltTargetType::GrainPcre,
            TargetType::Pillar => SaltTargetType::Pillar,
            TargetType::Nodegroup => SaltTargetType::Nodegroup,
            TargetType::Compound => SaltTargetType::Compound,
            TargetType::Ipcidr => SaltTargetType::Ipcidr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minion_ids_that_would_forge_a_log_line_are_not_targets() {
        let mut res = Resolution {
            live: vec![
                "ok".into(),
                "evil\n1999 ERROR forged".into(),
                "gnp\u{202e}exe".into(),
                "--out-file=x".into(),
            ],
            unreachable: vec![("down\u{1b}[2J".into(), format!("no\n{}", "x".repeat(5000)))],
            ..Default::default()
        };
        assert_eq!(res.refuse_unplain_ids(), 2);
        // A name that reads as an option is a name (the command line has `--`).
        assert_eq!(res.live, ["ok", "--out-file=x"]);
        let names: Vec<&str> = res.unreachable.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            names,
            [
                "down\\u{1b}[2J",
                "evil\\n1999 ERROR forged",
                "gnp\\u{202e}exe"
            ]
        );
        assert!(res.unreachable[0].1.starts_with("no\\nxxx"));
        assert!(res.unreachable[0].1.len() < 1100);
        assert!(res.unreachable[1].1.contains("not a usable target name"));
    }

    #[test]
    fn another_servers_outcome_is_bounded() {
        let o = MinionOutcome {
            machine: "m\n1999 ERROR forged".into(),
            result: Err(format!("boom\n{}", "x".repeat(100_000))),
            silent: Some("quiet\u{1b}[2J".into()),
            unreachable: None,
            server: None,
        }
        .bounded();
        assert_eq!(o.machine, "m\\n1999 ERROR forged");
        let why = o.result.unwrap_err();
        assert!(
            why.starts_with("boom\\nxxx") && why.len() < 1100,
            "{}",
            why.len()
        );
        assert_eq!(o.silent.as_deref(), Some("quiet\\u{1b}[2J"));
    }
}
