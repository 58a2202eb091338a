//! The one-second sweep of the API connections: requests that take too long (408),
//! idle and lingering connections, stalled writers, `/ws` handshakes that never finish,
//! connections the budget held back, and the budget settled and memory handed back.

use std::time::{Duration, Instant};

use super::conns::{drop_conn, http_conn, reap, settle};
use super::parse::Response;
use super::reading;
use super::writing::{flush, queue};
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, ConnState, Kind, LINGER};

/// Once a second: requests that take too long, idle and lingering connections, stalled
/// writers, `/ws` handshakes that never finish.
/// Idle and slow clients are timed out by a sweep every second while there are
/// connections; with none, nothing wakes the hub up for it.
pub(crate) fn arm_sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    if http.sweep_armed || http.conns.is_empty() {
        return;
    }
    http.sweep_armed = true;
    ctx.after(Duration::from_secs(1), |hub: &mut Hub, ctx| {
        if let Some(http) = hub.http.as_mut() {
            http.sweep_armed = false;
        }
        sweep(hub, ctx);
        arm_sweep(hub, ctx);
    });
}

pub(super) fn sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let now = Instant::now();
    let limits = http.limits;
    let mut drop_now = Vec::new();
    let mut timed_out = Vec::new();
    let mut starved = Vec::new();
    for (id, conn) in &mut http.conns {
        if let Kind::Http(c) = &mut conn.kind
            && std::mem::take(&mut c.starved)
        {
            starved.push(*id);
        }
        match &mut conn.kind {
            Kind::Http(c) => match c.state {
                ConnState::Closing { since } if now.duration_since(since) > LINGER => {
                    drop_now.push((*id, "closed"));
                }
                ConnState::Reading
                    if c.partial_since
                        .is_some_and(|t| now.duration_since(t) > limits.request_timeout) =>
                {
                    timed_out.push(*id);
                }
                ConnState::Reading if c.rbuf.is_empty() && c.wbuf.is_empty() => {
                    let allowed = if c.served == 0 {
                        limits.request_timeout
                    } else {
                        limits.idle_timeout
                    };
                    if now.duration_since(c.idle_since) > allowed {
                        drop_now.push((*id, "idle"));
                    }
                }
                _ if !c.wbuf.is_empty()
                    && now.duration_since(c.last_write) > limits.request_timeout * 3 =>
                {
                    drop_now.push((*id, "the client does not read its answers"));
                }
                _ => {}
            },
            Kind::Ws(ws) => {
                if !ws.is_open() && now.duration_since(ws.since()) > limits.request_timeout {
                    drop_now.push((*id, "WebSocket handshake not finished in time"));
                }
            }
        }
    }
    for id in timed_out {
        if let Some(conn) = http_conn(hub, id) {
            log::info!("API connection {id}: request not complete in time; 408");
            conn.rbuf.clear();
            conn.partial_since = None;
            let resp =
                Response::error(408, "request_timeout", "the request did not arrive in time");
            queue(conn, &resp, false, false);
        }
        flush(hub, ctx, id);
    }
    for (id, why) in drop_now {
        drop_conn(hub, ctx, id, why);
    }
    // Connections the budget held back get another go, now that others may have left;
    // each is counted before the next reads (its reads are, and so is what it served).
    for id in starved {
        reading::on_http_event(hub, ctx, id);
        settle(hub, id);
    }
    reap(hub, ctx);
    let ids: Vec<ConnId> = hub
        .http
        .as_ref()
        .map(|h| h.conns.keys().copied().collect())
        .unwrap_or_default();
    for id in ids {
        settle(hub, id);
    }
    if let Some(http) = hub.http.as_mut() {
        http.budget.give_back();
    }
}
