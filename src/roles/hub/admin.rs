//! The admin socket: `saltpeterctl` connections, forwarded to main.
//!
//! Peers are checked with SO_PEERCRED (`crate::access`: root, the daemon's own user, or
//! a member of the admin group); a refused peer's first request is answered with the
//! refusal and its connection closed. Each request becomes one call to main carrying the
//! peer; streamed answers (`Progress` lines, output chunks, run progress) of long
//! operations pass through before the final answer, and when a connection closes main
//! is told to stop streaming to its calls. A client that sends garbage gets a `Failure`
//! and is disconnected.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use mio::Interest;
use mio::event::Event;
use mio::net::{UnixListener, UnixStream};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use super::state::admin::{Admin, Conn, ConnId, PeerRefusal, Refused};
use super::state::{Hub, Waiting};
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::ipc::Role;
use crate::ipc::channel::Channel;
use crate::ipc::{CallError, CallId};
use crate::roles::common::RoleError;
use crate::wire::admin::{AdminFailure, AdminPeer, AdminRequest, AdminResponse};
use crate::wire::link::HubRequest;

/// Ordinary admin calls; the long ones (`AdminRequest::is_long`) may take as long as a run.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A client that reads streamed answers slower than they come is dropped past this.
const MAX_QUEUED_BYTES: usize = 32 << 20;

/// At most this many refused peers linger; past it a refused peer is closed at once.
const MAX_REFUSED: usize = 32;
/// A refused peer that sends more than this is closed.
const MAX_DISCARD: usize = 64 * 1024;

struct AdminListener {
    listener: UnixListener,
}

impl Admin {
    pub(super) fn listen(ctx: &mut Ctx<Hub>, fd: OwnedFd) -> Result<Admin, RoleError> {
        let std = std::os::unix::net::UnixListener::from(fd);
        std.set_nonblocking(true)
            .map_err(RoleError::setup("admin socket"))?;
        let listener = AdminListener {
            listener: UnixListener::from_std(std),
        };
        ctx.add(listener, Interest::READABLE, |l| &mut l.listener)
            .map_err(RoleError::setup("admin socket"))?;
        Ok(Admin {
            conns: HashMap::new(),
            refused: HashMap::new(),
            next_id: 1,
            group: None,
            refusals: crate::roles::hub::logsafe::Repeated::new(std::time::Duration::from_secs(10)),
        })
    }

    /// Set the admin group (from `saltpeter_config.admin_group`, at start).
    pub(super) fn set_group(&mut self, configured: Option<&str>) {
        self.group = match crate::access::admin_group(configured) {
            Ok(group) => group.map(|(name, gid)| (name, gid.as_raw())),
            Err(e) => {
                log::warn!("{e}; only root may use the admin socket");
                None
            }
        };
    }
}

fn allowed(stream: &UnixStream, group: Option<&(String, u32)>) -> Result<AdminPeer, PeerRefusal> {
    let creds = getsockopt(stream, PeerCredentials).map_err(PeerRefusal::Credentials)?;
    let me = nix::unistd::geteuid().as_raw();
    let peer = crate::access::Peer {
        uid: creds.uid(),
        gid: creds.gid(),
        pid: creds.pid(),
        groups: if creds.uid() == 0 || creds.uid() == me {
            Vec::new()
        } else {
            crate::access::supplementary_groups(creds.pid())
        },
    };
    crate::access::decide(&peer, me, group.map(|(n, g)| (n.as_str(), *g)))
        .map(|()| AdminPeer {
            uid: peer.uid,
            gid: peer.gid,
            pid: peer.pid,
        })
        .map_err(|why| PeerRefusal::Denied { why, pid: peer.pid })
}

impl Listener<Hub> for AdminListener {
    fn handle_event(&mut self, hub: &mut Hub, ctx: &mut Ctx<Hub>, _: &Event) -> Flow {
        loop {
            let mut stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("admin socket accept failed: {e}");
                    return Flow::Continue;
                }
            };
            // Credentials first: a refused peer gets one answer and the door, and
            // nothing it sends is ever read (no frame, however large, is buffered).
            let peer = allowed(&stream, hub.admin.group.as_ref());
            if let Err(why) = &peer {
                if let Some(held) = hub.admin.refusals.due(std::time::Instant::now()) {
                    log::warn!(
                        "admin connection refused: {why} ({held} more refused since the last report)"
                    );
                }
                let linger = hub.admin.refused.len() < MAX_REFUSED;
                let id = hub.admin.next_id;
                hub.admin.next_id += 1;
                let token = if linger {
                    ctx.register(
                        &mut stream,
                        Interest::READABLE | Interest::WRITABLE,
                        Forward::new(id, on_refused),
                    )
                    .ok()
                } else {
                    None
                };
                if let Ok(mut link) =
                    Channel::<_, AdminResponse, AdminRequest>::new(stream, Role::Hub, Role::Ctl)
                {
                    let msg = format!("permission denied: {why}");
                    let _ = link.send(&AdminResponse::Failure(AdminFailure::Invalid(msg)));
                    if let Some(token) = token {
                        let refused = Refused {
                            link,
                            token,
                            discarded: 0,
                        };
                        hub.admin.refused.insert(id, refused);
                    }
                } else if let Some(token) = token {
                    ctx.remove(token);
                }
                continue;
            }
            let id = hub.admin.next_id;
            hub.admin.next_id += 1;
            let token = match ctx.register(
                &mut stream,
                Interest::READABLE | Interest::WRITABLE,
                Forward::new(id, on_conn),
            ) {
                Ok(token) => token,
                Err(e) => {
                    log::warn!("could not register an admin connection: {e}");
                    continue;
                }
            };
            match Channel::new(stream, Role::Hub, Role::Ctl) {
                Ok(link) => {
                    let conn = Conn {
                        link,
                        token,
                        peer,
                        long_calls: Vec::new(),
                    };
                    hub.admin.conns.insert(id, conn);
                }
                Err(e) => {
                    log::warn!("admin connection: {e}");
                    ctx.remove(token);
                }
            }
        }
    }
}

/// A refused peer: flush its refusal, drain what it sends without reading it as frames,
/// close when it hangs up or sends too much.
fn on_refused(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, event: &Event) -> Flow {
    let Some(refused) = hub.admin.refused.get_mut(&id) else {
        return Flow::Close;
    };
    if event.is_writable() {
        let _ = refused.link.on_writable();
    }
    let mut scratch = [0u8; 4096];
    let done = loop {
        match io::Read::read(refused.link.stream_mut(), &mut scratch) {
            Ok(0) => break true,
            Ok(n) => {
                refused.discarded += n;
                if refused.discarded > MAX_DISCARD {
                    break true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break true,
        }
    };
    if !done {
        return Flow::Continue;
    }
    if let Some(refused) = hub.admin.refused.remove(&id) {
        ctx.remove(refused.token);
    }
    Flow::Close
}

fn on_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, event: &Event) -> Flow {
    let Some(conn) = hub.admin.conns.get_mut(&id) else {
        return Flow::Close;
    };
    if event.is_writable()
        && let Err(e) = conn.link.on_writable()
    {
        log::debug!("admin connection {id}: {e}");
    }
    match conn.link.receive() {
        Ok(requests) => {
            let peer = match &conn.peer {
                Ok(peer) => *peer,
                Err(why) if !requests.is_empty() => {
                    let msg = format!("permission denied: {why}");
                    let _ = conn
                        .link
                        .send(&AdminResponse::Failure(AdminFailure::Invalid(msg)));
                    let token = conn.token;
                    hub.admin.conns.remove(&id);
                    ctx.remove(token);
                    return Flow::Close;
                }
                Err(_) => return Flow::Continue,
            };
            for req in requests {
                let long = req.is_long();
                let timeout = if long { WAIT_TIMEOUT } else { CALL_TIMEOUT };
                let call = hub.call_main(
                    HubRequest::AdminFrom { peer, req },
                    timeout,
                    Waiting::Admin(id),
                );
                if long && let Some(conn) = hub.admin.conns.get_mut(&id) {
                    conn.long_calls.push(call);
                }
            }
            Flow::Continue
        }
        Err(crate::ipc::ChannelError::PeerGone(_)) => {
            if let Some(conn) = hub.admin.conns.remove(&id)
                && !conn.long_calls.is_empty()
            {
                hub.cast_main(HubRequest::AdminGone {
                    calls: conn.long_calls,
                });
            }
            Flow::Close
        }
        Err(e) => {
            log::warn!("admin connection {id}: {e}; closing it");
            let _ = conn
                .link
                .send(&AdminResponse::Failure(AdminFailure::Invalid(
                    e.to_string(),
                )));
            let token = conn.token;
            hub.admin.conns.remove(&id);
            ctx.remove(token);
            Flow::Close
        }
    }
}

pub(super) fn respond(hub: &mut Hub, _ctx: &mut Ctx<Hub>, id: ConnId, resp: AdminResponse) {
    if let Some(conn) = hub.admin.conns.get_mut(&id)
        && let Err(e) = conn.link.send(&resp)
    {
        log::debug!("admin connection {id} went away before its answer: {e}");
    }
}

pub(super) fn progress(hub: &mut Hub, call: crate::ipc::CallId, line: String) {
    if let Some(Waiting::Admin(id)) = hub.calls.get(call).copied()
        && let Some(conn) = hub.admin.conns.get_mut(&id)
    {
        let _ = conn.link.send(&AdminResponse::Progress(line));
    }
}

/// A streamed answer of a long call; a client too slow to read them is dropped.
pub(super) fn stream(hub: &mut Hub, ctx: &mut Ctx<Hub>, call: CallId, resp: AdminResponse) {
    let Some(Waiting::Admin(id)) = hub.calls.get(call).copied() else {
        return;
    };
    let Some(conn) = hub.admin.conns.get_mut(&id) else {
        return;
    };
    let sent = conn.link.send(&resp);
    if sent.is_err() || conn.link.pending_write_bytes() > MAX_QUEUED_BYTES {
        log::warn!("admin connection {id} does not keep up with its stream; closing it");
        if let Some(conn) = hub.admin.conns.remove(&id) {
            ctx.remove(conn.token);
            hub.cast_main(HubRequest::AdminGone {
                calls: conn.long_calls,
            });
        }
    }
}

pub(super) fn fail(hub: &mut Hub, id: ConnId, err: &CallError) {
    if let Some(conn) = hub.admin.conns.get_mut(&id) {
        let _ = conn
            .link
            .send(&AdminResponse::Failure(AdminFailure::Internal(
                err.to_string(),
            )));
    }
}
