//! The admin socket: `saltpeterctl` connections, forwarded to main.
//!
//! Peers are checked with SO_PEERCRED (root, or the daemon's own user). Each request
//! becomes one call to main; `Progress` lines of long operations pass through before the
//! final answer. A client that sends garbage gets a `Failure` and is disconnected.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use mio::event::Event;
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Token};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use super::{Hub, Waiting};
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::ipc::CallError;
use crate::ipc::channel::Channel;
use crate::roles::RoleError;
use crate::wire::admin::{AdminFailure, AdminRequest, AdminResponse};
use crate::wire::link::{HubRequest, Role};

pub type ConnId = u64;

/// Ordinary admin calls; `WaitRun` may take as long as the run.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

struct Conn {
    link: Channel<UnixStream, AdminResponse, AdminRequest>,
    token: Token,
}

pub struct Admin {
    conns: HashMap<ConnId, Conn>,
    next_id: ConnId,
}

struct AdminListener {
    listener: UnixListener,
}

impl Admin {
    pub fn listen(ctx: &mut Ctx<Hub>, fd: OwnedFd) -> Result<Admin, RoleError> {
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
            next_id: 1,
        })
    }
}

fn allowed(stream: &UnixStream) -> Result<(), String> {
    let creds = getsockopt(stream, PeerCredentials).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if creds.uid() == 0 || creds.uid() == me {
        Ok(())
    } else {
        Err(format!(
            "uid {} (pid {}) is not allowed",
            creds.uid(),
            creds.pid()
        ))
    }
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
            if let Err(why) = allowed(&stream) {
                log::warn!("admin connection refused: {why}");
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
                    hub.admin.conns.insert(id, Conn { link, token });
                }
                Err(e) => {
                    log::warn!("admin connection: {e}");
                    ctx.remove(token);
                }
            }
        }
    }
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
            for req in requests {
                let timeout = match req {
                    AdminRequest::WaitRun { .. } | AdminRequest::DeployWrapper { .. } => {
                        WAIT_TIMEOUT
                    }
                    _ => CALL_TIMEOUT,
                };
                hub.call_main(HubRequest::Admin(req), timeout, Waiting::Admin(id));
            }
            super::arm_timers(hub, ctx);
            Flow::Continue
        }
        Err(crate::ipc::ChannelError::PeerGone(_)) => {
            hub.admin.conns.remove(&id);
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

pub fn respond(hub: &mut Hub, _ctx: &mut Ctx<Hub>, id: ConnId, resp: AdminResponse) {
    if let Some(conn) = hub.admin.conns.get_mut(&id)
        && let Err(e) = conn.link.send(&resp)
    {
        log::debug!("admin connection {id} went away before its answer: {e}");
    }
}

pub fn progress(hub: &mut Hub, call: crate::ipc::CallId, line: String) {
    if let Some(Waiting::Admin(id)) = hub.calls.get(call).copied()
        && let Some(conn) = hub.admin.conns.get_mut(&id)
    {
        let _ = conn.link.send(&AdminResponse::Progress(line));
    }
}

pub fn fail(hub: &mut Hub, id: ConnId, err: &CallError) {
    if let Some(conn) = hub.admin.conns.get_mut(&id) {
        let _ = conn
            .link
            .send(&AdminResponse::Failure(AdminFailure::Internal(
                err.to_string(),
            )));
    }
}
