//! What goes out to `/ws` clients at once, without waiting: a message to one client, a
//! job's details and its targets' live output to the job's subscribers; and a client
//! leaving a job's view (the last one out tells main). Below everything else of `/ws`,
//! which pushes through it; a write that fails marks the connection dead, and the caller
//! reaps it (`conns`).

use std::io;
use std::time::Duration;

use tungstenite::{Message, Utf8Bytes};

use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, Http, Kind};
use crate::roles::hub::state::http::{Session, WsConn};
use crate::roles::hub::state::live::{LiveText, Position};
use crate::wire::link::HubRequest;

pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Send one text message to client `id` (a failure marks it for `reap`).
/// A client that does not read keeps its floor of the hub's budget (`budget.rs`); past
/// it, while the budget is spent, it is dropped rather than let its backlog grow (and
/// never past `ws_max_write`, tungstenite's own cap).
pub(crate) fn send(http: &mut Http, id: ConnId, text: &Utf8Bytes) {
    let Some(conn) = http.conns.get_mut(&id) else {
        return;
    };
    let Kind::Ws(ws) = &mut conn.kind else {
        return;
    };
    let backlog = ws.backlog();
    if backlog >= crate::roles::hub::state::budget::FLOOR && !http.budget.may_serve(backlog) {
        conn.mark_dead(format!(
            "/ws client does not read: {backlog} bytes unsent while the hub's budget is spent"
        ));
        return;
    }
    let Some(Session::Open(socket)) = ws.session.as_mut() else {
        return;
    };
    ws.queued += text.len() as u64;
    let failed = match socket.send(Message::Text(text.clone())) {
        Ok(()) => None,
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("/ws write failed: {e}")),
    };
    let backlog = ws.backlog();
    if let Some(why) = failed {
        conn.mark_dead(why);
    }
    // Counted at once: many clients fed in one event must see each other's backlogs.
    http.budget.settle(&mut conn.charge, 0, backlog);
    http.stats.ws_messages_sent += 1;
}

pub(crate) fn leave_view(hub: &mut Hub, id: ConnId, job: &str) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(view) = http.ui.jobs.get_mut(job) else {
        return;
    };
    view.subscribers.remove(&id);
    if view.subscribers.is_empty() {
        http.ui.jobs.remove(job);
        hub.cast_main(HubRequest::UiWatch {
            job: job.to_string(),
            watch: false,
        });
    }
}

/// A client went away: its subscriptions end.
pub(crate) fn forget_client(hub: &mut Hub, id: ConnId, ws: &WsConn) {
    for job in &ws.subs {
        leave_view(hub, id, job);
    }
}

/// `details` of `job` to its subscribers (or only to `only`).
pub(crate) fn push_details(hub: &mut Hub, job: &str, only: Option<ConnId>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(view) = http.ui.jobs.get(job) else {
        return;
    };
    let Some(text) = view.render_details() else {
        return;
    };
    let targets: Vec<ConnId> = match only {
        Some(id) => vec![id],
        None => view.subscribers.iter().copied().collect(),
    };
    for id in targets {
        send(http, id, &text);
    }
}

/// Largest text of one `output_chunk`.
const MAX_CHUNK: usize = 256 * 1024;

/// What each subscriber of `job` (or only `only`) has not seen of its targets' output.
pub(crate) fn push_output(hub: &mut Hub, job: &str, only: Option<ConnId>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Http {
        conns,
        ui,
        stats,
        budget,
        ..
    } = http;
    let Some(view) = ui.jobs.get(job) else {
        return;
    };
    let subscribers: Vec<ConnId> = match only {
        Some(id) => vec![id],
        None => view.subscribers.iter().copied().collect(),
    };
    for (machine, t) in &view.targets {
        if t.fetching.is_some() {
            continue;
        }
        // Subscribers at the same position get the same message, built once.
        let mut built: Vec<(Position, Vec<(Utf8Bytes, Position)>)> = Vec::new();
        let key = (job.to_string(), machine.clone());
        for id in &subscribers {
            let Some(conn) = conns.get_mut(id) else {
                continue;
            };
            let Kind::Ws(ws) = &mut conn.kind else {
                continue;
            };
            let pos = ws.positions.get(&key).copied().unwrap_or_default();
            let msgs = match built.iter().find(|(p, _)| *p == pos) {
                Some((_, msgs)) => msgs.clone(),
                None => {
                    let msgs = chunks(job, machine, &t.text, pos);
                    built.push((pos, msgs.clone()));
                    msgs
                }
            };
            let Some(last) = msgs.last().map(|(_, p)| *p) else {
                continue;
            };
            // A client that does not read keeps its floor of the hub's budget; past it,
            // while the budget is spent, it is dropped (as in `send` above).
            let backlog = ws.backlog();
            if backlog >= crate::roles::hub::state::budget::FLOOR && !budget.may_serve(backlog) {
                conn.mark_dead(format!(
                    "/ws client does not read: {backlog} bytes unsent while the hub's budget \
                     is spent"
                ));
                continue;
            }
            let Some(Session::Open(socket)) = ws.session.as_mut() else {
                continue;
            };
            let mut failed = None;
            for (text, _) in &msgs {
                stats.ws_messages_sent += 1;
                ws.queued += text.len() as u64;
                match socket.send(Message::Text(text.clone())) {
                    Ok(()) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        failed = Some(format!("/ws write failed: {e}"));
                        break;
                    }
                }
            }
            ws.positions.insert(key.clone(), last);
            let backlog = ws.backlog();
            if let Some(why) = failed {
                conn.mark_dead(why);
            }
            budget.settle(&mut conn.charge, 0, backlog);
        }
    }
}

/// The `output_chunk` messages that bring a subscriber at `pos` up to date.
pub(crate) fn chunks(
    job: &str,
    machine: &str,
    text: &LiveText,
    mut pos: Position,
) -> Vec<(Utf8Bytes, Position)> {
    let mut out = Vec::new();
    let instance = crate::wire::ui::instance(job, text.run);
    while let Some((chunk, next)) = text.next_chunk(&pos, MAX_CHUNK) {
        let msg = serde_json::json!({
            "type": "output_chunk",
            "cron": job,
            "machine": machine,
            "chunk": chunk.text,
            "position": chunk.position,
            "total_length": chunk.total_length,
            "is_complete": chunk.is_complete,
            "job_instance": instance,
        });
        out.push((Utf8Bytes::from(msg.to_string()), next));
        pos = next;
    }
    out
}
