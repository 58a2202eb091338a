//! The API connections' bookkeeping: dropping one (a `/ws` client's subscriptions go
//! with it), reaping those a failed write marked dead, settling what each holds into the
//! budget.

use super::ws_push;
use crate::evloop::Ctx;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, HttpConn, Kind};

/// Drop a connection now; a `/ws` client's subscriptions go with it.
pub(super) fn drop_conn(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, why: &str) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(mut conn) = http.conns.remove(&id) else {
        return;
    };
    http.budget.release(&mut conn.charge);
    http.budget.give_back();
    log::debug!("API connection {id} from {} closed: {why}", conn.peer);
    ctx.remove(conn.token);
    if let Kind::Ws(ws) = conn.kind {
        ws_push::forget_client(hub, id, &ws);
    }
}

/// Drop the connections marked dead by a write that failed.
pub(super) fn reap(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let Some(http) = hub.http.as_ref() else {
        return;
    };
    let dead: Vec<(ConnId, String)> = http
        .conns
        .iter()
        .filter_map(|(id, c)| c.dead.clone().map(|why| (*id, why)))
        .collect();
    for (id, why) in dead {
        drop_conn(hub, ctx, id, &why);
    }
}

/// Count connection `id`'s buffers into the budget as they are now.
pub(super) fn settle(hub: &mut Hub, id: ConnId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(conn) = http.conns.get_mut(&id) else {
        return;
    };
    let (request, answers) = match &conn.kind {
        Kind::Http(c) => (c.rbuf.len(), c.wbuf.len()),
        Kind::Ws(ws) => (0, ws.backlog()),
    };
    http.budget.settle(&mut conn.charge, request, answers);
}

pub(super) fn http_conn(hub: &mut Hub, id: ConnId) -> Option<&mut HttpConn> {
    match &mut hub.http.as_mut()?.conns.get_mut(&id)?.kind {
        Kind::Http(c) => Some(c),
        Kind::Ws(_) => None,
    }
}
