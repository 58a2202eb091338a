//! Accepting wrapper connections: the per-address quota of connections still in their
//! hello, TLS when the port has it, then the non-blocking WebSocket handshake.
//!
//! The quota counts only connections main has not welcomed (`Conn::in_hello`): a
//! credential vetted by main takes its connection out of it. When an address's quota is
//! full, its oldest connection that has not said hello yet (still handshaking, waiting
//! for its hello or for the proof of a challenge) is dropped to make room for the new
//! one: idle connections held to fill the quota are always the oldest, and a real
//! wrapper says hello within a round trip or two of connecting. Only when all of them are
//! being vetted by main is the new one refused (logged at most every 10 s).

use std::io;
use std::time::Instant;

use mio::Interest;
use mio::event::Event;
use tungstenite::handshake::HandshakeError;

use mio::net::TcpListener;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

use super::conns::{arm_sweep, drop_conn, release_addr, ws_config};
use super::read::on_conn;
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::roles::common::RoleError;
use crate::roles::hub::client_addr::client_key;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::flow;
use crate::roles::hub::state::wrappers::{Conn, Limits, PathCheck, Phase, Session, Wrappers};
use crate::tls::Stream;
use crate::wire::link::ConnId;

struct Acceptor {
    listener: TcpListener,
}

impl Wrappers {
    pub(crate) fn listen(
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
            refusals: crate::roles::hub::logsafe::Repeated::new(Duration::from_secs(10)),
            refusal_lines: crate::log_budget::Budget::new(
                super::conns::REFUSAL_WINDOW,
                super::conns::REFUSAL_LINES,
            ),
            flow: flow::OutputFlow::new(flow::FlowLimits::default()),
            pause_watch_armed: false,
        })
    }
}

impl Listener<Hub> for Acceptor {
    fn handle_event(&mut self, hub: &mut Hub, ctx: &mut Ctx<Hub>, _: &Event) -> Flow {
        loop {
            let (tcp, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: log and keep serving the open connections.
                    log::warn!("wrapper port accept failed: {e}");
                    return Flow::Continue;
                }
            };
            let key = client_key(peer.ip());
            let held = hub.wrappers.per_addr.get(&key).copied().unwrap_or(0);
            if held >= hub.wrappers.limits.max_per_addr {
                match oldest_unspoken(&hub.wrappers, key) {
                    Some(old) => drop_conn(hub, ctx, old, "made room for a newer connection"),
                    None => {
                        let w = &mut hub.wrappers;
                        if let Some(more) = w.refusals.due(Instant::now()) {
                            log::warn!(
                                "wrapper connection from {peer} refused: {} connections from \
                                 that address are being vetted ({more} more refused since the \
                                 last report)",
                                w.limits.max_per_addr
                            );
                        }
                        continue;
                    }
                }
            }
            let w = &mut hub.wrappers;
            *w.per_addr.entry(key).or_insert(0) += 1;
            let id = w.next_id;
            w.next_id += 1;
            let _ = tcp.set_nodelay(true);
            let mut stream = match Stream::accept(tcp, w.tls.as_ref()) {
                Ok(stream) => stream,
                Err(e) => {
                    log::warn!("could not start TLS with {peer}: {e}");
                    release_addr(w, peer.ip());
                    continue;
                }
            };
            let token = match ctx.register(
                &mut stream,
                Interest::READABLE | Interest::WRITABLE,
                Forward::new(id, on_conn),
            ) {
                Ok(token) => token,
                Err(e) => {
                    log::warn!("could not register wrapper connection from {peer}: {e}");
                    release_addr(w, peer.ip());
                    continue;
                }
            };
            let session = match tungstenite::accept_hdr_with_config(
                stream,
                PathCheck,
                Some(ws_config(&w.limits)),
            ) {
                Ok(ws) => Session::Open(Box::new(ws)),
                Err(HandshakeError::Interrupted(mid)) => Session::Handshaking(Box::new(mid)),
                Err(HandshakeError::Failure(e)) => {
                    super::conns::refusal_line(w, || {
                        format!("wrapper handshake from {peer} failed: {e}")
                    });
                    ctx.remove(token);
                    release_addr(w, peer.ip());
                    continue;
                }
            };
            w.conns.insert(
                id,
                Conn {
                    session: Some(session),
                    token,
                    peer,
                    since: Instant::now(),
                    phase: Phase::New,
                    target: None,
                    job: None,
                    challenged: None,
                    in_hello: true,
                    offers_zstd: false,
                    compressed: false,
                    holds_output: false,
                },
            );
            arm_sweep(hub, ctx);
        }
    }
}

/// The connection from client `key` that has waited longest without saying hello (or
/// proving its minion key); those main is vetting are left alone.
fn oldest_unspoken(w: &Wrappers, key: std::net::IpAddr) -> Option<ConnId> {
    w.conns
        .iter()
        .filter(|(_, c)| c.in_hello && matches!(c.phase, Phase::New | Phase::Challenged))
        .filter(|(_, c)| client_key(c.peer.ip()) == key)
        .min_by_key(|(id, c)| (c.since, **id))
        .map(|(id, _)| *id)
}
