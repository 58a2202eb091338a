//! The HTTP API, `/ws` and the dashboard (docs/protocols.md, HTTP API) on the hub's loop.
//!
//! One connection goes: accept (a cap on open connections) -> read into a buffer ->
//! `parse` a complete request (size limits) -> `routes` decides: answer at once (static
//! files, errors, `/api/v1/maintenance`), or call main with a typed `AdminRequest` and
//! answer when main does, or upgrade `/ws` (`ws_ui`). Requests of one connection are
//! answered in order (keep-alive and pipelining); while main works on one, the next ones
//! wait in the buffer. Writes go to a buffer flushed on writability.
//!
//! Slow or silent clients cannot hold anything: a request must be complete within
//! `api_request_timeout` of its first byte (else 408 and close), an idle keep-alive
//! connection is closed after `api_idle_timeout`, a client that does not read its
//! answers is dropped. All of it is checked by `sweep` once a second; nothing here ever
//! blocks the loop that also serves the wrappers.
//!
//! The endpoint's state is in `hub/state/http.rs`. The parts, each naming only those
//! below it: `accept` (the listener, a connection's events) and `replies` (main's
//! answer) over `reading`, over `serve` (a request routed, then answered, passed to main
//! or upgraded), over `ws_ui` (`/ws`), over `views`, over `feed`; under them `writing`
//! and `conns` (dropping, reaping, settling the budget), and under those `ws_push` (what
//! goes out to `/ws` clients at once).

mod accept;
mod action;
mod answers;
pub(crate) mod auth;
mod conns;
pub(crate) mod feed;
mod output_json;
pub(crate) mod parse;
mod query;
mod reading;
mod replies;
pub(crate) mod routes;
mod serve;
mod sweep;
pub(crate) mod views;
mod writing;
pub(crate) mod ws_push;
pub(crate) mod ws_ui;

pub(super) use crate::roles::hub::state::http::Http;
pub(super) use replies::{answer, call_failed};
pub(super) use sweep::arm_sweep;
