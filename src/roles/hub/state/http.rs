//! The HTTP endpoint's state: its limits and counters, its connections (HTTP or `/ws`)
//! and where each is, and what the hub keeps for the `/ws` clients: the views of the jobs
//! they watch (details, heartbeats, each target's live text) and each client's
//! WebSocket, subscriptions, positions and calls waiting for main. Data and the
//! questions asked of it; `http` changes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::Token;
use serde_json::Value;
use tungstenite::handshake::MidHandshake;
use tungstenite::handshake::server::{NoCallback, ServerHandshake};
use tungstenite::{Utf8Bytes, WebSocket};

use super::budget::{Budget, Charge};
use super::identity::Identity;
use super::live::{LiveText, Position};
use super::sessions::{Sessions, Throttle};
use crate::config::{ApiAuth, ApiIdentity};
use crate::json::ui::{TargetSeen, details_message};
use crate::tls::Stream;
use crate::wire::records::{Millis, RunId};
use crate::wire::ui::DetailsView;

pub(crate) type ConnId = u64;

/// Answers queued but not yet sent beyond which a connection stops reading requests.
pub(crate) const MAX_UNSENT: usize = 256 * 1024;
/// How long a closing connection may keep sending before it is dropped.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// Size limits of one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParseLimits {
    pub max_header: usize,
    pub max_body: usize,
}

/// Limits of the endpoint (`saltpeter_config` keys in docs/configuration.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub parse: ParseLimits,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Open connections one client address may hold (`max_connections_per_addr`).
    pub max_per_addr: usize,
    /// Largest `/ws` message accepted from a client.
    pub ws_max_message: usize,
    /// A `/ws` client that lets this much pile up unread is dropped.
    pub ws_max_write: usize,
    /// Bytes of live text kept per target for `/ws` subscribers.
    pub live_cap: usize,
}

impl Limits {
    pub(crate) fn from_config(c: &crate::config::SaltpeterConfig) -> Limits {
        Limits {
            parse: ParseLimits {
                max_header: 16 * 1024,
                max_body: 1024 * 1024,
            },
            request_timeout: Duration::from_secs(c.api_request_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(c.api_idle_timeout_s.max(1)),
            max_connections: c.api_max_connections as usize,
            max_per_addr: c.max_connections_per_addr as usize,
            ws_max_message: 64 * 1024,
            ws_max_write: 4 * 1024 * 1024,
            live_cap: 1024 * 1024,
        }
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub requests: u64,
    pub rejected: u64,
    pub ws_messages_sent: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Reading the next request.
    Reading,
    /// main is working on a request; later ones wait in the buffer.
    Waiting { keep_alive: bool, head: bool },
    /// The last answer is sent (or being sent); then the write side closes.
    Closing { since: Instant },
}

pub(crate) struct HttpConn {
    pub stream: Stream,
    pub rbuf: Vec<u8>,
    pub wbuf: Vec<u8>,
    pub state: ConnState,
    pub close_after_write: bool,
    /// When the connection became idle (accepted, or its last answer queued).
    pub idle_since: Instant,
    /// When the first byte of an incomplete request arrived.
    pub partial_since: Option<Instant>,
    pub last_write: Instant,
    pub served: u64,
    /// Held back by the hub's budget (`budget`) with something left to read or serve:
    /// the sweep tries it again.
    pub starved: bool,
}

pub(crate) enum Kind {
    Http(Box<HttpConn>),
    Ws(Box<WsConn>),
}

pub(crate) struct Conn {
    pub token: Token,
    pub peer: SocketAddr,
    pub kind: Kind,
    /// Set when a write failed where the connection could not be dropped at once.
    pub dead: Option<String>,
    /// What it holds, as counted into `Http::budget`.
    pub charge: Charge,
}

pub(crate) struct Http {
    pub conns: HashMap<ConnId, Conn>,
    /// The one-second sweep is pending (armed only while there are connections).
    pub sweep_armed: bool,
    pub next_id: ConnId,
    pub limits: Limits,
    pub auth: Auth,
    pub ui: UiHub,
    pub stats: Stats,
    /// Bytes held for all clients together (`budget`).
    pub budget: Budget,
    /// The port's TLS (`None` only with `tls: false` on loopback).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub refusals: crate::roles::hub::logsafe::Repeated,
}

impl Http {
    pub(crate) fn connection_counts(&self) -> (usize, usize) {
        let ws = self
            .conns
            .values()
            .filter(|c| matches!(c.kind, Kind::Ws(_)))
            .count();
        (self.conns.len() - ws, ws)
    }

    pub(crate) fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(&id)
    }

    pub(crate) fn ws_ids(&self) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| matches!(c.kind, Kind::Ws(_)) && c.dead.is_none())
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Conn {
    pub(crate) fn mark_dead(&mut self, why: String) {
        self.dead.get_or_insert(why);
    }
}

/// How to render main's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    Healthz,
    Status,
    ConfigErrors,
    Jobs,
    Job,
    Runs {
        limit: u32,
    },
    Run,
    /// An output read: its form, where it starts (or that it asks for the last bytes),
    /// and the most bytes it asked for (at most 8 MiB), which decide its answer's room.
    Output {
        raw: bool,
        from: u64,
        tail: bool,
        max_bytes: u32,
    },
    Started,
    Done,
    Metrics,
    Maintenance,
    Windows,
    JobControl,
    Deliveries,
}

pub(crate) struct Auth {
    pub mode: ApiAuth,
    pub identities: Vec<ApiIdentity>,
    pub metrics_auth: bool,
    /// The port speaks TLS: cookies get `Secure`.
    pub secure: bool,
    pub sessions: Sessions,
    pub throttle: Throttle,
}

// ---- the `/ws` clients

#[derive(Default)]
pub(crate) struct JobView {
    pub subscribers: BTreeSet<ConnId>,
    pub details: Option<DetailsView>,
    pub targets: BTreeMap<String, Target>,
    /// When the hub last heard from each target's wrapper, and of which run.
    pub heartbeats: HashMap<String, (RunId, Millis)>,
}

impl JobView {
    /// The `details` message as it stands; `None` before main sent any, or while the
    /// stored output of a target is still being read (its `output_length` would be
    /// wrong: the message goes out when the read is done).
    pub(crate) fn render_details(&self) -> Option<Utf8Bytes> {
        let d = self.details.as_ref()?;
        if self.targets.values().any(|t| t.fetching.is_some()) {
            return None;
        }
        let seen = |machine: &str| TargetSeen {
            heartbeat: self
                .heartbeats
                .get(machine)
                .filter(|(run, _)| Some(*run) == d.run)
                .map(|(_, at)| *at),
            output_length: self
                .targets
                .get(machine)
                .filter(|t| Some(t.text.run) == d.run)
                .map_or(0, |t| t.text.total_chars()),
        };
        Some(Utf8Bytes::from(details_message(d, seen).to_string()))
    }
}

pub(crate) struct UiHub {
    pub config: Option<Utf8Bytes>,
    pub status: Option<Utf8Bytes>,
    /// `config.maintenance` of the last configuration (for `/api/v1/maintenance`).
    pub maintenance: Option<Value>,
    pub jobs: HashMap<String, JobView>,
    pub fetches: HashMap<u64, (String, String, RunId)>,
    pub next_fetch: u64,
    pub live_cap: usize,
    pub refresh_armed: bool,
}

impl UiHub {
    pub(crate) fn new(live_cap: usize) -> UiHub {
        UiHub {
            config: None,
            status: None,
            maintenance: None,
            jobs: HashMap::new(),
            fetches: HashMap::new(),
            next_fetch: 1,
            live_cap,
            refresh_armed: false,
        }
    }
}

pub(crate) struct Target {
    pub text: LiveText,
    pub upto_seq: u64,
    /// The stored output is being read; frames that arrive meanwhile wait here.
    pub fetching: Option<Vec<(u64, Vec<u8>)>>,
    pub finished: bool,
}

pub(crate) fn new_target(
    run: RunId,
    cap: usize,
    finished: bool,
    first: Option<(u64, Vec<u8>)>,
) -> Target {
    Target {
        text: LiveText::new(run, cap),
        upto_seq: 0,
        fetching: Some(first.into_iter().collect()),
        finished,
    }
}

/// The bytes of the upgrade request (already read by the HTTP layer), then the socket.
pub(crate) struct Replay {
    pub pending: Vec<u8>,
    pub pos: usize,
    pub stream: crate::tls::Stream,
    /// Bytes the socket took so far (against `WsConn::queued`: what waits unsent).
    pub written: u64,
}

impl Read for Replay {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.pending.len() {
            let n = (self.pending.len() - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.pending.len() {
                self.pending = Vec::new();
                self.pos = 0;
            }
            return Ok(n);
        }
        self.stream.read(buf)
    }
}

impl Write for Replay {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.stream.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

pub(crate) type Mid = MidHandshake<ServerHandshake<Replay, NoCallback>>;

pub(crate) enum Session {
    Handshaking(Box<Mid>),
    Open(Box<WebSocket<Replay>>),
}

/// What a client's call to main was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WsExpect {
    Command,
    Timeline(u64),
}

pub(crate) struct WsConn {
    pub session: Option<Session>,
    pub since: Instant,
    pub subs: BTreeSet<String>,
    pub positions: HashMap<(String, String), Position>,
    /// `getTimeline` requests waiting for main, with the client's `id`.
    pub timelines: HashMap<u64, Value>,
    pub next_req: u64,
    /// Who authenticated the upgrade: commands are checked against its role and main
    /// records its name.
    pub who: Option<Identity>,
    /// Message bytes handed to the WebSocket so far.
    pub queued: u64,
    /// The session cookie of a handshake that authenticated with one: each call to main
    /// checks the session is still live (`Auth::recheck`), so logout ends its power.
    pub cookie: Option<String>,
}

impl WsConn {
    /// Message bytes waiting to be sent (frame headers and pings aside).
    pub(crate) fn backlog(&self) -> usize {
        match &self.session {
            Some(Session::Open(socket)) => {
                usize::try_from(self.queued.saturating_sub(socket.get_ref().written))
                    .unwrap_or(usize::MAX)
            }
            _ => 0,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        matches!(self.session, Some(Session::Open(_)))
    }
    pub(crate) fn since(&self) -> Instant {
        self.since
    }
}
