//! Messages of the internal links: one request enum and one reply enum per direction.
//!
//! ```text
//! supervisor <-> every child   control: Ready, Shutdown, Reload, process table
//! hub  <-> main                 admin requests, wrapper sessions (hello, output, exits)
//! main <-> db                   (`wire/db.rs`) runs, targets, output, events
//! main <-> blocking             (`wire/link_blocking.rs`) launching wrappers, resolving targets
//! ```
//! Where a link has two ends in different files, a `type` alias names what each side
//! sends, so both ends name the same types.
//! Each link carries `ipc::rpc::Packet<Req, Rep>` values after the `Hello` (which, with
//! `Role`, belongs to `ipc`: the framing layer names no message of any link).

use serde::{Deserialize, Serialize};

use super::Redacted;
use super::admin::{AdminRequest, AdminResponse};
use super::records::{Millis, RunId};
use super::wrapper::{ExitReason, JobSpec, RejectCode, ServerMsg, Stream};

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

// The main <-> blocking link, in its own file.
pub(crate) use super::link_blocking::*;

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
}
