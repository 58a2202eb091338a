//! `/ws`: the original Saltpeter UI protocol (docs/api.md, `/ws`).
//!
//! 1. Connect: the handshake (tungstenite, over the request bytes the HTTP layer already
//!    read), then the last `config` and `status` messages; from then on `status` again
//!    every 2 s (`views::arm_refresh`).
//! 2. `subscribe` / `unsubscribe` join and leave a job's view (`views`): the view pushes
//!    `details` and `output_chunk` messages to its subscribers as things change, and the
//!    details again every 2 s.
//! 3. `run`, `killCron`, `killMachine` and `getTimeline` become calls to main; `ack` is
//!    accepted and ignored, as by the original.
//!
//! A client that sends malformed or binary frames, or lets its unread messages pile up
//! (`max_write_buffer_size`), is dropped; nothing a client does reaches another client or
//! the wrappers.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::time::Instant;

use serde_json::{Value, json};
use tungstenite::handshake::HandshakeError;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, Utf8Bytes};

use super::conns::{drop_conn, reap};
use super::views::arm_refresh;
use super::ws_push::{CALL_TIMEOUT, leave_view, push_details, push_output, send};
use crate::evloop::Ctx;
use crate::ipc::CallError;
use crate::roles::hub::state::http::{ConnId, Http, Kind};
use crate::roles::hub::state::http::{Replay, Session, WsConn, WsExpect};
use crate::roles::hub::state::{Hub, Waiting};
use crate::wire::admin::RunQuery;
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::link::HubRequest;
use crate::wire::records::RunRecord;

/// Subscriptions one client may hold.
const MAX_SUBSCRIPTIONS: usize = 10_000;
const MAX_JOB_NAME: usize = 512;

fn ws_config(http: &Http) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(http.limits.ws_max_message))
        .max_frame_size(Some(http.limits.ws_max_message))
        .max_write_buffer_size(http.limits.ws_max_write)
}

/// Turn HTTP connection `id`, whose last request (`raw`) asks for `/ws`, into a client.
pub(crate) fn upgrade(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    raw: Vec<u8>,
    who: Option<crate::roles::hub::state::identity::Identity>,
    cookie: Option<String>,
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let config = ws_config(http);
    let Some(mut conn) = http.conns.remove(&id) else {
        return;
    };
    // Its buffers move into the WebSocket (bounded by `ws_max_write`).
    http.budget.release(&mut conn.charge);
    let Kind::Http(hc) = conn.kind else {
        return;
    };
    let mut hc = *hc;
    if !hc.wbuf.is_empty() {
        // Answers to earlier pipelined requests go first.
        if hc.stream.write_all(&hc.wbuf).is_err() {
            ctx.remove(conn.token);
            return;
        }
    }
    let mut pending = raw;
    pending.extend_from_slice(&hc.rbuf);
    let replay = Replay {
        pending,
        pos: 0,
        stream: hc.stream,
        written: 0,
    };
    let session = match tungstenite::accept_with_config(replay, Some(config)) {
        Ok(ws) => Session::Open(Box::new(ws)),
        Err(HandshakeError::Interrupted(mid)) => Session::Handshaking(Box::new(mid)),
        Err(HandshakeError::Failure(e)) => {
            log::info!("/ws handshake from {} failed: {e}", conn.peer);
            ctx.remove(conn.token);
            return;
        }
    };
    let open = matches!(session, Session::Open(_));
    conn.kind = Kind::Ws(Box::new(WsConn {
        session: Some(session),
        since: Instant::now(),
        subs: BTreeSet::new(),
        positions: HashMap::new(),
        timelines: HashMap::new(),
        next_req: 1,
        who,
        cookie,
        queued: 0,
    }));
    http.conns.insert(id, conn);
    if open {
        greet(hub, ctx, id);
    }
}

fn ws_of(hub: &mut Hub, id: ConnId) -> Option<&mut WsConn> {
    match &mut hub.http.as_mut()?.conn_mut(id)?.kind {
        Kind::Ws(ws) => Some(ws),
        Kind::Http(_) => None,
    }
}

/// A new client gets the configuration and the status at once, and the refresh runs.
fn greet(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    for msg in [http.ui.config.clone(), http.ui.status.clone()]
        .into_iter()
        .flatten()
    {
        send(http, id, &msg);
    }
    arm_refresh(hub, ctx);
}

pub(crate) fn on_event(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    let Some(ws) = ws_of(hub, id) else {
        return;
    };
    let mut socket = match ws.session.take() {
        Some(Session::Handshaking(mid)) => match mid.handshake() {
            Ok(socket) => {
                ws.session = Some(Session::Open(Box::new(socket)));
                greet(hub, ctx, id);
                let Some(ws) = ws_of(hub, id) else {
                    return;
                };
                match ws.session.take() {
                    Some(Session::Open(s)) => s,
                    _ => return,
                }
            }
            Err(HandshakeError::Interrupted(mid)) => {
                ws.session = Some(Session::Handshaking(Box::new(mid)));
                return;
            }
            Err(HandshakeError::Failure(e)) => {
                drop_conn(hub, ctx, id, &format!("/ws handshake failed: {e}"));
                return;
            }
        },
        Some(Session::Open(s)) => s,
        None => return,
    };
    let mut incoming = Vec::new();
    let mut ended = None;
    loop {
        match socket.read() {
            Ok(Message::Text(t)) => incoming.push(t),
            Ok(Message::Binary(_)) => {
                ended = Some("binary frames are not part of the protocol".to_string());
                break;
            }
            Ok(_) => {} // pings are answered by tungstenite; close ends the loop below
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                ended = Some("closed by peer".to_string());
                break;
            }
            Err(e) => {
                ended = Some(format!("bad frames: {e}"));
                break;
            }
        }
    }
    if let Err(e) = socket.flush()
        && !matches!(&e, tungstenite::Error::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
        && ended.is_none()
    {
        ended = Some(format!("write failed: {e}"));
    }
    if let Some(ws) = ws_of(hub, id) {
        ws.session = Some(Session::Open(socket));
    }
    for text in incoming {
        client_message(hub, id, text.as_str());
    }
    if let Some(why) = ended {
        drop_conn(hub, ctx, id, &why);
    }
}

/// The job names of a `subscribe` / `unsubscribe` value (a name or a list of names).
fn job_names(v: &Value) -> Vec<String> {
    let list: Vec<&Value> = match v {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    list.into_iter()
        .filter_map(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= MAX_JOB_NAME)
        .map(str::to_string)
        .collect()
}

/// One message of a client; the first key the original knows wins.
fn client_message(hub: &mut Hub, id: ConnId, text: &str) {
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(text) else {
        log::debug!("/ws client {id}: ignoring a message that is not a JSON object");
        return;
    };
    let command = |req: AdminRequest| (req, WsExpect::Command);
    let call = if let Some(v) = msg.get("subscribe") {
        subscribe(hub, id, job_names(v));
        None
    } else if let Some(v) = msg.get("unsubscribe") {
        for job in job_names(v) {
            unsubscribe(hub, id, &job);
        }
        None
    } else if msg.contains_key("ack") {
        None
    } else if let Some(job) = msg.get("run").and_then(Value::as_str) {
        Some(command(AdminRequest::RunNow {
            job: job.to_string(),
            targets: None,
        }))
    } else if let Some(job) = msg.get("killCron").and_then(Value::as_str) {
        Some(command(AdminRequest::KillJob {
            job: job.to_string(),
            machine: None,
            run: None,
        }))
    } else if let Some(v) = msg.get("killMachine") {
        match (v["cron"].as_str(), v["machine"].as_str()) {
            (Some(job), Some(machine)) => Some(command(AdminRequest::KillJob {
                job: job.to_string(),
                machine: Some(machine.to_string()),
                run: v["job_instance"]
                    .as_str()
                    .and_then(crate::wire::ui::run_of_instance),
            })),
            _ => None,
        }
    } else if let Some(v) = msg.get("getTimeline") {
        timeline_request(hub, id, v)
    } else {
        None
    };
    if let Some((req, expect)) = call {
        let Some((who, cookie)) = ws_of(hub, id).map(|ws| (ws.who.clone(), ws.cookie.clone()))
        else {
            return;
        };
        let who = match (who, hub.http.as_mut()) {
            (Some(who), Some(http)) => match http.auth.recheck(&who, cookie.as_deref()) {
                Ok(now) => Some(now),
                Err(denied) => {
                    // Logged out or expired: say so and close; the dashboard reconnects
                    // and is sent to the login.
                    let text = json!({"error": denied.message()}).to_string();
                    send(http, id, &Utf8Bytes::from(text));
                    if let Some(conn) = http.conn_mut(id) {
                        conn.mark_dead(denied.message().to_string());
                    }
                    return;
                }
            },
            (who, _) => who,
        };
        let msg = match &who {
            Some(who) => match crate::roles::hub::state::identity::authorize(who, &req) {
                Ok(()) => who.request(req),
                Err(why) => {
                    if let Some(http) = hub.http.as_mut() {
                        let text = json!({"error": why.to_string()}).to_string();
                        send(http, id, &Utf8Bytes::from(text));
                    }
                    return;
                }
            },
            None => HubRequest::Admin(req),
        };
        hub.call_main(msg, CALL_TIMEOUT, Waiting::Ws(id, expect));
    }
}

fn timeline_request(hub: &mut Hub, id: ConnId, v: &Value) -> Option<(AdminRequest, WsExpect)> {
    let now = chrono::Utc::now();
    let start = v["start_date"]
        .as_str()
        .and_then(|s| super::query::parse_date(s, now))
        .unwrap_or(now.timestamp_millis() - 5 * 60 * 1000);
    let end = v["end_date"]
        .as_str()
        .and_then(|s| super::query::parse_date(s, now))
        .unwrap_or(now.timestamp_millis());
    let ws = ws_of(hub, id)?;
    let req_no = ws.next_req;
    ws.next_req += 1;
    ws.timelines.insert(req_no, v["id"].clone());
    Some((
        AdminRequest::Runs(RunQuery {
            since: Some(start),
            until: Some(end),
            limit: 10_000,
            ..RunQuery::default()
        }),
        WsExpect::Timeline(req_no),
    ))
}

fn subscribe(hub: &mut Hub, id: ConnId, jobs: Vec<String>) {
    let mut watch = Vec::new();
    let mut ready = Vec::new();
    {
        let Some(http) = hub.http.as_mut() else {
            return;
        };
        let Some(Kind::Ws(ws)) = http.conns.get_mut(&id).map(|c| &mut c.kind) else {
            return;
        };
        for job in jobs {
            if ws.subs.len() >= MAX_SUBSCRIPTIONS || !ws.subs.insert(job.clone()) {
                continue;
            }
            let view = http.ui.jobs.entry(job.clone()).or_default();
            let first = view.subscribers.is_empty();
            view.subscribers.insert(id);
            if first {
                watch.push(job);
            } else if view.details.is_some() {
                ready.push(job);
            }
        }
        if let Some(status) = http.ui.status.clone() {
            send(http, id, &status);
        }
    }
    for job in watch {
        hub.cast_main(HubRequest::UiWatch { job, watch: true });
    }
    for job in ready {
        push_details(hub, &job, Some(id));
        push_output(hub, &job, Some(id));
    }
}

fn unsubscribe(hub: &mut Hub, id: ConnId, job: &str) {
    if let Some(ws) = ws_of(hub, id) {
        if !ws.subs.remove(job) {
            return;
        }
        ws.positions.retain(|(j, _), _| j != job);
    }
    leave_view(hub, id, job);
}

/// main answered a client's command or timeline request.
pub(crate) fn answer(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    id: ConnId,
    expect: WsExpect,
    resp: AdminResponse,
) {
    match (expect, resp) {
        (WsExpect::Command, AdminResponse::Failure(f)) => {
            log::info!("/ws client {id}: command refused: {f}");
        }
        (WsExpect::Command, _) => {}
        (WsExpect::Timeline(req), resp) => {
            let runs = match resp {
                AdminResponse::Runs(runs) => runs,
                other => {
                    log::info!("/ws client {id}: timeline failed: {other:?}");
                    Vec::new()
                }
            };
            send_timeline(hub, id, req, &runs);
        }
    }
    reap(hub, ctx);
}

pub(crate) fn call_failed(hub: &mut Hub, id: ConnId, expect: WsExpect, err: &CallError) {
    log::info!("/ws client {id}: request to main failed: {err}");
    if let WsExpect::Timeline(req) = expect {
        send_timeline(hub, id, req, &[]);
    }
}

fn send_timeline(hub: &mut Hub, id: ConnId, req: u64, runs: &[RunRecord]) {
    let Some(ws) = ws_of(hub, id) else {
        return;
    };
    let req_id = ws.timelines.remove(&req).unwrap_or(Value::Null);
    let serial = crate::wire::records::now_ms();
    let msg = crate::json::ui::timeline_message(req_id, runs, serial);
    if let Some(http) = hub.http.as_mut() {
        send(http, id, &Utf8Bytes::from(msg.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_names_take_a_name_or_a_list() {
        assert_eq!(job_names(&json!("a")), ["a"]);
        assert_eq!(job_names(&json!(["a", 3, "", "b"])), ["a", "b"]);
        assert!(job_names(&json!({"x": 1})).is_empty());
    }
}
