//! Reading an HTTP connection: read, serve the complete requests, write, in rounds
//! while something moves, with the unsent-answer cap that stops reading
//! (`MAX_UNSENT`).

use std::io::{self, Read};
use std::time::Instant;

use super::conns::{drop_conn, http_conn};
use super::parse::{self, Parsed, Response};
use super::serve::process;
use super::writing::{flush, queue};
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::budget::{self, READ_CHUNK};
use crate::roles::hub::state::http::{Conn, ConnId, ConnState, Kind, MAX_UNSENT};

/// Read, serve and write until nothing moves. Reading stops while the answers not yet
/// sent pass [`MAX_UNSENT`]: a client that pipelines requests and never reads its
/// answers then holds at most one buffer of each, and the kernel's socket buffers push
/// back on it. Each round only continues while the last one made progress, so the loop
/// ends; with edge-triggered readiness, stopping before `WouldBlock` is only safe
/// because a later writable event (the client read something) brings us back here.
pub(super) fn on_http_event(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    loop {
        let Some(progress) = http_round(hub, ctx, id) else {
            return;
        };
        if !progress {
            return;
        }
    }
}

/// One round; `None` when the connection is gone, `Some(progress)` otherwise.
///
/// What each read adds is counted into the budget at once (`Budget::settle`), and the
/// budget is asked again before the next read: counting only after the event let one
/// connection read a whole request (~1 MiB) past a spent budget, and the sweep's retry of
/// a thousand held-back connections read them all before counting any (435 MB held
/// against a budget of 48 MiB + floors).
fn http_round(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) -> Option<bool> {
    let http = hub.http.as_mut()?;
    let limits = http.limits;
    let budget = &mut http.budget;
    let Some(Conn {
        kind: Kind::Http(conn),
        charge,
        ..
    }) = http.conns.get_mut(&id)
    else {
        return None;
    };
    conn.starved = false;
    let (rbuf_before, wbuf_before, served_before) = (conn.rbuf.len(), conn.wbuf.len(), conn.served);
    // Everything the peer sent so far, within what one request may need.
    let cap = limits.parse.max_header + limits.parse.max_body + READ_CHUNK;
    let mut buf = [0u8; READ_CHUNK];
    let mut ended = false;
    let mut read_any = false;
    let mut failed = None;
    while conn.wbuf.len() < MAX_UNSENT && conn.rbuf.len() <= cap {
        let room = budget.room_to_read(conn.rbuf.len() + conn.wbuf.len());
        if room == 0 {
            // The hub's request buffers are at their share of the budget: this one keeps
            // its floor and waits (the sweep tries it again).
            conn.starved = true;
            break;
        }
        match conn.stream.read(&mut buf[..room]) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => {
                read_any = true;
                if matches!(conn.state, ConnState::Closing { .. }) {
                    continue; // draining what a closing client still sends
                }
                if conn.rbuf.is_empty() && conn.partial_since.is_none() {
                    conn.partial_since = Some(Instant::now());
                }
                budget::reserve_for(&mut conn.rbuf, n);
                conn.rbuf.extend_from_slice(&buf[..n]);
                budget.settle(charge, conn.rbuf.len(), conn.wbuf.len());
                if conn.rbuf.len() > cap
                    && matches!(
                        parse::parse(&conn.rbuf, &limits.parse),
                        Ok(Parsed::Incomplete)
                    )
                {
                    // One request larger than any may be: refuse it. (A buffer of many
                    // complete pipelined requests is served first, below.)
                    let resp = Response::error(
                        413,
                        "payload_too_large",
                        "the request is over the size limit",
                    );
                    conn.rbuf.clear();
                    queue(conn, &resp, false, false);
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                failed = Some(format!("read failed: {e}"));
                break;
            }
        }
    }
    if let Some(why) = failed {
        drop_conn(hub, ctx, id, &why);
        return None;
    }
    process(hub, ctx, id);
    let conn = http_conn(hub, id)?;
    budget::shrink(&mut conn.rbuf);
    if ended {
        match conn.state {
            // The answer still goes out; the peer may only have shut its write side.
            ConnState::Waiting { .. } => conn.close_after_write = true,
            _ if !conn.wbuf.is_empty() => conn.close_after_write = true,
            _ => {
                drop_conn(hub, ctx, id, "closed by peer");
                return None;
            }
        }
    }
    flush(hub, ctx, id);
    let conn = http_conn(hub, id)?;
    let moved = read_any
        || conn.served != served_before
        || conn.wbuf.len() < wbuf_before
        || conn.rbuf.len() != rbuf_before;
    // Only go round again if there is more to do: requests waiting in the buffer or on
    // the socket, and room for their answers.
    Some(moved && !ended && conn.wbuf.len() < MAX_UNSENT && conn.state == ConnState::Reading)
}
