//! The HTTP endpoint's state: its limits and counters, its connections (HTTP or `/ws`)
//! and where each is. Data and the questions asked of it; `http` changes it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::Token;

use crate::roles::hub::http::parse::ParseLimits;
use crate::tls::Stream;

pub type ConnId = u64;

/// Bytes read per `read` call.
pub const READ_CHUNK: usize = 16 * 1024;
/// Answers queued but not yet sent beyond which a connection stops reading requests.
pub const MAX_UNSENT: usize = 256 * 1024;
/// How long a closing connection may keep sending before it is dropped.
pub const LINGER: Duration = Duration::from_secs(2);

/// Limits of the endpoint (`saltpeter_config` keys in docs/configuration.md).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
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
    pub fn from_config(c: &crate::config::SaltpeterConfig) -> Limits {
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
pub struct Stats {
    pub requests: u64,
    pub rejected: u64,
    pub ws_messages_sent: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Reading the next request.
    Reading,
    /// main is working on a request; later ones wait in the buffer.
    Waiting { keep_alive: bool, head: bool },
    /// The last answer is sent (or being sent); then the write side closes.
    Closing { since: Instant },
}

pub struct HttpConn {
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
    /// Held back by the hub's budget (`http/budget.rs`) with something left to read or serve:
    /// the sweep tries it again.
    pub starved: bool,
}

pub enum Kind {
    Http(Box<HttpConn>),
    Ws(Box<crate::roles::hub::http::ws_ui::WsConn>),
}

pub struct Conn {
    pub token: Token,
    pub peer: SocketAddr,
    pub kind: Kind,
    /// Set when a write failed where the connection could not be dropped at once.
    pub dead: Option<String>,
    /// What it holds, as counted into `Http::budget`.
    pub charge: crate::roles::hub::http::budget::Charge,
}

pub struct Http {
    pub conns: HashMap<ConnId, Conn>,
    /// The one-second sweep is pending (armed only while there are connections).
    pub sweep_armed: bool,
    pub next_id: ConnId,
    pub limits: Limits,
    pub auth: crate::roles::hub::http::auth::Auth,
    pub ui: crate::roles::hub::http::views::UiHub,
    pub stats: Stats,
    /// Bytes held for all clients together (`http/budget.rs`).
    pub budget: crate::roles::hub::http::budget::Budget,
    /// The port's TLS (`None` only with `tls: false` on loopback).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub refusals: crate::roles::hub::logsafe::Repeated,
}

impl Http {
    pub fn connection_counts(&self) -> (usize, usize) {
        let ws = self
            .conns
            .values()
            .filter(|c| matches!(c.kind, Kind::Ws(_)))
            .count();
        (self.conns.len() - ws, ws)
    }

    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(&id)
    }

    pub fn ws_ids(&self) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| matches!(c.kind, Kind::Ws(_)) && c.dead.is_none())
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Conn {
    pub fn mark_dead(&mut self, why: String) {
        self.dead.get_or_insert(why);
    }
}

/// How to render main's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Healthz,
    Status,
    ConfigErrors,
    Jobs,
    Job,
    Runs { limit: u32 },
    Run,
    Output { raw: bool, from: u64 },
    Started,
    Done,
    Metrics,
    Maintenance,
    Windows,
    JobControl,
    Deliveries,
}
