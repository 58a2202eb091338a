//! Answers queued on an HTTP connection and written out as the socket takes them.

use std::io::{self, Write};
use std::time::Instant;

use super::conns::{drop_conn, http_conn};
use super::parse::Response;
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, ConnState, HttpConn};

/// Queue an answer; the connection reads the next request (or closes after it).
pub(super) fn queue(conn: &mut HttpConn, resp: &Response, keep_alive: bool, head: bool) {
    conn.wbuf
        .extend_from_slice(&resp.to_bytes(keep_alive, head));
    conn.state = ConnState::Reading;
    conn.idle_since = Instant::now();
    if !keep_alive {
        conn.close_after_write = true;
    }
}

/// Write what is queued; close once the last answer is out.
pub(super) fn flush(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    if let Err(why) = write_out(hub, id) {
        drop_conn(hub, ctx, id, &why);
    }
}

/// `flush` without the loop context: a failure marks the connection for `reap`.
pub(super) fn write_out(hub: &mut Hub, id: ConnId) -> Result<(), String> {
    let Some(conn) = http_conn(hub, id) else {
        return Ok(());
    };
    let mut written = 0;
    while written < conn.wbuf.len() {
        match conn.stream.write(&conn.wbuf[written..]) {
            Ok(0) => return Err("write returned 0".into()),
            Ok(n) => {
                written += n;
                conn.last_write = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("write failed: {e}")),
        }
    }
    conn.wbuf.drain(..written);
    crate::roles::hub::state::budget::shrink(&mut conn.wbuf);
    // TLS: records rustls still holds (the socket was full) go out on this event too.
    match conn.stream.flush() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(format!("write failed: {e}")),
    }
    if conn.wbuf.is_empty()
        && conn.close_after_write
        && !matches!(
            conn.state,
            ConnState::Closing { .. } | ConnState::Waiting { .. }
        )
    {
        // Close the write side and drain what the peer still sends for a moment, so
        // the answer is not lost to a reset.
        conn.stream.shutdown_write();
        conn.state = ConnState::Closing {
            since: Instant::now(),
        };
    }
    Ok(())
}
