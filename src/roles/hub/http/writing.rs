//! Answers queued on an HTTP connection and written out as the socket takes them.

use std::io::{self, Write};
use std::time::Instant;

use super::conns::{drop_conn, http_conn};
use super::parse::Response;
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, ConnState, HttpConn};

/// Why queued answers could not be written: the connection is then dropped.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    #[error("write returned 0")]
    Zero,
    #[error("write failed: {0}")]
    Failed(io::Error),
}

/// Queue an answer; the connection reads the next request (or closes after it).
pub(super) fn queue(conn: &mut HttpConn, resp: &Response, keep_alive: bool, head: bool) {
    let bytes = resp.to_bytes(keep_alive, head);
    // Nothing queued before it (the usual case): the answer becomes the buffer, rather
    // than a second copy of an answer of up to 16 MiB.
    if conn.wbuf.is_empty() {
        conn.wbuf = bytes;
    } else {
        conn.wbuf.extend_from_slice(&bytes);
    }
    conn.state = ConnState::Reading;
    conn.idle_since = Instant::now();
    if !keep_alive {
        conn.close_after_write = true;
    }
}

/// Write what is queued; close once the last answer is out.
pub(super) fn flush(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    if let Err(why) = write_out(hub, id) {
        drop_conn(hub, ctx, id, &why.to_string());
    }
}

/// `flush` without the loop context: a failure marks the connection for `reap`.
pub(super) fn write_out(hub: &mut Hub, id: ConnId) -> Result<(), WriteError> {
    let Some(conn) = http_conn(hub, id) else {
        return Ok(());
    };
    let mut written = 0;
    while written < conn.wbuf.len() {
        match conn.stream.write(&conn.wbuf[written..]) {
            Ok(0) => return Err(WriteError::Zero),
            Ok(n) => {
                written += n;
                conn.last_write = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WriteError::Failed(e)),
        }
    }
    conn.wbuf.drain(..written);
    crate::roles::hub::state::budget::shrink(&mut conn.wbuf);
    // TLS: records rustls still holds (the socket was full) go out on this event too.
    match conn.stream.flush() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(WriteError::Failed(e)),
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
