//! The wrapper endpoint: WebSocket protocol v1 (docs/protocols.md, Wrapper <-> hub) on the hub's loop.
//!
//! Each connection goes: TCP accept (per-address quota of connections still in their
//! hello; when it is full the oldest of them that has not said hello makes room) -> non-blocking WebSocket
//! handshake on `/wrapper/v1` -> `hello` within the hello deadline -> main's verdict
//! (`welcome` or `reject`) -> session: control messages and binary output forwarded to
//! main as typed requests, main's commands sent back. Frame and message sizes are bounded
//! by tungstenite's limits, the write buffer too (a peer that does not read is dropped).
//! Anything malformed is rejected with a reason and a log line; other connections are
//! never affected. A bound connection knows its job, run and machine, so the output and
//! heartbeats of watched jobs also feed the `/ws` live view on the way (`http::feed`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Interest, Token};
use tungstenite::handshake::server::{Callback, ErrorResponse, Request, Response};
use tungstenite::handshake::{MidHandshake, server::ServerHandshake};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

mod accept;
pub mod flow;
mod hello;
mod read;
pub use hello::{hello_failed, verdict};
use read::on_conn;
pub use read::on_credit;

use super::Hub;
use super::client_addr::client_key;
use crate::evloop::Ctx;
use crate::roles::common::RoleError;
use crate::tls::Stream;
use crate::wire::Redacted;
use crate::wire::compress::ZSTD;
use crate::wire::limits::CAP_LIMITS;
use crate::wire::link::{ConnId, HubRequest, WrapperHello};
use crate::wire::records::RunId;
use crate::wire::wrapper::{
    CAP_SUSPEND, OutputFrame, OutputFrameError, PROTOCOL_VERSION, RejectCode, ServerMsg,
    WRAPPER_PATH, WrapperMsg,
};

/// Longest `started.limits` kept (characters; it names a group path and a few values).
const LIMITS_TEXT_MAX: usize = 512;

/// Limits of the endpoint (`saltpeter_config` keys in docs/configuration.md).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
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
    pub fn from_config(c: &crate::config::SaltpeterConfig) -> Limits {
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
pub struct PathCheck;

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

type Mid = MidHandshake<ServerHandshake<Stream, PathCheck>>;

enum Session {
    Handshaking(Box<Mid>),
    Open(Box<WebSocket<Stream>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
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

struct Conn {
    session: Option<Session>,
    token: Token,
    peer: SocketAddr,
    since: Instant,
    phase: Phase,
    /// The (run, machine) of its hello, and the job once welcomed.
    target: Option<(RunId, String)>,
    job: Option<String>,
    /// A minion-key `hello` waiting for its `proof` of the challenge.
    challenged: Option<(String, WrapperHello)>,
    /// Counted against its address's quota of connections in their hello (`per_addr`);
    /// cleared when main welcomes it.
    in_hello: bool,
    /// Its hello offered zstd output frames; `compressed` once welcomed with them.
    offers_zstd: bool,
    compressed: bool,
}

pub struct Wrappers {
    conns: HashMap<ConnId, Conn>,
    sweep_armed: bool,
    /// A connection may be waiting for its hello or closing: set when one enters those
    /// phases, cleared by a scan that found none. The scan is O(connections); without
    /// this flag it ran after every event, half the hub's CPU with 10,000 wrappers.
    maybe_waiting: bool,
    /// Connections still in their hello (not yet welcomed) per client address (IPv6 by
    /// its /64). Welcomed sessions are not counted: each holds a credential main vetted,
    /// one per (run, machine) in flight, so their number is bounded by the runs.
    per_addr: HashMap<IpAddr, usize>,
    next_id: ConnId,
    limits: Limits,
    /// The port's TLS (`None` only with `tls: false` on loopback).
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Per-address refusals are logged at most every 10 s.
    refusals: super::logsafe::Repeated,
    /// Output in flight to main and db, and the connections paused for it (`flow.rs`).
    flow: flow::OutputFlow,
    /// The timer that vouches for long-paused connections is armed (`read.rs`).
    pause_watch_armed: bool,
}

struct Acceptor {
    listener: TcpListener,
}

impl Wrappers {
    pub fn listen(
        ctx: &mut Ctx<Hub>,
        fd: OwnedFd,
        limits: Limits,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> Result<Wrappers, RoleError> {
        let std = std::net::TcpListener::from(fd);
        std.set_nonblocking(true)
            .map_err(RoleError::setup("wrapper port"))?;
        let acceptor = Acceptor {
            listener: TcpListener::from_std(std),
        };
        ctx.add(acceptor, Interest::READABLE, |a| &mut a.listener)
            .map_err(RoleError::setup("wrapper port"))?;
        Ok(Wrappers {
            conns: HashMap::new(),
            sweep_armed: false,
            maybe_waiting: false,
            per_addr: HashMap::new(),
            next_id: 1,
            limits,
            tls,
            refusals: super::logsafe::Repeated::new(Duration::from_secs(10)),
            flow: flow::OutputFlow::new(flow::FlowLimits::default()),
            pause_watch_armed: false,
        })
    }
}

fn ws_config(limits: &Limits) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(limits.max_message))
        .max_frame_size(Some(limits.max_message))
        .max_write_buffer_size(limits.max_write_buffer)
        // tungstenite zero-fills its read buffer up to this size before each read, so it
        // is resident for every connection: 16 KiB made 10,000 idle wrappers cost the hub
        // 160 MB. Frames larger than this still arrive whole (the buffer grows for them).
        .read_buffer_size(READ_BUFFER)
}

/// The read buffer of a wrapper connection (see `ws_config`).
const READ_BUFFER: usize = 4 * 1024;

fn release_addr(w: &mut Wrappers, ip: IpAddr) {
    let key = client_key(ip);
    if let Some(n) = w.per_addr.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            w.per_addr.remove(&key);
        }
    }
}

/// main welcomed connection `id`: it leaves its address's hello quota, so a client that
/// holds the quota with idle connections cannot keep real wrappers from that address
/// (every local wrapper comes from 127.0.0.1; a NAT puts many machines behind one).
fn vetted(w: &mut Wrappers, id: ConnId) {
    let Some(conn) = w.conns.get_mut(&id) else {
        return;
    };
    if std::mem::take(&mut conn.in_hello) {
        let ip = conn.peer.ip();
        release_addr(w, ip);
    }
}

/// Drop a connection; main hears of it if it had a session.
fn drop_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, why: &str) {
    let Some(conn) = hub.wrappers.conns.remove(&id) else {
        return;
    };
    log::debug!("wrapper connection {id} from {} closed: {why}", conn.peer);
    ctx.remove(conn.token);
    hub.wrappers.flow.forget(id);
    if conn.in_hello {
        release_addr(&mut hub.wrappers, conn.peer.ip());
    }
    if matches!(conn.phase, Phase::Bound | Phase::Vetting) {
        hub.cast_main(HubRequest::WrapperGone { conn: id });
    }
}

fn handle_message(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, msg: Message) {
    let Some(conn) = hub.wrappers.conns.get_mut(&id) else {
        return;
    };
    let (phase, peer) = (conn.phase, conn.peer);
    match msg {
        Message::Text(text) => {
            let parsed: Result<WrapperMsg, _> = serde_json::from_str(text.as_str());
            match (phase, parsed) {
                (_, Err(e)) => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::BadMessage,
                    &super::logsafe::clip(&e.to_string(), 200),
                ),
                (Phase::New, Ok(WrapperMsg::Hello { v, .. })) if v != PROTOCOL_VERSION => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::Version,
                    &format!("protocol version {v} is not served; this server speaks 1"),
                ),
                (
                    Phase::New,
                    Ok(WrapperMsg::Hello {
                        run,
                        machine,
                        token,
                        resume_key,
                        minion_key,
                        wrapper_version,
                        pid,
                        resume_from,
                        wrapper_sha256,
                        wrapper_path,
                        capabilities,
                        suspended,
                        compression,
                        ..
                    }),
                ) => {
                    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
                        conn.offers_zstd = compression.iter().any(|c| c == ZSTD);
                    }
                    let build = hello::build_of(wrapper_sha256, wrapper_path);
                    let hello = WrapperHello {
                        conn: id,
                        peer: peer.to_string(),
                        run,
                        machine,
                        token: token.map(Redacted),
                        resume_key: resume_key.map(Redacted),
                        proof: None,
                        resume_from,
                        wrapper_version,
                        pid,
                        build,
                        can_suspend: capabilities.iter().any(|c| c == CAP_SUSPEND),
                        can_limit: capabilities.iter().any(|c| c == CAP_LIMITS),
                        suspended,
                    };
                    if minion_key && hello.token.is_none() && hello.resume_key.is_none() {
                        hello::challenge(hub, ctx, id, hello);
                    } else {
                        hello::forward(hub, id, hello);
                    }
                }
                (Phase::Challenged, Ok(WrapperMsg::Proof { signature })) => {
                    hello::proven(hub, id, signature)
                }
                (Phase::Bound, Ok(WrapperMsg::Started { pid, at, limits })) => {
                    tap_alive(hub, id);
                    let limits = limits.map(|l| crate::logsafe::clip(&l, LIMITS_TEXT_MAX));
                    hub.cast_main(HubRequest::WrapperStarted {
                        conn: id,
                        pid,
                        at,
                        limits,
                    })
                }
                (Phase::Bound, Ok(WrapperMsg::Heartbeat { suspended, .. })) => {
                    tap_alive(hub, id);
                    hub.cast_main(HubRequest::WrapperHeartbeat {
                        conn: id,
                        suspended: Some(suspended),
                    })
                }
                (
                    Phase::Bound,
                    Ok(WrapperMsg::Exited {
                        end_seq,
                        code,
                        signal,
                        reason,
                        ..
                    }),
                ) => hub.cast_main(HubRequest::WrapperExited {
                    conn: id,
                    end_seq,
                    code,
                    signal,
                    reason,
                }),
                (Phase::Closing, Ok(_)) => {}
                (phase, Ok(other)) => reject(
                    hub,
                    ctx,
                    id,
                    RejectCode::BadMessage,
                    &format!("{} is not expected now ({phase:?})", kind_of(&other)),
                ),
            }
        }
        Message::Binary(bytes) => match (phase, decode_output(hub, id, &bytes)) {
            (Phase::Bound, Ok(frame)) => {
                tap_output(hub, ctx, id, frame.seq, &frame.data);
                let cost = crate::wire::link::output_cost(frame.data.len());
                hub.wrappers.flow.forwarded(id, cost);
                hub.cast_main(HubRequest::WrapperOutput {
                    conn: id,
                    seq: frame.seq,
                    stream: frame.stream,
                    data: frame.data,
                })
            }
            (Phase::Bound, Err(e)) => reject(hub, ctx, id, RejectCode::BadMessage, &e.to_string()),
            (Phase::Closing, _) => {}
            _ => reject(
                hub,
                ctx,
                id,
                RejectCode::BadMessage,
                "output before a welcome",
            ),
        },
        // tungstenite answers pings itself; close frames end the read loop.
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => {}
    }
}

/// An output frame as the command wrote it: compressed ones (when this link negotiated
/// them) are decompressed here, to at most the message limit (no decompression bomb).
fn decode_output(hub: &Hub, id: ConnId, bytes: &[u8]) -> Result<OutputFrame, OutputFrameError> {
    let compressed = hub.wrappers.conns.get(&id).is_some_and(|c| c.compressed);
    OutputFrame::decode_link(bytes, compressed, hub.wrappers.limits.max_message)
}

/// The job, run and machine of a bound connection, when a `/ws` client watches the job
/// (nothing is copied for a job nobody watches).
fn bound_target(hub: &Hub, id: ConnId) -> Option<(String, RunId, String)> {
    let conn = hub.wrappers.conns.get(&id)?;
    let ((run, machine), job) = (conn.target.as_ref()?, conn.job.as_ref()?);
    if !super::http::views::is_watched(hub, job) {
        return None;
    }
    Some((job.clone(), *run, machine.clone()))
}

/// A watched job's wrapper spoke: its details show the time.
fn tap_alive(hub: &mut Hub, id: ConnId) {
    if let Some((job, run, machine)) = bound_target(hub, id) {
        super::http::views::wrapper_alive(hub, &job, run, &machine);
    }
}

/// An output frame of a watched job goes to its `/ws` subscribers too.
fn tap_output(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, seq: u64, data: &[u8]) {
    if let Some((job, run, machine)) = bound_target(hub, id) {
        super::http::views::wrapper_alive(hub, &job, run, &machine);
        super::http::feed::wrapper_output(hub, ctx, &job, run, &machine, seq, data);
    }
}

fn kind_of(msg: &WrapperMsg) -> &'static str {
    match msg {
        WrapperMsg::Hello { .. } => "hello",
        WrapperMsg::Proof { .. } => "proof",
        WrapperMsg::Started { .. } => "started",
        WrapperMsg::Heartbeat { .. } => "heartbeat",
        WrapperMsg::Exited { .. } => "exited",
    }
}

/// Send a `reject` and close the connection once it is flushed.
fn reject(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, code: RejectCode, message: &str) {
    if let Some(conn) = hub.wrappers.conns.get(&id) {
        log::warn!(
            "wrapper connection from {}: rejected ({code:?}): {}",
            conn.peer,
            super::logsafe::clip(message, 300)
        );
    }
    let was_bound = hub
        .wrappers
        .conns
        .get(&id)
        .is_some_and(|c| matches!(c.phase, Phase::Bound | Phase::Vetting));
    send(
        hub,
        ctx,
        id,
        &ServerMsg::Reject {
            code,
            message: message.to_string(),
        },
    );
    if was_bound {
        hub.cast_main(HubRequest::WrapperGone { conn: id });
    }
    close(hub, ctx, id);
}

/// Send a control message to a wrapper.
pub fn send(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, msg: &ServerMsg) {
    broadcast(hub, ctx, &[id], msg);
}

/// Send `msg` to each of `ids` (those gone are skipped), encoded once.
pub fn broadcast(hub: &mut Hub, ctx: &mut Ctx<Hub>, ids: &[ConnId], msg: &ServerMsg) {
    let text = match serde_json::to_string(msg) {
        Ok(text) => tungstenite::Utf8Bytes::from(text),
        Err(e) => {
            log::error!("could not encode a message for a wrapper: {e}");
            return;
        }
    };
    for &id in ids {
        send_text(hub, ctx, id, text.clone());
    }
}

fn send_text(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, text: tungstenite::Utf8Bytes) {
    let Some(Conn {
        session: Some(Session::Open(ws)),
        ..
    }) = hub.wrappers.conns.get_mut(&id)
    else {
        return;
    };
    match ws.send(Message::Text(text)) {
        Ok(()) => {}
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => {
            let why = format!("write failed: {e}");
            drop_conn(hub, ctx, id, &why);
        }
    }
}

/// Close a connection politely (close frame), then forget it.
pub fn close(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    let Some(conn) = hub.wrappers.conns.get_mut(&id) else {
        return;
    };
    if let Some(Session::Open(ws)) = conn.session.as_mut() {
        let _ = ws.close(None);
        let _ = ws.flush();
    }
    conn.phase = Phase::Closing;
    conn.since = Instant::now();
    arm_sweep(hub, ctx);
}

/// A connection entered `New` or `Closing`: check it within a second.
pub fn arm_sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    hub.wrappers.maybe_waiting = true;
    arm_sweep_if_waiting(hub, ctx);
}

/// While connections wait for their hello (or to close), check them every second. Cheap
/// when nothing changed: called after every event of the hub.
pub fn arm_sweep_if_waiting(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    if hub.wrappers.sweep_armed || !hub.wrappers.maybe_waiting {
        return;
    }
    let waiting = hub
        .wrappers
        .conns
        .values()
        .any(|c| matches!(c.phase, Phase::New | Phase::Challenged | Phase::Closing));
    hub.wrappers.maybe_waiting = waiting;
    if waiting {
        hub.wrappers.sweep_armed = true;
        ctx.after(Duration::from_secs(1), |hub: &mut Hub, ctx| {
            hub.wrappers.sweep_armed = false;
            sweep(hub, ctx);
            arm_sweep(hub, ctx);
        });
    }
}

/// Drop connections that never said hello in time, and closing ones that linger.
pub fn sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let now = Instant::now();
    let hello_timeout = hub.wrappers.limits.hello_timeout;
    let late: Vec<(ConnId, &'static str)> = hub
        .wrappers
        .conns
        .iter()
        .filter_map(|(id, c)| match c.phase {
            Phase::New | Phase::Challenged if now.duration_since(c.since) > hello_timeout => {
                Some((*id, "no hello within the deadline"))
            }
            Phase::Closing if now.duration_since(c.since) > Duration::from_secs(2) => {
                Some((*id, "closed"))
            }
            _ => None,
        })
        .collect();
    for (id, why) in late {
        if why != "closed"
            && let Some(c) = hub.wrappers.conns.get(&id)
        {
            log::warn!("wrapper connection from {}: {why}; dropping it", c.peer);
        }
        drop_conn(hub, ctx, id, why);
    }
}
