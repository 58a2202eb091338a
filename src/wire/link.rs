//! Messages of the internal links: one request enum and one reply enum per direction.
//!
//! ```text
//! supervisor <-> every child   control: Ready, Shutdown, Reload, process table
//! hub  <-> main                 admin requests, wrapper sessions (hello, output, exits)
//! main <-> db                   (`wire/db.rs`) runs, targets, output, events
//! main <-> blocking             launching wrappers, resolving targets
//! ```
//! Where a link has two ends in different files, a `type` alias names what each side
//! sends, so both ends name the same types.
//! Each link carries `ipc::rpc::Packet<Req, Rep>` values after the `Hello` (which, with
//! `Role`, belongs to `ipc`: the framing layer names no message of any link).

use serde::{Deserialize, Serialize};

use super::admin::{AdminRequest, AdminResponse};
use super::records::{Millis, RunId};
use super::wrapper::{ExitReason, JobSpec, RejectCode, ServerMsg, Stream};
use super::{NoReply, Redacted};
use crate::config::TargetType;
use crate::ipc::rpc::Packet;

pub(crate) use super::admin::ProcessInfo;

/// Supervisor -> child.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ControlDown {
    /// Finish what is in flight (up to the grace) and exit 0.
    Shutdown,
    /// An ordered stop began (main only, before the first level stops): start nothing
    /// new, since blocking is about to go; what is staged is recovered at the next start.
    Stopping,
    /// Re-read the configuration (main only).
    Reload,
    /// Every process of the daemon, sent to main once all are ready.
    Processes {
        started_at: Millis,
        processes: Vec<ProcessInfo>,
        /// The port wrappers connect to (bound by the supervisor; may have been 0).
        wrapper_port: u16,
        /// The HTTP API's port (0: not served).
        api_port: u16,
    },
    /// The supervisor's liveness check: answered with `ControlUp::Pong` of the same
    /// number by the role's event loop (`roles::common::control_event`), so a loop that
    /// stops turning stops answering.
    Ping(u64),
}

/// Child -> supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ControlUp {
    Ready,
    /// The answer to `ControlDown::Ping`.
    Pong(u64),
}

/// A wrapper connection inside the hub.
pub(crate) type ConnId = u64;

/// How often the hub ticks main ([`HubRequest::HubTick`]).
pub(crate) const HUB_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Hub -> main requests (calls and casts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum HubRequest {
    /// Twice a second (cast): the hub runs and passes wrapper frames on; main judges no
    /// silence while these stop (`roles/main/state/liveness.rs`).
    HubTick,
    /// An operator's request from the admin socket (call).
    Admin(AdminRequest),
    /// A wrapper said hello (call; the reply decides welcome or reject).
    WrapperHello(WrapperHello),
    WrapperStarted {
        conn: ConnId,
        pid: u32,
        /// When the wrapper says the command started (its clock, unix ms); main records
        /// it only inside the window it knows to be possible (`sessions::start_time`).
        at: i64,
        /// How the job's limits were applied (`started.limits`, clipped and escaped by
        /// the hub).
        limits: Option<String>,
    },
    WrapperHeartbeat {
        conn: ConnId,
        /// What the wrapper said of its command (`heartbeat.suspended`); `None` when the
        /// hub vouches for a connection it is not reading.
        suspended: Option<bool>,
    },
    WrapperOutput {
        conn: ConnId,
        seq: u64,
        stream: Stream,
        #[serde(with = "crate::wire::bytes")]
        data: Vec<u8>,
    },
    WrapperExited {
        conn: ConnId,
        end_seq: u64,
        code: Option<i32>,
        signal: Option<i32>,
        reason: ExitReason,
    },
    /// The connection closed (either side) or was dropped for a protocol error;
    /// `rejected`: the hub closed a bound link for what its wrapper sent (a `reject`),
    /// and why, for main to record.
    WrapperGone {
        conn: ConnId,
        rejected: Option<(super::wrapper::RejectCode, String)>,
    },
    /// An operator's request from the admin socket, with who sent it (call).
    AdminFrom {
        peer: super::admin::AdminPeer,
        req: AdminRequest,
    },
    /// The admin connection of these long calls closed: stop streaming to them (cast).
    AdminGone { calls: Vec<u64> },
    /// `/ws` clients subscribed to `job` (or the last one left): main pushes its details
    /// while watched (cast).
    UiWatch { job: String, watch: bool },
    /// An HTTP or `/ws` request with the API identity behind it (`api:NAME`), for the
    /// audit trail (call).
    AdminBy { who: String, req: AdminRequest },
}

/// A wrapper's `hello`, as the hub passes it to main (with the connection it came on).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WrapperHello {
    pub conn: ConnId,
    pub peer: String,
    pub run: RunId,
    pub machine: String,
    pub token: Option<Redacted>,
    pub resume_key: Option<Redacted>,
    /// The wrapper signed the hub's challenge with its minion key.
    pub proof: Option<MinionProof>,
    pub resume_from: Option<u64>,
    pub wrapper_version: String,
    pub pid: u32,
    /// The wrapper's build: SHA-256 (hex) of its executable and the path it runs from,
    /// as it reported them (checked for shape by the hub; trusted only once the hello
    /// is vetted).
    pub build: Option<WrapperBuild>,
    /// The wrapper advertised `suspend` (`hello.capabilities`).
    pub can_suspend: bool,
    /// The wrapper advertised `limits`: it applies the job's resource limits.
    pub can_limit: bool,
    /// Its command is suspended now (`hello.suspended`, on a reconnect).
    pub suspended: bool,
}

/// Which wrapper binary a minion has: where, and its SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WrapperBuild {
    pub path: String,
    pub sha256: String,
}

/// A challenge the hub sent on a connection, and the wrapper's signature of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MinionProof {
    pub challenge: String,
    pub signature: String,
}

/// Main's answer to a `WrapperHello`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum WrapperVerdict {
    Welcome {
        job: JobSpec,
        resume_key: Redacted,
        acked_seq: u64,
        wait_for_go: bool,
        /// `welcome.slot_in_ms`: time to the slot of a pre-staged run.
        slot_in_ms: Option<u64>,
    },
    Reject {
        code: RejectCode,
        message: String,
    },
}

/// Main -> hub replies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum HubReply {
    Admin(AdminResponse),
    Verdict(WrapperVerdict),
}

/// A value that crosses a link as its JSON text: for the wrapper protocol's internally
/// tagged messages, which bincode cannot decode directly.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AsJson<T>(pub T);

impl<T: Serialize> Serialize for AsJson<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for AsJson<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        serde_json::from_str(&text)
            .map(AsJson)
            .map_err(serde::de::Error::custom)
    }
}

/// Main -> hub requests (casts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum MainToHub {
    /// Send a control message to a wrapper.
    ToWrapper {
        conn: ConnId,
        msg: AsJson<ServerMsg>,
    },
    /// Send the same control message to many wrappers (`go` at a slot): encoded once.
    ToWrappers {
        conns: Vec<ConnId>,
        msg: AsJson<ServerMsg>,
    },
    /// Close a wrapper connection (after `done` or `reject`).
    CloseWrapper { conn: ConnId },
    /// Progress of a long admin call (e.g. `run --wait`), before its final reply.
    AdminProgress { call: u64, line: String },
    /// A streamed answer of a long admin call (`AdminResponse::is_stream`), before its
    /// final reply.
    AdminStream { call: u64, resp: AdminResponse },
    /// `/ws`: the configuration as the UI is shown it, on start and on every (re)load.
    UiConfig(super::ui::ConfigView),
    /// `/ws`: runs in flight and each job's last result, when they change.
    UiStatus(super::ui::StatusView),
    /// `/ws`: the current (or last) run of a watched job, when it changes. The hub keeps
    /// the live output of its targets from the wrapper frames it relays.
    UiDetails(super::ui::DetailsView),
    /// `/ws` on a standby: output of a run the leader drives, read from the database
    /// (`roles/main/views/mirror/`). `seq` is the position after `data` in the target's
    /// stored output: it stands for the frame seq of a relayed frame, and the hub's
    /// read of the stored output (`LiveBase::upto_seq`) counts in the same bytes.
    UiStoredOutput {
        job: String,
        run: RunId,
        machine: String,
        seq: u64,
        #[serde(with = "crate::wire::bytes")]
        data: Vec<u8>,
    },
    /// `/ws`: these runs were fed as stored output and are now this server's own (it
    /// took over): the hub drops their live text and reads it again, to follow their
    /// wrappers' frames from there.
    UiForget(Vec<RunId>),
    /// Wrapper output the hub forwarded is no longer held by main or db (committed,
    /// refused, or dropped): its cost ([`output_cost`]) per connection, summed over one
    /// turn of main's loop. The hub's read budget is given back by exactly these credits.
    OutputCredit(Vec<(ConnId, u64)>),
}

/// What one forwarded output frame of `data_len` bytes costs the hub's read budget: its
/// bytes plus a fixed share for the message around them (so a flood of tiny frames is
/// bounded too). Both ends compute it from the same length, so the credits main returns
/// match what the hub charged.
pub(crate) fn output_cost(data_len: usize) -> u64 {
    data_len as u64 + 256
}

/// Hub -> main replies (hub answers no calls of main's today).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum HubAnswer {}

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
    use crate::wire::wrapper::KillReason;

    #[test]
    fn wrapper_commands_cross_a_bincode_link() {
        let msg = MainToHub::ToWrapper {
            conn: 3,
            msg: AsJson(ServerMsg::Kill {
                reason: KillReason::User,
                grace_s: 5,
            }),
        };
        let bytes = crate::ipc::codec::encode(&msg, 1024).unwrap();
        let back: MainToHub = crate::ipc::codec::decode(&bytes, 1024).unwrap();
        match back {
            MainToHub::ToWrapper { conn, msg } => {
                assert_eq!(conn, 3);
                assert_eq!(
                    msg.0,
                    ServerMsg::Kill {
                        reason: KillReason::User,
                        grace_s: 5
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }

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
