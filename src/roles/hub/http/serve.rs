//! Serving the complete requests in a connection's buffer, in order: each is routed, and
//! answered at once, or passed to main (the connection then waits for its answer), or
//! upgraded to `/ws`.

use std::time::Instant;

use super::conns::http_conn;
use super::parse::{self, Parsed, Response};
use super::writing::queue;
use super::{action, auth, routes, ws_ui};
use crate::evloop::Ctx;
use crate::roles::hub::state::http::MAX_UNSENT;
use crate::roles::hub::state::http::{Conn, ConnId, ConnState, Expect, Kind};
use crate::roles::hub::state::{Hub, Waiting};
use crate::roles::hub::state::{budget, identity};
use crate::wire::link::HubRequest;

/// Serve the complete requests in the buffer, in order, until one waits for main.
pub(super) fn process(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    loop {
        let Some(http) = hub.http.as_mut() else {
            return;
        };
        let limits = http.limits;
        let Some(Conn {
            kind: Kind::Http(conn),
            ..
        }) = http.conns.get_mut(&id)
        else {
            return;
        };
        if conn.state != ConnState::Reading
            || conn.rbuf.is_empty()
            || conn.close_after_write
            || conn.wbuf.len() >= MAX_UNSENT
        {
            return;
        }
        if !http.budget.may_serve(conn.rbuf.len() + conn.wbuf.len()) {
            conn.starved = true;
            return;
        }
        let (req, used) = match parse::parse(&conn.rbuf, &limits.parse) {
            Ok(Parsed::Incomplete) => return,
            Ok(Parsed::Complete(req, used)) => (req, used),
            Err(rejection) => {
                conn.rbuf.clear();
                queue(conn, &Response::rejection(&rejection), false, false);
                if let Some(h) = hub.http.as_mut() {
                    h.stats.rejected += 1;
                }
                return;
            }
        };
        let raw: Vec<u8> = conn.rbuf.drain(..used).collect();
        conn.partial_since = (!conn.rbuf.is_empty()).then(Instant::now);
        conn.served += 1;
        if let Some(h) = hub.http.as_mut() {
            h.stats.requests += 1;
        }
        dispatch(hub, ctx, id, req, raw);
    }
}

fn dispatch(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, req: parse::Request, raw: Vec<u8>) {
    let keep_alive = req.keep_alive();
    let head = req.method == "HEAD";
    let Some(peer) = hub
        .http
        .as_ref()
        .and_then(|h| h.conns.get(&id))
        .map(|c| c.peer.ip())
    else {
        return;
    };
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let mut who = None;
    match routes::route(http, &req, peer, &mut who) {
        action::Action::Respond(resp) => {
            if let Some(conn) = http_conn(hub, id) {
                queue(conn, &resp, keep_alive, head);
            }
        }
        action::Action::Call {
            req: admin,
            expect,
            timeout,
        } => {
            if !reserve_answer(hub, id, expect) {
                let busy = Response::error(
                    503,
                    "busy",
                    "the server holds too many unsent answers; retry shortly",
                )
                .with_header("Retry-After", "1");
                if let Some(conn) = http_conn(hub, id) {
                    queue(conn, &busy, keep_alive, head);
                }
                return;
            }
            if let Some(conn) = http_conn(hub, id) {
                conn.state = ConnState::Waiting { keep_alive, head };
            }
            let msg = match &who {
                Some(who) => who.request(admin),
                None => HubRequest::Admin(admin),
            };
            hub.call_main(msg, timeout, Waiting::Http(id, expect));
        }
        action::Action::Upgrade => {
            let cookie = who
                .as_ref()
                .filter(|w| w.via == identity::Principal::Cookie)
                .and_then(|_| auth::session_cookie(&req))
                .map(str::to_string);
            ws_ui::upgrade(hub, ctx, id, raw, who, cookie)
        }
    }
}

/// Set aside room for the answer expected on connection `id` (`budget`, rule 3).
fn reserve_answer(hub: &mut Hub, id: ConnId, expect: Expect) -> bool {
    let bytes = match expect {
        Expect::Output { raw, max_bytes, .. } => {
            budget::output_answer_room(u64::from(max_bytes), raw)
        }
        _ => budget::CALL_RESERVE,
    };
    let Some(http) = hub.http.as_mut() else {
        return false;
    };
    let Some(conn) = http.conns.get_mut(&id) else {
        return false;
    };
    let own = match &conn.kind {
        Kind::Http(c) => c.rbuf.len() + c.wbuf.len(),
        Kind::Ws(_) => 0,
    };
    http.budget.reserve(&mut conn.charge, bytes, own)
}
