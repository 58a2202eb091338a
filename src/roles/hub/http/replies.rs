//! main's answer to a request of a connection (or its failure): queued in the order of
//! the requests, then the connection reads on.

use super::conns::{http_conn, settle};
use super::parse::Response;
use super::writing::{queue, write_out};
use super::{answers, reading};
use crate::evloop::Ctx;
use crate::ipc::CallError;
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, ConnState, Expect};
use crate::wire::admin::AdminResponse;

/// main answered a request of connection `id`.
pub(crate) fn answer(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    expect: Expect,
    resp: AdminResponse,
) {
    let Some(http) = hub.http.as_ref() else {
        return;
    };
    let response = answers::render(http, expect, resp);
    respond_waiting(hub, id, &response);
    // Read too: requests the client sent meanwhile may wait in the socket, with no new
    // readiness to announce them.
    reading::on_http_event(hub, ctx, id);
    settle(hub, id);
}

/// main did not answer a request of connection `id`.
pub(crate) fn call_failed(hub: &mut Hub, id: ConnId, err: &CallError) {
    let response = match err {
        CallError::Timeout(..) => Response::error(504, "timeout", &err.to_string()),
        CallError::PeerGone(_) => Response::error(503, "unavailable", &err.to_string()),
        CallError::Remote(_) | CallError::WrongReply { .. } => {
            Response::error(500, "internal", &err.to_string())
        }
    };
    respond_waiting(hub, id, &response);
    if let Err(why) = write_out(hub, id)
        && let Some(conn) = hub.http.as_mut().and_then(|h| h.conn_mut(id))
    {
        conn.mark_dead(why.to_string());
    }
    settle(hub, id);
}

fn respond_waiting(hub: &mut Hub, id: ConnId, response: &Response) {
    if let Some(http) = hub.http.as_mut()
        && let Some(conn) = http.conns.get_mut(&id)
    {
        http.budget.unreserve(&mut conn.charge);
    }
    if let Some(conn) = http_conn(hub, id)
        && let ConnState::Waiting { keep_alive, head } = conn.state
    {
        queue(conn, response, keep_alive, head);
    }
}
