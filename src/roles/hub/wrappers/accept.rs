//! Accepting wrapper connections: the per-address cap (refusals logged at most every
//! 10 s), TLS when the port has it, then the non-blocking WebSocket handshake.

use std::io;
use std::time::Instant;

use mio::Interest;
use mio::event::Event;
use tungstenite::handshake::HandshakeError;

use super::{
    Acceptor, Conn, PathCheck, Phase, Session, arm_sweep, on_conn, release_addr, ws_config,
};
use crate::evloop::{Ctx, Flow, Forward, Listener};
use crate::roles::hub::Hub;
use crate::tls::Stream;

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
            let w = &mut hub.wrappers;
            let count = w.per_addr.entry(peer.ip()).or_insert(0);
            if *count >= w.limits.max_per_addr {
                if let Some(held) = w.refusals.due(Instant::now()) {
                    log::warn!(
                        "wrapper connection from {peer} refused: {} connections from that \
                         address ({held} more refused since the last report)",
                        w.limits.max_per_addr
                    );
                }
                continue;
            }
            *count += 1;
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
                    log::info!("wrapper handshake from {peer} failed: {e}");
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
                },
            );
            arm_sweep(hub, ctx);
        }
    }
}
