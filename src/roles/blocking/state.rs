//! Blocking's state, below all of its behaviour: the role's struct and the state of each
//! part (the local launches, the salt command line's queue, the salt bridge). Plain data
//! and the questions asked of it (`is_idle`); the parts that change it (`local`,
//! `salt/cli`, `salt/exec`, `salt/bridge`) name this module and never the role's own file,
//! so no part names another that names it back.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Child;
use std::rc::Rc;
use std::time::Instant;

use mio::Token;
use mio::unix::pipe::{Receiver, Sender};

use crate::evloop::Ctx;
use crate::evloop::timers::TimerId;
use crate::ipc::rpc::{CallId, Packet, RemoteError};
use crate::roles::common::{ControlLink, Link};
use crate::wire::link::{
    BlockingReply, BlockingToMain, LaunchTarget, MainToBlocking, MinionOutcome, SaltSettings,
};
use crate::wire::records::RunId;

pub(super) type MainLink = Link<BlockingToMain, MainToBlocking>;

/// The role's state: the links, and the state of each executor and of the bridge.
pub(crate) struct Blocking {
    pub control: ControlLink,
    pub main: MainLink,
    pub stopping: bool,
    pub batches: Batches,
    /// Local targets waiting for a launch slot, and the launches running.
    pub launches: LaunchQueue,
    pub wrapper_log_dir: PathBuf,
    /// Private directory (0700) of the local executor's launch token files.
    pub token_dir: PathBuf,
    /// The state directory (the salt bridge's script and log live there).
    pub state_dir: PathBuf,
    pub salt: SaltQueue,
}

impl Blocking {
    /// Answer a call of main's.
    pub(crate) fn reply(&mut self, id: CallId, result: Result<BlockingReply, RemoteError>) {
        if let Err(e) = self.main.send(&Packet::Reply { id, result }) {
            log::error!("could not answer main: {e}");
        }
    }
}

/// Outcomes of one `Launch` call, collected until every target has one.
#[derive(Default)]
pub(crate) struct Batch {
    pub remaining: usize,
    pub run: RunId,
    pub outcomes: Vec<(RunId, MinionOutcome)>,
}

pub(super) type Batches = HashMap<CallId, Batch>;

/// Targets waiting for a free launch slot, and how many launches are running.
#[derive(Default)]
pub(crate) struct LaunchQueue {
    pub waiting: VecDeque<(CallId, Rc<Launch>, LaunchTarget)>,
    pub in_flight: usize,
}

impl LaunchQueue {
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.in_flight == 0
    }
}

/// What every wrapper of one launch shares.
pub(crate) struct Launch {
    pub wrapper: String,
    pub run: RunId,
    pub url: String,
}

/// What an invocation produced.
pub(crate) enum Outcome {
    Finished {
        code: Option<i32>,
        stdout: String,
        stderr: String,
        /// Answered by the salt bridge (not a `salt` process).
        bridge: bool,
    },
    Failed(String),
}

/// One `salt` process to run (also what a bridge request falls back to).
pub(crate) struct Invocation {
    pub settings: SaltSettings,
    pub argv: Vec<String>,
    pub on_done: OnDone,
}

/// Salt calls waiting for a free slot on the command line, how many run, and the bridge.
#[derive(Default)]
pub(crate) struct SaltQueue {
    pub waiting: VecDeque<Invocation>,
    pub running: usize,
    /// The long-lived salt bridge (`salt/bridge.rs`).
    pub bridge: BridgeState,
}

impl SaltQueue {
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running == 0 && self.bridge.is_idle()
    }
}

/// What a salt call's caller is told, once, by whichever path ran it.
pub(super) type OnDone = Box<dyn FnOnce(&mut Blocking, &mut Ctx<Blocking>, Outcome)>;

/// Which salt a bridge serves: `salt_bin` and the master configuration directory.
pub(super) type BridgeKey = (String, Option<String>);

pub(crate) struct Pending {
    pub lines: String,
    /// The same call as a `salt` process, and the callback: run on the command line if
    /// the bridge dies before it was ready (nothing was published then).
    pub fallback: Invocation,
    pub deadline: TimerId,
}

pub(crate) struct Bridge {
    pub key: BridgeKey,
    pub child: Child,
    /// The bridge said it imported Salt and is ready.
    pub saw_ready: bool,
    pub stdin: Sender,
    pub stdout: Receiver,
    pub stdin_token: Token,
    pub stdout_token: Token,
    pub to_write: Vec<u8>,
    pub read_buf: Vec<u8>,
    pub pending: HashMap<u64, Pending>,
    pub next_id: u64,
}

/// The bridge's state in blocking.
#[derive(Default)]
pub(crate) enum BridgeState {
    #[default]
    NotStarted,
    Running(Box<Bridge>),
    /// The command line is used until `until`.
    Fallback {
        key: BridgeKey,
        until: Instant,
    },
}

impl BridgeState {
    pub(crate) fn is_idle(&self) -> bool {
        match self {
            BridgeState::Running(b) => b.pending.is_empty(),
            _ => true,
        }
    }
}
