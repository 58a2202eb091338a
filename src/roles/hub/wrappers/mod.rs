//! The wrapper endpoint: WebSocket protocol v1 (docs/protocols.md, Wrapper <-> hub) on the hub's loop.
//!
//! Each connection goes: TCP accept (per-address quota of connections still in their
//! hello; when it is full the oldest of them that has not said hello makes room) -> non-blocking WebSocket
//! handshake on `/wrapper/v1` -> `hello` within the hello deadline -> main's verdict
//! (`welcome` or `reject`) -> session: control messages and binary output forwarded to
//! main as typed requests, main's commands sent back. Frame and message sizes are bounded
//! by tungstenite's limits, the write buffer too (a peer that does not read is dropped).
//! Anything malformed is rejected with a reason and a log line; other connections are
//! never affected. A bound connection knows its job, run and machine, so the output and
//! heartbeats of watched jobs also feed the `/ws` live view on the way (`http::feed`).

mod accept;
mod conns;
mod hello;
mod message;
mod read;

pub(super) use super::state::wrappers::{Limits, Wrappers};
pub(super) use conns::{arm_sweep_if_waiting, broadcast, close, send};
pub(super) use hello::{hello_failed, verdict};
pub(super) use read::on_credit;
