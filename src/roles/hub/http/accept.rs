//! Accepting API connections: the cap on open connections, overall and per client
//! address (IPv6 by its /64), then TLS when the port has it.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use mio::Interest;
use mio::event::Event;
use mio::net::TcpListener;

use super::conns::{drop_conn, reap, settle};
use super::parse::Response;
use super::sweep::arm_sweep;
use super::{auth, reading, ws_ui};
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::roles::common::RoleError;
use crate::roles::hub::client_addr::client_key;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{
    Conn, ConnId, ConnState, Http, HttpConn, Kind, Limits, Stats,
};
use crate::roles::hub::state::{budget, sessions};
use crate::tls::Stream;

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
    pub(crate) fn listen(
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
            ui: crate::roles::hub::state::http::UiHub::new(limits.live_cap),
            limits,
            auth,
            stats: Stats::default(),
            budget: budget::Budget::default(),
            tls,
            refusals: crate::roles::hub::logsafe::Repeated::new(Duration::from_secs(10)),
        })
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
    Flow::Continue
}

impl Listener<Hub> for Acceptor {
    fn handle_event(&mut self, hub: &mut Hub, ctx: &mut Ctx<Hub>, _: &Event) -> Flow {
        let Some(http) = hub.http.as_mut() else {
            return Flow::Close;
        };
        loop {
            let (mut tcp, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    arm_sweep(hub, ctx);
                    return Flow::Continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("API port accept failed: {e}");
                    return Flow::Continue;
                }
            };
            // One address may hold only its share, so a flood from one client leaves
            // room for everyone else (counted over the open connections: nothing to
            // keep in step when they close).
            let client = client_key(peer.ip());
            let from_peer = http
                .conns
                .values()
                .filter(|c| client_key(c.peer.ip()) == client)
                .count();
            let full = http.conns.len() >= http.limits.max_connections;
            if full || from_peer >= http.limits.max_per_addr {
                http.stats.rejected += 1;
                if let Some(held) = http.refusals.due(Instant::now()) {
                    log::warn!(
                        "API connection from {peer} refused: {} connections open, {from_peer} \
                         from that address ({held} more refused since the last report)",
                        http.conns.len()
                    );
                }
                let busy = Response::error(503, "unavailable", "too many connections");
                // A plain answer only where the port is plain; a TLS client would not
                // understand it.
                if http.tls.is_none() {
                    let _ = tcp.write(&busy.to_bytes(false, false));
                }
                continue;
            }
            let id = http.next_id;
            http.next_id += 1;
            let _ = tcp.set_nodelay(true);
            let mut stream = match Stream::accept(tcp, http.tls.as_ref()) {
                Ok(stream) => stream,
                Err(e) => {
                    log::warn!("could not start TLS with {peer}: {e}");
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
                    log::warn!("could not register an API connection from {peer}: {e}");
                    continue;
                }
            };
            let now = Instant::now();
            http.conns.insert(
                id,
                Conn {
                    token,
                    peer,
                    kind: Kind::Http(Box::new(HttpConn {
                        stream,
                        rbuf: Vec::new(),
                        wbuf: Vec::new(),
                        state: ConnState::Reading,
                        close_after_write: false,
                        idle_since: now,
                        partial_since: None,
                        last_write: now,
                        served: 0,
                        starved: false,
                    })),
                    dead: None,
                    charge: budget::Charge::default(),
                },
            );
        }
    }
}
