//! The wrapper connections' bookkeeping: sending (control messages, a `reject`),
//! closing and dropping, the per-address hello quota, and the sweep of connections that
//! wait too long for their hello or to close. The hub's lines about refused and dropped
//! peers share one budget ([`REFUSAL_LINES`] per [`REFUSAL_WINDOW`], the rest counted
//! and said once per window): one malformed hello from each of thousands of addresses
//! costs a few lines, not thousands.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use tungstenite::Message;
use tungstenite::protocol::WebSocketConfig;

use crate::evloop::Ctx;
use crate::roles::hub::client_addr::client_key;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::wrappers::{Conn, Limits, Phase, Session, Wrappers};
use crate::wire::link::{ConnId, HubRequest};
use crate::wire::wrapper::{RejectCode, ServerMsg};

pub(super) fn ws_config(limits: &Limits) -> WebSocketConfig {
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
pub(super) const READ_BUFFER: usize = 4 * 1024;

/// Lines about refused or dropped peers the hub writes per [`REFUSAL_WINDOW`] in all.
pub(super) const REFUSAL_LINES: u32 = 10;
pub(super) const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// Log `line` about a refused or dropped peer if the budget has room (else count it).
pub(super) fn refusal_line(w: &mut Wrappers, line: impl FnOnce() -> String) {
    summarize_refusals(w, Instant::now());
    if w.refusal_lines.admit(Instant::now()) {
        log::warn!("{}", line());
    }
}

/// The count of lines held back by the budget, once their window has ended.
fn summarize_refusals(w: &mut Wrappers, now: Instant) {
    if let Some(held) = w.refusal_lines.summary_due(now) {
        log::warn!(
            "{held} more refused or dropped wrapper connection(s) were not logged (at most \
             {} lines every {} s)",
            w.refusal_lines.allowance(),
            w.refusal_lines.window().as_secs()
        );
    }
}

pub(super) fn release_addr(w: &mut Wrappers, ip: IpAddr) {
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
pub(super) fn vetted(w: &mut Wrappers, id: ConnId) {
    let Some(conn) = w.conns.get_mut(&id) else {
        return;
    };
    if std::mem::take(&mut conn.in_hello) {
        let ip = conn.peer.ip();
        release_addr(w, ip);
    }
}

/// Drop a connection; main hears of it if it had a session.
pub(super) fn drop_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, why: &str) {
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
        hub.cast_main(HubRequest::WrapperGone {
            conn: id,
            rejected: None,
        });
    }
}

/// Send a `reject` and close the connection once it is flushed; logged within the
/// budget of refusal lines.
pub(super) fn reject(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    code: RejectCode,
    message: &str,
) {
    if let Some(conn) = hub.wrappers.conns.get(&id) {
        // A session's link names its target (welcomed, so main vouched for both).
        let of = match (&conn.target, conn.phase) {
            (Some((run, machine)), Phase::Bound) => format!(
                " (run {run}, machine {})",
                crate::roles::hub::logsafe::clip(machine, 256)
            ),
            _ => String::new(),
        };
        let peer = conn.peer;
        refusal_line(&mut hub.wrappers, || {
            format!(
                "wrapper connection from {peer}{of}: rejected ({code:?}): {}",
                crate::roles::hub::logsafe::clip(message, 300)
            )
        });
    }
    send_reject(hub, ctx, id, code, message);
}

/// Send main's refusal of a hello and close the connection once it is flushed. Not
/// logged here: main logs and records it with its precise reason, within its budgets.
pub(super) fn send_reject(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    code: RejectCode,
    message: &str,
) {
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
        // Main records why a target's link was closed (within its refusal budget).
        hub.cast_main(HubRequest::WrapperGone {
            conn: id,
            rejected: Some((code, crate::roles::hub::logsafe::clip(message, 1024))),
        });
    }
    close(hub, ctx, id);
}

/// Send a control message to a wrapper.
///
/// `output_held` to a wrapper that did not advertise it (an older build) closes its link
/// instead, which is all such a wrapper was ever told when its output was refused: it
/// reconnects and resends from its last ack. Main learns the connection is gone.
pub(crate) fn send(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, msg: &ServerMsg) {
    if matches!(msg, ServerMsg::OutputHeld { .. })
        && let Some(conn) = hub.wrappers.conns.get(&id)
        && !conn.holds_output
    {
        log::debug!("wrapper connection {id}: output refused; an older wrapper, so closing");
        if matches!(conn.phase, Phase::Bound | Phase::Vetting) {
            hub.cast_main(HubRequest::WrapperGone {
                conn: id,
                rejected: None,
            });
        }
        return close(hub, ctx, id);
    }
    broadcast(hub, ctx, &[id], msg);
}

/// Send `msg` to each of `ids` (those gone are skipped), encoded once.
pub(crate) fn broadcast(hub: &mut Hub, ctx: &mut Ctx<Hub>, ids: &[ConnId], msg: &ServerMsg) {
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

pub(super) fn send_text(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    text: tungstenite::Utf8Bytes,
) {
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
pub(crate) fn close(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
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
pub(super) fn arm_sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    hub.wrappers.maybe_waiting = true;
    arm_sweep_if_waiting(hub, ctx);
}

/// While connections wait for their hello (or to close), check them every second. Cheap
/// when nothing changed: called after every event of the hub.
pub(crate) fn arm_sweep_if_waiting(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
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
pub(super) fn sweep(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
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
            && let Some(peer) = hub.wrappers.conns.get(&id).map(|c| c.peer)
        {
            refusal_line(&mut hub.wrappers, || {
                format!("wrapper connection from {peer}: {why}; dropping it")
            });
        }
        drop_conn(hub, ctx, id, why);
    }
    summarize_refusals(&mut hub.wrappers, now);
}
