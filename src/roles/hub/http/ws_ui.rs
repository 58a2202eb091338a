//! `/ws`: the original Saltpeter UI protocol (PROTOCOLS.md section 2.1), event-driven.
//!
//! The hub keeps what it needs to answer many clients without asking main each time:
//! the last `config` and `status` messages, and for each job some client subscribed to
//! (a "view"), main's last `details` and the live text of the targets they cover.
//!
//! 1. Connect: the handshake (tungstenite, over the request bytes already read), then
//!    `config` and `status`.
//! 2. `subscribe`: the first subscriber of a job makes the hub tell main (`UiWatch`);
//!    main answers with `details`; for each target they cover the hub fetches the stored
//!    output once (`LiveOutput`) and from then on receives each new frame once
//!    (`UiOutput`, by seq: frames that arrive during the fetch are kept and those the
//!    fetch already contained are dropped).
//! 3. Every change is pushed to the view's subscribers; each subscriber has its own
//!    position per target (characters of the decoded text, `live`), so a chunk holds
//!    exactly what that client has not seen. A new run of a target starts at 0.
//! 4. `run`, `killCron`, `killMachine` and `getTimeline` become calls to main.
//!
//! A client that sends malformed frames or lets its unread messages pile up is dropped;
//! nothing a client does reaches another client or the wrappers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use serde_json::{Value, json};
use tungstenite::handshake::server::{NoCallback, ServerHandshake};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, Utf8Bytes, WebSocket};

use super::live::{LiveText, Position};
use super::{ConnId, Http, Kind, drop_conn};
use crate::evloop::Ctx;
use crate::ipc::CallError;
use crate::roles::hub::{Hub, Waiting};
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::link::HubRequest;
use crate::wire::records::{Millis, RunId, RunRecord};
use crate::wire::ui::{LiveTarget, RunQuery};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest text of one `output_chunk`.
const MAX_CHUNK: usize = 256 * 1024;
/// Subscriptions one client may hold.
const MAX_SUBSCRIPTIONS: usize = 10_000;
const MAX_JOB_NAME: usize = 512;

/// The bytes of the upgrade request (already read by the HTTP layer), then the socket.
pub struct Replay {
    pending: Vec<u8>,
    pos: usize,
    stream: TcpStream,
}

impl Read for Replay {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.pending.len() {
            let n = (self.pending.len() - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.pending.len() {
                self.pending = Vec::new();
                self.pos = 0;
            }
            return Ok(n);
        }
        self.stream.read(buf)
    }
}

impl Write for Replay {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

type Mid = MidHandshake<ServerHandshake<Replay, NoCallback>>;

enum Session {
    Handshaking(Box<Mid>),
    Open(Box<WebSocket<Replay>>),
}

/// What a client's call to main was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsExpect {
    Command,
    Timeline(u64),
}

pub struct WsConn {
    session: Option<Session>,
    since: Instant,
    subs: BTreeSet<String>,
    positions: HashMap<(String, String), Position>,
    /// `getTimeline` requests waiting for main, with the client's `id`.
    timelines: HashMap<u64, Value>,
    next_req: u64,
}

impl WsConn {
    pub fn is_open(&self) -> bool {
        matches!(self.session, Some(Session::Open(_)))
    }
    pub fn since(&self) -> Instant {
        self.since
    }
}

struct Target {
    text: LiveText,
    upto_seq: u64,
    /// The stored output is being fetched; frames that arrive meanwhile wait here.
    fetching: Option<Vec<(u64, Vec<u8>)>>,
    finished: bool,
}

#[derive(Default)]
struct JobView {
    subscribers: BTreeSet<ConnId>,
    details: Option<Value>,
    targets: BTreeMap<String, Target>,
}

pub struct UiHub {
    config: Option<Utf8Bytes>,
    status: Option<Utf8Bytes>,
    /// `config.maintenance` of the last configuration (for `/api/v1/maintenance`).
    pub maintenance: Option<Value>,
    jobs: HashMap<String, JobView>,
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

fn ws_config(http: &Http) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(http.limits.ws_max_message))
        .max_frame_size(Some(http.limits.ws_max_message))
        .max_write_buffer_size(http.limits.ws_max_write)
}

/// Turn HTTP connection `id`, whose last request (`raw`) asks for `/ws`, into a client.
pub fn upgrade(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, raw: Vec<u8>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let config = ws_config(http);
    let Some(mut conn) = http.conns.remove(&id) else {
        return;
    };
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
    }));
    http.conns.insert(id, conn);
    if open {
        greet(hub, id);
    }
}

fn ws_of(hub: &mut Hub, id: ConnId) -> Option<&mut WsConn> {
    match &mut hub.http.as_mut()?.conn_mut(id)?.kind {
        Kind::Ws(ws) => Some(ws),
        Kind::Http(_) => None,
    }
}

/// Send one text message to client `id` (a failure marks it for `reap`).
fn send(http: &mut Http, id: ConnId, text: &Utf8Bytes) {
    let Some(conn) = http.conn_mut(id) else {
        return;
    };
    let Kind::Ws(ws) = &mut conn.kind else {
        return;
    };
    let Some(Session::Open(socket)) = ws.session.as_mut() else {
        return;
    };
    match socket.send(Message::Text(text.clone())) {
        Ok(()) => {}
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => conn.mark_dead(format!("/ws write failed: {e}")),
    }
    http.stats.ws_messages_sent += 1;
}

/// A new client gets the configuration and the status at once.
fn greet(hub: &mut Hub, id: ConnId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    for msg in [http.ui.config.clone(), http.ui.status.clone()]
        .into_iter()
        .flatten()
    {
        send(http, id, &msg);
    }
}

pub fn on_event(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId) {
    let Some(ws) = ws_of(hub, id) else {
        return;
    };
    let mut socket = match ws.session.take() {
        Some(Session::Handshaking(mid)) => match mid.handshake() {
            Ok(socket) => {
                ws.session = Some(Session::Open(Box::new(socket)));
                greet(hub, id);
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
        hub.call_main(HubRequest::Admin(req), CALL_TIMEOUT, Waiting::Ws(id, expect));
    }
}

fn timeline_request(hub: &mut Hub, id: ConnId, v: &Value) -> Option<(AdminRequest, WsExpect)> {
    let now = chrono::Utc::now();
    let start = v["start_date"]
        .as_str()
        .and_then(|s| parse_date(s, now))
        .unwrap_or(now.timestamp_millis() - 5 * 60 * 1000);
    let end = v["end_date"]
        .as_str()
        .and_then(|s| parse_date(s, now))
        .unwrap_or(now.timestamp_millis());
    let ws = ws_of(hub, id)?;
    let req_no = ws.next_req;
    ws.next_req += 1;
    ws.timelines.insert(req_no, v["id"].clone());
    Some((
        AdminRequest::RunsQuery(RunQuery {
            since: Some(start),
            until: Some(end),
            limit: 10_000,
            ..RunQuery::default()
        }),
        WsExpect::Timeline(req_no),
    ))
}

/// An instant for `getTimeline` and the API: `now`, `now-5m` (s, m, h, d, w), RFC 3339,
/// `YYYY-MM-DD[ T]HH:MM:SS` in UTC, or unix milliseconds.
pub fn parse_date(text: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Millis> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("now") {
        if rest.is_empty() {
            return Some(now.timestamp_millis());
        }
        let (sign, amount) = match rest.split_at(1) {
            ("-", a) => (-1, a),
            ("+", a) => (1, a),
            _ => return None,
        };
        let unit = amount.chars().last()?;
        let n: i64 = amount[..amount.len() - unit.len_utf8()].parse().ok()?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            'w' => 7 * 86400,
            _ => return None,
        };
        return Some(now.timestamp_millis() + sign * n.checked_mul(seconds * 1000)?);
    }
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some(dt.timestamp_millis());
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
        .map(|n| n.and_utc().timestamp_millis())
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

fn leave_view(hub: &mut Hub, id: ConnId, job: &str) {
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
            view.targets
                .insert(machine.clone(), new_target(run, cap, false, Some((seq, data))));
            start_fetch(hub, &job, &machine, run);
            return;
        }
    }
    push_output(hub, &job, None);
    super::reap(hub, ctx);
}

/// main answered (or failed) a fetch of stored output.
pub fn live_base(hub: &mut Hub, ctx: Option<&mut Ctx<Hub>>, fid: u64, answer: Result<AdminResponse, String>) {
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
            let at = base.omitted_at.unwrap_or(base.data.len()).min(base.data.len());
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
fn push_details(hub: &mut Hub, job: &str, only: Option<ConnId>) {
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
fn push_output(hub: &mut Hub, job: &str, only: Option<ConnId>) {
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
fn chunks(job: &str, machine: &str, text: &LiveText, mut pos: Position) -> Vec<(Utf8Bytes, Position)> {
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

/// main answered a client's command or timeline request.
pub fn answer(hub: &mut Hub, ctx: &mut Ctx<Hub>, id: ConnId, expect: WsExpect, resp: AdminResponse) {
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
    super::reap(hub, ctx);
}

pub fn call_failed(hub: &mut Hub, id: ConnId, expect: WsExpect, err: &CallError) {
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
    let mut content = Vec::new();
    for run in runs {
        let instance = crate::wire::ui::instance(&run.job, run.id);
        for t in &run.targets {
            if t.started.is_some() {
                content.push(json!({"cron": run.job, "timestamp": crate::ctl::render::time(t.started),
                    "ret_code": null, "msg_type": "machine_start", "job_instance": instance,
                    "machine": t.machine}));
            }
            if t.ended.is_some() {
                content.push(json!({"cron": run.job, "timestamp": crate::ctl::render::time(t.ended),
                    "ret_code": t.exit_code, "msg_type": "machine_result",
                    "job_instance": instance, "machine": t.machine}));
            }
        }
    }
    let msg = json!({
        "type": "timeline",
        "timeline": {"content": content, "id": req_id, "serial": chrono::Utc::now().timestamp_millis()},
    });
    if let Some(http) = hub.http.as_mut() {
        send(http, id, &Utf8Bytes::from(msg.to_string()));
    }
}

/// The hub's own lines of `/metrics`.
pub fn hub_metrics(http: &Http, out: &mut String) {
    use crate::metrics::header;
    use std::fmt::Write;
    let (plain, ws) = http.connection_counts();
    header(out, "saltpeter_http_requests_total", "counter", "HTTP requests parsed.");
    let _ = writeln!(out, "saltpeter_http_requests_total {}", http.stats.requests);
    header(out, "saltpeter_http_rejected_total", "counter", "HTTP requests or connections refused as malformed, oversized or over the limit.");
    let _ = writeln!(out, "saltpeter_http_rejected_total {}", http.stats.rejected);
    header(out, "saltpeter_http_connections", "gauge", "Open HTTP connections (not /ws).");
    let _ = writeln!(out, "saltpeter_http_connections {plain}");
    header(out, "saltpeter_ws_clients", "gauge", "Open /ws connections.");
    let _ = writeln!(out, "saltpeter_ws_clients {ws}");
    header(out, "saltpeter_ws_watched_jobs", "gauge", "Jobs some /ws client is subscribed to.");
    let _ = writeln!(out, "saltpeter_ws_watched_jobs {}", http.ui.jobs.len());
    header(out, "saltpeter_ws_messages_sent_total", "counter", "Messages sent to /ws clients.");
    let _ = writeln!(out, "saltpeter_ws_messages_sent_total {}", http.stats.ws_messages_sent);
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn dates_of_the_original_and_iso() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let ms = now.timestamp_millis();
        assert_eq!(parse_date("now", now), Some(ms));
        assert_eq!(parse_date("now-5m", now), Some(ms - 300_000));
        assert_eq!(parse_date("now-2h", now), Some(ms - 7_200_000));
        assert_eq!(parse_date("now-1d", now), Some(ms - 86_400_000));
        assert_eq!(parse_date("2026-01-02T03:04:05Z", now), Some(ms));
        assert_eq!(parse_date("2026-01-02T04:04:05+01:00", now), Some(ms));
        assert_eq!(parse_date("2026-01-02 03:04:05", now), Some(ms));
        assert_eq!(parse_date("1767323045000", now), Some(1_767_323_045_000));
        assert_eq!(parse_date("yesterday", now), None);
        assert_eq!(parse_date("now-5x", now), None);
        assert_eq!(parse_date("now-", now), None);
    }

    #[test]
    fn job_names_take_a_name_or_a_list() {
        assert_eq!(job_names(&json!("a")), ["a"]);
        assert_eq!(job_names(&json!(["a", 3, "", "b"])), ["a", "b"]);
        assert!(job_names(&json!({"x": 1})).is_empty());
    }
}
