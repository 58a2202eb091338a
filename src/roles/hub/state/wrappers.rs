//! The wrapper endpoint's state: its limits, its connections and where each is in the
//! protocol, the per-address hello quota, the output flow. Data only; `wrappers`
//! changes it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mio::Token;
use tungstenite::WebSocket;
use tungstenite::handshake::server::{Callback, ErrorResponse, Request, Response};
use tungstenite::handshake::{MidHandshake, server::ServerHandshake};

use crate::tls::Stream;
use crate::wire::link::{ConnId, WrapperHello};
use crate::wire::records::RunId;
use crate::wire::wrapper::WRAPPER_PATH;

/// Limits of the endpoint (`saltpeter_config` keys in docs/configuration.md).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub hello_timeout: Duration,
    pub max_message: usize,
    pub max_per_addr: usize,
    pub max_write_buffer: usize,
    /// Welcome wrappers that offer it with zstd output frames (`output_compression`).
    pub compression: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hello_timeout: Duration::from_secs(10),
            max_message: 1024 * 1024,
            max_per_addr: 256,
            max_write_buffer: 4 * 1024 * 1024,
            compression: true,
        }
    }
}

impl Limits {
    pub(crate) fn from_config(c: &crate::config::SaltpeterConfig) -> Limits {
        Limits {
            hello_timeout: Duration::from_secs(c.hello_timeout_s.max(1)),
            max_message: usize::try_from(c.max_message_bytes).unwrap_or(usize::MAX),
            max_per_addr: c.max_connections_per_addr as usize,
            compression: c.output_compression,
            ..Limits::default()
        }
    }
}

/// Only `/wrapper/v1` is served.
pub(crate) struct PathCheck;

impl Callback for PathCheck {
    fn on_request(self, request: &Request, response: Response) -> Result<Response, ErrorResponse> {
        if request.uri().path() == WRAPPER_PATH {
            return Ok(response);
        }
        let mut err = ErrorResponse::new(Some(format!("unknown path; use {WRAPPER_PATH}")));
        *err.status_mut() = tungstenite::http::StatusCode::NOT_FOUND;
        Err(err)
    }
}

pub(crate) type Mid = MidHandshake<ServerHandshake<Stream, PathCheck>>;

pub(crate) enum Session {
    Handshaking(Box<Mid>),
    Open(Box<WebSocket<Stream>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the handshake or `hello`.
    New,
    /// `challenge` sent for a minion-key `hello`, waiting for its `proof`.
    Challenged,
    /// `hello` forwarded, waiting for main's verdict.
    Vetting,
    /// Welcomed: a session of a (run, machine).
    Bound,
    /// Rejected or done: flushing a last message, then closed.
    Closing,
}

pub(crate) struct Conn {
    pub session: Option<Session>,
    pub token: Token,
    pub peer: SocketAddr,
    pub since: Instant,
    pub phase: Phase,
    /// The (run, machine) of its hello, and the job once welcomed.
    pub target: Option<(RunId, String)>,
    pub job: Option<String>,
    /// A minion-key `hello` waiting for its `proof` of the challenge.
    pub challenged: Option<(String, WrapperHello)>,
    /// Counted against its address's quota of connections in their hello (`per_addr`);
    /// cleared when main welcomes it.
    pub in_hello: bool,
    /// Its hello offered zstd output frames; `compressed` once welcomed with them.
    pub offers_zstd: bool,
    pub compressed: bool,
    /// Its hello advertised `output_held`; without it, refused output closes the link.
    pub holds_output: bool,
}

pub(crate) struct Wrappers {
    pub conns: HashMap<ConnId, Conn>,
    pub sweep_armed: bool,
    /// A connection may be waiting for its hello or closing: set when one enters those
    /// phases, cleared by a scan that found none. The scan is O(connections); without
    /// this flag it ran after every event, half the hub's CPU with 10,000 wrappers.
    pub maybe_waiting: bool,
    /// Connections still in their hello (not yet welcomed) per client address (IPv6 by
    /// its /64). Welcomed sessions are not counted: each holds a credential main vetted,
    /// one per (run, machine) in flight, so their number is bounded by the runs.
    pub per_addr: HashMap<IpAddr, usize>,
    pub next_id: ConnId,
    pub limits: Limits,
    /// The port's TLS (`None` only with `tls: false` on loopback).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Per-address refusals are logged at most every 10 s.
    pub refusals: crate::roles::hub::logsafe::Repeated,
    /// The hub's lines about refused or dropped peers (a malformed hello, no hello in
    /// time), shared by all addresses; main logs its own verdicts (`conns::reject`).
    pub refusal_lines: crate::log_budget::Budget,
    /// Output in flight to main and db, and the connections paused for it (`flow.rs`).
    pub flow: super::flow::OutputFlow,
    /// The timer that vouches for long-paused connections is armed (`wrappers/read.rs`).
    pub pause_watch_armed: bool,
}
