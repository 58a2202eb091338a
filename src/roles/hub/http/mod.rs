//! The HTTP API, `/ws` and the dashboard (docs/protocols.md, HTTP API) on the hub's loop.
//!
//! One connection goes: accept (a cap on open connections) -> read into a buffer ->
//! `parse` a complete request (size limits) -> `routes` decides: answer at once (static
//! files, errors, `/api/v1/maintenance`), or call main with a typed `AdminRequest` and
//! answer when main does, or upgrade `/ws` (`ws_ui`). Requests of one connection are
//! answered in order (keep-alive and pipelining); while main works on one, the next ones
//! wait in the buffer. Writes go to a buffer flushed on writability.
//!
//! Slow or silent clients cannot hold anything: a request must be complete within
//! `api_request_timeout` of its first byte (else 408 and close), an idle keep-alive
//! connection is closed after `api_idle_timeout`, a client that does not read its
//! answers is dropped. All of it is checked by `sweep` once a second; nothing here ever
//! blocks the loop that also serves the wrappers.

pub mod auth;
pub mod budget;
pub mod feed;
pub mod identity;
pub mod live;
pub mod parse;
mod query;
mod reading;
mod writing;
use writing::{flush, queue, write_out};
mod accept;
mod answers;
mod sweep;
pub use sweep::arm_sweep;
pub mod routes;
pub mod sessions;
pub mod views;
pub mod ws_ui;

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::net::TcpListener;
use mio::{Interest, Token};

use super::{Hub, Waiting};
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::ipc::CallError;
use crate::roles::common::RoleError;
use crate::tls::Stream;
use crate::wire::admin::AdminResponse;
use crate::wire::link::HubRequest;
use parse::{ParseLimits, Parsed, Response};

pub type ConnId = u64;

/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// Answers queued but not yet sent beyond which a connection stops reading requests.
pub const MAX_UNSENT: usize = 256 * 1024;
/// How long a closing connection may keep sending before it is dropped.
const LINGER: Duration = Duration::from_secs(2);

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
enum State {
    /// Reading the next request.
    Reading,
    /// main is working on a request; later ones wait in the buffer.
    Waiting { keep_alive: bool, head: bool },
    /// The last answer is sent (or being sent); then the write side closes.
    Closing { since: Instant },
}

pub struct HttpConn {
    stream: Stream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    state: State,
    close_after_write: bool,
    /// When the connection became idle (accepted, or its last answer queued).
    idle_since: Instant,
    /// When the first byte of an incomplete request arrived.
    partial_since: Option<Instant>,
    last_write: Instant,
    served: u64,
    /// Held back by the hub's budget ([`budget`]) with something left to read or serve:
    /// the sweep tries it again.
    starved: bool,
}

pub enum Kind {
    Http(Box<HttpConn>),
    Ws(Box<ws_ui::WsConn>),
}

pub struct Conn {
    token: Token,
    peer: SocketAddr,
    pub kind: Kind,
    /// Set when a write failed where the connection could not be dropped at once.
    dead: Option<String>,
    /// What it holds, as counted into `Http::budget`.
    charge: budget::Charge,
}

pub struct Http {
    conns: HashMap<ConnId, Conn>,
    /// The one-second sweep is pending (armed only while there are connections).
    sweep_armed: bool,
    next_id: ConnId,
    pub limits: Limits,
    pub auth: auth::Auth,
    pub ui: views::UiHub,
    pub stats: Stats,
    /// Bytes held for all clients together ([`budget`]).
    pub budget: budget::Budget,
    /// The port's TLS (`None` only with `tls: false` on loopback).
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    refusals: super::logsafe::Repeated,
}

struct Acceptor {
    listener: TcpListener,
}

/// Raise the soft limit on open files to the hard one: every HTTP, `/ws` and wrapper
/// connection is a descriptor of this process.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        log::warn!("could not raise the open file limit from {soft} to {hard}: {e}");
    }
}

impl Http {
    pub fn listen(
        ctx: &mut Ctx<Hub>,
        fd: OwnedFd,
        sp: &crate::config::SaltpeterConfig,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
        state: &std::path::Path,
    ) -> Result<Http, RoleError> {
        let std = std::net::TcpListener::from(fd);
        std.set_nonblocking(true)
            .map_err(RoleError::setup("API port"))?;
        if let Ok(addr) = std.local_addr() {
            let scheme = if tls.is_some() { "https" } else { "http" };
            log::info!("HTTP API and dashboard on {scheme}://{addr}/");
        }
        let acceptor = Acceptor {
            listener: TcpListener::from_std(std),
        };
        ctx.add(acceptor, Interest::READABLE, |a| &mut a.listener)
            .map_err(RoleError::setup("API port"))?;
        raise_fd_limit();
        let sessions = sessions::Sessions::open(state);
        let auth = auth::Auth::from_config(sp, tls.is_some(), sessions);
        if !auth.is_open() && !auth.has_identities() {
            log::warn!(
                "api_ws is on but neither saltpeter_config.api_tokens nor api_token is set: \
                 every API request will be refused"
            );
        }
        let limits = Limits::from_config(sp);
        Ok(Http {
            conns: HashMap::new(),
            sweep_armed: false,
            next_id: 1,
            ui: views::UiHub::new(limits.live_cap),
            limits,
            auth,
            stats: Stats::default(),
            budget: budget::Budget::default(),
            tls,
            refusals: super::logsafe::Repeated::new(Duration::from_secs(10)),
        })
    }

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

/// Drop a connection now; a `/ws` client's subscriptions go with it.
pub fn drop_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, why: &str) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(mut conn) = http.conns.remove(&id) else {
        return;
    };
    http.budget.release(&mut conn.charge);
    http.budget.give_back();
    log::debug!("API connection {id} from {} closed: {why}", conn.peer);
    ctx.remove(conn.token);
    if let Kind::Ws(ws) = conn.kind {
        views::forget_client(hub, id, &ws);
    }
}

/// Drop the connections marked dead by a write that failed.
pub fn reap(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let Some(http) = hub.http.as_ref() else {
        return;
    };
    let dead: Vec<(ConnId, String)> = http
        .conns
        .iter()
        .filter_map(|(id, c)| c.dead.clone().map(|why| (*id, why)))
        .collect();
    for (id, why) in dead {
        drop_conn(hub, ctx, id, &why);
    }
}

fn on_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, event: &Event) -> Flow {
    let is_ws = match hub.http.as_ref().and_then(|h| h.conns.get(&id)) {
        None => return Flow::Close,
        Some(c) => matches!(c.kind, Kind::Ws(_)),
    };
    if !is_ws && event.is_error() {
        // Reset by the peer: nothing more to send or read. Said here because a
        // connection the budget holds back reads nothing that would tell it.
        drop_conn(hub, ctx, id, "reset by peer");
        return Flow::Continue;
    }
    if is_ws {
        ws_ui::on_event(hub, ctx, id);
    } else {
        reading::on_http_event(hub, ctx, id);
    }
    settle(hub, id);
    reap(hub, ctx);
    // Calls to main started here need their deadline timer.
    super::arm_timers(hub, ctx);
    Flow::Continue
}

/// Count connection `id`'s buffers into the budget as they are now.
pub fn settle(hub: &mut Hub, id: ConnId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(conn) = http.conns.get_mut(&id) else {
        return;
    };
    let (request, answers) = match &conn.kind {
        Kind::Http(c) => (c.rbuf.len(), c.wbuf.len()),
        Kind::Ws(ws) => (0, ws.backlog()),
    };
    http.budget.settle(&mut conn.charge, request, answers);
}

fn http_conn(hub: &mut Hub, id: ConnId) -> Option<&mut HttpConn> {
    match &mut hub.http.as_mut()?.conns.get_mut(&id)?.kind {
        Kind::Http(c) => Some(c),
        Kind::Ws(_) => None,
    }
}

/// Serve the complete requests in the buffer, in order, until one waits for main.
fn process(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    loop {
        let Some(http) = hub.http.as_mut() else {
            return;
        };
        let limits = http.limits;
        let Some(Conn {
            kind: Kind::Http(conn),
            ..
        }) = http.conns.get_mut(&id)
        else {
            return;
        };
        if conn.state != State::Reading
            || conn.rbuf.is_empty()
            || conn.close_after_write
            || conn.wbuf.len() >= MAX_UNSENT
        {
            return;
        }
        if !http.budget.may_serve(conn.rbuf.len() + conn.wbuf.len()) {
            conn.starved = true;
            return;
        }
        let (req, used) = match parse::parse(&conn.rbuf, &limits.parse) {
            Ok(Parsed::Incomplete) => return,
            Ok(Parsed::Complete(req, used)) => (req, used),
            Err(rejection) => {
                conn.rbuf.clear();
                queue(conn, &Response::rejection(&rejection), false, false);
                if let Some(h) = hub.http.as_mut() {
                    h.stats.rejected += 1;
                }
                return;
            }
        };
        let raw: Vec<u8> = conn.rbuf.drain(..used).collect();
        conn.partial_since = (!conn.rbuf.is_empty()).then(Instant::now);
        conn.served += 1;
        if let Some(h) = hub.http.as_mut() {
            h.stats.requests += 1;
        }
        dispatch(hub, ctx, id, req, raw);
    }
}

fn dispatch(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, req: parse::Request, raw: Vec<u8>) {
    let keep_alive = req.keep_alive();
    let head = req.method == "HEAD";
    let Some(peer) = hub
        .http
        .as_ref()
        .and_then(|h| h.conns.get(&id))
        .map(|c| c.peer.ip())
    else {
        return;
    };
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let mut who = None;
    match routes::route(http, &req, peer, &mut who) {
        routes::Action::Respond(resp) => {
            if let Some(conn) = http_conn(hub, id) {
                queue(conn, &resp, keep_alive, head);
            }
        }
        routes::Action::Call {
            req: admin,
            expect,
            timeout,
        } => {
            if !reserve_answer(hub, id, &admin) {
                let busy = Response::error(
                    503,
                    "busy",
                    "the server holds too many unsent answers; retry shortly",
                )
                .with_header("Retry-After", "1");
                if let Some(conn) = http_conn(hub, id) {
                    queue(conn, &busy, keep_alive, head);
                }
                return;
            }
            if let Some(conn) = http_conn(hub, id) {
                conn.state = State::Waiting { keep_alive, head };
            }
            let msg = match &who {
                Some(who) => who.request(admin),
                None => HubRequest::Admin(admin),
            };
            hub.call_main(msg, timeout, Waiting::Http(id, expect));
        }
        routes::Action::Upgrade => {
            let cookie = who
                .as_ref()
                .filter(|w| w.via == identity::Principal::Cookie)
                .and_then(|_| auth::session_cookie(&req))
                .map(str::to_string);
            ws_ui::upgrade(hub, ctx, id, raw, who, cookie)
        }
    }
}

/// Set aside room for the answer to `admin` on connection `id` (`budget`, rule 3).
fn reserve_answer(hub: &mut Hub, id: ConnId, admin: &crate::wire::admin::AdminRequest) -> bool {
    let bytes = match admin {
        crate::wire::admin::AdminRequest::Output { range, .. } => {
            let max = range.max_bytes.unwrap_or(routes::DEFAULT_OUTPUT_BYTES);
            usize::try_from(max.saturating_mul(2))
                .unwrap_or(usize::MAX)
                .saturating_add(budget::CALL_RESERVE)
        }
        _ => budget::CALL_RESERVE,
    };
    let Some(http) = hub.http.as_mut() else {
        return false;
    };
    let Some(conn) = http.conns.get_mut(&id) else {
        return false;
    };
    let own = match &conn.kind {
        Kind::Http(c) => c.rbuf.len() + c.wbuf.len(),
        Kind::Ws(_) => 0,
    };
    http.budget.reserve(&mut conn.charge, bytes, own)
}

/// main answered a request of connection `id`.
pub fn answer(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    expect: routes::Expect,
    resp: AdminResponse,
) {
    let Some(http) = hub.http.as_ref() else {
        return;
    };
    let response = routes::render(http, expect, resp);
    respond_waiting(hub, id, &response);
    // Read too: requests the client sent meanwhile may wait in the socket, with no new
    // readiness to announce them.
    reading::on_http_event(hub, ctx, id);
    settle(hub, id);
}

/// main did not answer a request of connection `id`.
pub fn call_failed(hub: &mut Hub, id: ConnId, err: &CallError) {
    let response = match err {
        CallError::Timeout(..) => Response::error(504, "timeout", &err.to_string()),
        CallError::PeerGone(_) => Response::error(503, "unavailable", &err.to_string()),
        CallError::Remote(_) | CallError::WrongReply { .. } => {
            Response::error(500, "internal", &err.to_string())
        }
    };
    respond_waiting(hub, id, &response);
    if let Err(why) = write_out(hub, id)
        && let Some(conn) = hub.http.as_mut().and_then(|h| h.conn_mut(id))
    {
        conn.mark_dead(why);
    }
    settle(hub, id);
}

fn respond_waiting(hub: &mut Hub, id: ConnId, response: &Response) {
    if let Some(http) = hub.http.as_mut()
        && let Some(conn) = http.conns.get_mut(&id)
    {
        http.budget.unreserve(&mut conn.charge);
    }
    if let Some(conn) = http_conn(hub, id)
        && let State::Waiting { keep_alive, head } = conn.state
    {
        queue(conn, response, keep_alive, head);
    }
}
