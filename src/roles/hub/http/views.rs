//! The jobs `/ws` clients watch: what the hub keeps so that many clients are served
//! without asking main each time.
//!
//! For each job some client subscribed to (a view) the hub keeps main's last `details`
//! and the live text of the targets they cover:
//! 1. The first subscriber makes the hub tell main (`UiWatch`); main answers with
//!    `details`, and later sends them again whenever the job's runs change.
//! 2. For each target the details cover, the hub fetches the stored output once
//!    (`LiveOutput`) and from then on receives each new frame once (`UiOutput`, by seq):
//!    frames arriving during the fetch wait, and those the fetch already held are dropped.
//! 3. Every change is pushed to the subscribers; each has its own position per target
//!    (characters of the decoded text, `live`), so a chunk holds exactly what that client
//!    has not seen. A new run of a target starts at 0. Subscribers at the same position
//!    share one encoded message.
//! 4. When the last subscriber leaves, the view goes and main stops sending.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;

use serde_json::{Value, json};
use tungstenite::{Message, Utf8Bytes};

use super::live::{LiveText, Position};
use super::ws_ui::{CALL_TIMEOUT, Session, WsConn, send};
use super::{ConnId, Http, Kind};
use crate::evloop::Ctx;
use crate::roles::hub::{Hub, Waiting};
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::link::HubRequest;
use crate::wire::records::RunId;
use crate::wire::ui::LiveTarget;

/// Largest text of one `output_chunk`.
const MAX_CHUNK: usize = 256 * 1024;

struct Target {
    text: LiveText,
    upto_seq: u64,
    /// The stored output is being fetched; frames that arrive meanwhile wait here.
    fetching: Option<Vec<(u64, Vec<u8>)>>,
    finished: bool,
}

#[derive(Default)]
pub(super) struct JobView {
    pub(super) subscribers: BTreeSet<ConnId>,
    pub(super) details: Option<Value>,
    targets: BTreeMap<String, Target>,
}

pub struct UiHub {
    pub(super) config: Option<Utf8Bytes>,
    pub(super) status: Option<Utf8Bytes>,
    /// `config.maintenance` of the last configuration (for `/api/v1/maintenance`).
    pub maintenance: Option<Value>,
    pub(super) jobs: HashMap<String, JobView>,
    fetches: HashMap<u64, (String, String, RunId)>,
    next_fetch: u64,
    live_cap: usize,
}

impl UiHub {
    pub fn new(live_cap: usize) -> UiHub {
        UiHub {
            config: None,
            status: None,
            maintenance: None,
            jobs: HashMap::new(),
            fetches: HashMap::new(),
            next_fetch: 1,
            live_cap,
        }
    }
}

pub(super) fn leave_view(hub: &mut Hub, id: ConnId, job: &str) {
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
pub fn forget_client(hub: &mut Hub, id: ConnId, ws: &WsConn) {
    for job in &ws.subs {
        leave_view(hub, id, job);
    }
}

fn broadcast(hub: &mut Hub, text: &Utf8Bytes) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    for id in http.ws_ids() {
        send(http, id, text);
    }
}

pub fn on_config(hub: &mut Hub, ctx: &mut Ctx<Hub>, json: String) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    http.ui.maintenance = serde_json::from_str::<Value>(&json)
        .ok()
        .map(|v| v["config"]["maintenance"].clone());
    let text = Utf8Bytes::from(json);
    http.ui.config = Some(text.clone());
    broadcast(hub, &text);
    super::reap(hub, ctx);
}

pub fn on_status(hub: &mut Hub, ctx: &mut Ctx<Hub>, json: String) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let text = Utf8Bytes::from(json);
    http.ui.status = Some(text.clone());
    broadcast(hub, &text);
    super::reap(hub, ctx);
}

/// Fetch the stored output of a target for its view.
fn start_fetch(hub: &mut Hub, job: &str, machine: &str, run: RunId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let fid = http.ui.next_fetch;
    http.ui.next_fetch += 1;
    http.ui
        .fetches
        .insert(fid, (job.to_string(), machine.to_string(), run));
    hub.call_main(
        HubRequest::Admin(AdminRequest::LiveOutput {
            run,
            machine: machine.to_string(),
        }),
        CALL_TIMEOUT,
        Waiting::LiveFetch(fid),
    );
}

fn new_target(run: RunId, cap: usize, finished: bool, first: Option<(u64, Vec<u8>)>) -> Target {
    Target {
        text: LiveText::new(run, cap),
        upto_seq: 0,
        fetching: Some(first.into_iter().collect()),
        finished,
    }
}

pub fn on_details(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    job: String,
    json: String,
    live: Vec<LiveTarget>,
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let cap = http.ui.live_cap;
    let Some(view) = http.ui.jobs.get_mut(&job) else {
        return; // nobody watches it any more
    };
    match serde_json::from_str::<Value>(&json) {
        Ok(v) => view.details = Some(v),
        Err(e) => log::error!("main sent details of {job} that are not JSON: {e}"),
    }
    let newest = live.iter().map(|t| t.run).max();
    view.targets
        .retain(|m, t| live.iter().any(|l| &l.machine == m) || Some(t.text.run) == newest);
    let mut fetch = Vec::new();
    for lt in live {
        match view.targets.get_mut(&lt.machine) {
            Some(t) if t.text.run == lt.run => {
                if lt.finished && !t.finished {
                    t.finished = true;
                    if t.fetching.is_none() {
                        t.text.finish();
                    }
                }
            }
            _ => {
                view.targets.insert(
                    lt.machine.clone(),
                    new_target(lt.run, cap, lt.finished, None),
                );
                fetch.push((lt.machine, lt.run));
            }
        }
    }
    for (machine, run) in fetch {
        start_fetch(hub, &job, &machine, run);
    }
    push_details(hub, &job, None);
    push_output(hub, &job, None);
    super::reap(hub, ctx);
}

pub fn on_output(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    job: String,
    run: RunId,
    machine: String,
    seq: u64,
    data: Vec<u8>,
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let cap = http.ui.live_cap;
    let Some(view) = http.ui.jobs.get_mut(&job) else {
        return;
    };
    match view.targets.get_mut(&machine) {
        Some(t) if t.text.run == run => match &mut t.fetching {
            Some(queued) => queued.push((seq, data)),
            None if seq > t.upto_seq => {
                t.text.push_bytes(&data);
                t.upto_seq = seq;
            }
            None => {}
        },
        _ => {
            view.targets.insert(
                machine.clone(),
                new_target(run, cap, false, Some((seq, data))),
            );
            start_fetch(hub, &job, &machine, run);
            return;
        }
    }
    push_output(hub, &job, None);
    super::reap(hub, ctx);
}

/// main answered (or failed) a fetch of stored output.
pub fn live_base(
    hub: &mut Hub,
    ctx: Option<&mut Ctx<Hub>>,
    fid: u64,
    answer: Result<AdminResponse, String>,
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some((job, machine, run)) = http.ui.fetches.remove(&fid) else {
        return;
    };
    let Some(t) = http
        .ui
        .jobs
        .get_mut(&job)
        .and_then(|v| v.targets.get_mut(&machine))
        .filter(|t| t.text.run == run)
    else {
        return;
    };
    let Some(queued) = t.fetching.take() else {
        return;
    };
    match answer {
        Ok(AdminResponse::LiveOutput(base)) => {
            let at = base
                .omitted_at
                .unwrap_or(base.data.len())
                .min(base.data.len());
            t.text.push_bytes(&base.data[..at]);
            if base.omitted_at.is_some() && base.omitted_bytes > 0 {
                t.text
                    .push_str(&crate::ctl::render::elision_marker(base.omitted_bytes));
            }
            t.text.push_bytes(&base.data[at..]);
            t.upto_seq = base.upto_seq;
        }
        Ok(other) => log::debug!("no stored output of {machine} in run {run}: {other:?}"),
        Err(e) => log::debug!("no stored output of {machine} in run {run}: {e}"),
    }
    for (seq, data) in queued {
        if seq > t.upto_seq {
            t.text.push_bytes(&data);
            t.upto_seq = seq;
        }
    }
    if t.finished {
        t.text.finish();
    }
    push_output(hub, &job, None);
    if let Some(ctx) = ctx {
        super::reap(hub, ctx);
    }
}

/// `details` of `job` to its subscribers (or only to `only`), with each target's
/// `output_length` as the hub counts it.
pub(super) fn push_details(hub: &mut Hub, job: &str, only: Option<ConnId>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some(view) = http.ui.jobs.get(job) else {
        return;
    };
    let Some(mut data) = view.details.clone() else {
        return;
    };
    if let Some(results) = data.get_mut("results").and_then(Value::as_object_mut) {
        for (machine, t) in &view.targets {
            if let Some(r) = results.get_mut(machine) {
                r["output_length"] = json!(t.text.total_chars());
            }
        }
    }
    let text = Utf8Bytes::from(json!({"type": "details", "cron": job, "data": data}).to_string());
    let targets: Vec<ConnId> = match only {
        Some(id) => vec![id],
        None => view.subscribers.iter().copied().collect(),
    };
    for id in targets {
        send(http, id, &text);
    }
}

/// What each subscriber of `job` (or only `only`) has not seen of its targets' output.
pub(super) fn push_output(hub: &mut Hub, job: &str, only: Option<ConnId>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Http {
        conns, ui, stats, ..
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
            let Some(Session::Open(socket)) = ws.session.as_mut() else {
                continue;
            };
            let mut failed = None;
            for (text, _) in &msgs {
                stats.ws_messages_sent += 1;
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
            if let Some(why) = failed {
                conn.mark_dead(why);
            }
        }
    }
}

/// The `output_chunk` messages that bring a subscriber at `pos` up to date.
fn chunks(
    job: &str,
    machine: &str,
    text: &LiveText,
    mut pos: Position,
) -> Vec<(Utf8Bytes, Position)> {
    let mut out = Vec::new();
    let instance = crate::wire::ui::instance(job, text.run);
    while let Some((chunk, next)) = text.next_chunk(&pos, MAX_CHUNK) {
        let msg = json!({
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

/// The hub's own lines of `/metrics`.
pub fn hub_metrics(http: &Http, out: &mut String) {
    use crate::metrics::header;
    use std::fmt::Write;
    let (plain, ws) = http.connection_counts();
    header(
        out,
        "saltpeter_http_requests_total",
        "counter",
        "HTTP requests parsed.",
    );
    let _ = writeln!(out, "saltpeter_http_requests_total {}", http.stats.requests);
    header(
        out,
        "saltpeter_http_rejected_total",
        "counter",
        "HTTP requests or connections refused as malformed, oversized or over the limit.",
    );
    let _ = writeln!(out, "saltpeter_http_rejected_total {}", http.stats.rejected);
    header(
        out,
        "saltpeter_http_connections",
        "gauge",
        "Open HTTP connections (not /ws).",
    );
    let _ = writeln!(out, "saltpeter_http_connections {plain}");
    header(
        out,
        "saltpeter_ws_clients",
        "gauge",
        "Open /ws connections.",
    );
    let _ = writeln!(out, "saltpeter_ws_clients {ws}");
    header(
        out,
        "saltpeter_ws_watched_jobs",
        "gauge",
        "Jobs some /ws client is subscribed to.",
    );
    let _ = writeln!(out, "saltpeter_ws_watched_jobs {}", http.ui.jobs.len());
    header(
        out,
        "saltpeter_ws_messages_sent_total",
        "counter",
        "Messages sent to /ws clients.",
    );
    let _ = writeln!(
        out,
        "saltpeter_ws_messages_sent_total {}",
        http.stats.ws_messages_sent
    );
}
