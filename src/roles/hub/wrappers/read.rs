//! Reading a wrapper connection, within the output budget (`state/flow.rs`).
//!
//! 1. An event (or room freed by main's credits) reads the connection: the handshake
//!    first, then WebSocket messages until the socket would block or, for a bound
//!    connection, until its output in flight reaches the budget; then the connection
//!    is paused (queued in `flow`), with whatever the wrapper sent still unread. An
//!    output frame counts what it declares it holds (`OutputFrame::declared_len`), not
//!    its compressed size, so a wrapper cannot make the hub decompress more than the
//!    budget by sending frames that compress well (a decompression bomb).
//! 2. The messages read are handled in order (`handle_message`); pending writes
//!    (acks, commands) are flushed on every event, paused or not.
//! 3. main's credits free budget; the paused connections with room are read again at
//!    once, oldest first (edge-triggered sockets would not say so again).
//! 4. A paused connection is alive (its output waits in the socket unread): every second
//!    the hub tells main so, like a heartbeat, so waiting on a slow database is not
//!    mistaken for a silent wrapper (main's limit is 3 heartbeats, at least 3 s).

use std::io;
use std::time::Duration;

use mio::event::Event;
use tungstenite::Message;
use tungstenite::handshake::HandshakeError;

use super::conns::{drop_conn, refusal_line};
use super::message::handle_message;
use crate::evloop::{Ctx, Flow};
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::wrappers::{Phase, Session};
use crate::wire::link::{ConnId, HubRequest, output_cost};
use crate::wire::wrapper::OutputFrame;

/// How often the hub vouches for paused connections (main declares a wrapper lost after
/// 3 heartbeats of silence, and a heartbeat is at least a second).
const PAUSE_VOUCH: Duration = Duration::from_secs(1);

pub(super) fn on_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, _event: &Event) -> Flow {
    if !hub.wrappers.conns.contains_key(&id) {
        return Flow::Close;
    }
    read_conn(hub, ctx, id);
    Flow::Continue
}

/// Read what the connection has, within the budget; handle it.
fn read_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    let Some(conn) = hub.wrappers.conns.get_mut(&id) else {
        return;
    };
    let (peer, bound) = (conn.peer, conn.phase == Phase::Bound);
    let session = match conn.session.take() {
        Some(Session::Handshaking(mid)) => match mid.handshake() {
            Ok(ws) => Session::Open(Box::new(ws)),
            Err(HandshakeError::Interrupted(mid)) => {
                conn.session = Some(Session::Handshaking(Box::new(mid)));
                return;
            }
            Err(HandshakeError::Failure(e)) => {
                refusal_line(&mut hub.wrappers, || {
                    format!(
                        "wrapper handshake from {peer} failed: {}",
                        crate::roles::hub::logsafe::clip(&e.to_string(), 300)
                    )
                });
                drop_conn(hub, ctx, id, "handshake failed");
                return;
            }
        },
        Some(open) => open,
        None => return,
    };
    let Session::Open(mut ws) = session else {
        return;
    };
    let mut incoming = Vec::new();
    let mut ended: Option<String> = None;
    // Output read this turn, charged to the budget only when forwarded.
    let mut reading = 0u64;
    let mut paused = false;
    loop {
        if bound && !hub.wrappers.flow.may_read(id, reading) {
            paused = true;
            break;
        }
        match ws.read() {
            Ok(msg) => {
                // Counted at what it declares it holds, before anything is decompressed
                // (`handle_message`): 50 bytes of zstd declaring a MiB cost a MiB.
                if let Message::Binary(bytes) = &msg {
                    reading += output_cost(OutputFrame::declared_len(bytes));
                }
                incoming.push(msg);
            }
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                ended = Some("closed by peer".into());
                break;
            }
            Err(e) => {
                refusal_line(&mut hub.wrappers, || {
                    format!(
                        "wrapper connection from {peer}: {}; dropping it",
                        crate::roles::hub::logsafe::clip(&e.to_string(), 300)
                    )
                });
                ended = Some(e.to_string());
                break;
            }
        }
    }
    if let Err(e) = ws.flush()
        && !matches!(&e, tungstenite::Error::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
        && ended.is_none()
    {
        ended = Some(format!("write failed: {e}"));
    }
    if let Some(conn) = hub.wrappers.conns.get_mut(&id) {
        conn.session = Some(Session::Open(ws));
    }
    for msg in incoming {
        if !hub.wrappers.conns.contains_key(&id) {
            break;
        }
        handle_message(hub, ctx, id, msg);
    }
    if let Some(why) = ended {
        drop_conn(hub, ctx, id, &why);
    } else if paused && hub.wrappers.conns.contains_key(&id) {
        hub.wrappers.flow.pause(id);
        arm_pause_watch(hub, ctx);
    }
}

/// main's credits for output it no longer holds: the budget they free goes to the
/// paused connections, oldest first.
pub(crate) fn on_credit(hub: &mut Hub, ctx: &mut Ctx<Hub>, credits: Vec<(ConnId, u64)>) {
    for (conn, cost) in credits {
        hub.wrappers.flow.credited(conn, cost);
    }
    for id in hub.wrappers.flow.resumable() {
        read_conn(hub, ctx, id);
    }
}

/// While connections are paused, vouch for them every `PAUSE_VOUCH`.
fn arm_pause_watch(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    if hub.wrappers.pause_watch_armed || !hub.wrappers.flow.any_paused() {
        return;
    }
    hub.wrappers.pause_watch_armed = true;
    ctx.after(PAUSE_VOUCH, |hub: &mut Hub, ctx| {
        hub.wrappers.pause_watch_armed = false;
        let paused: Vec<ConnId> = hub.wrappers.flow.paused().collect();
        for conn in paused {
            if hub
                .wrappers
                .conns
                .get(&conn)
                .is_some_and(|c| c.phase == Phase::Bound)
            {
                hub.cast_main(HubRequest::WrapperHeartbeat {
                    conn,
                    suspended: None,
                });
            }
        }
        arm_pause_watch(hub, ctx);
    });
}
