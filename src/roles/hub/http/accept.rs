//! Accepting API connections: the cap on open connections, overall and per client
//! address (IPv6 by its /64), then TLS when the port has it.

use super::*;
use crate::roles::hub::client_addr::client_key;

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
                        state: State::Reading,
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
