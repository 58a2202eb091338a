//! The simulated wrappers: one mio loop, one connection per (minion, run) a launch names.
//!
//! Each session goes through what a daemonized `saltpeter-wrapper` does with a minion
//! key (docs/protocols.md): TCP connect, TLS pinned to the `#sha256=` of `SP_URL` (the
//! library's `tls::verify::client_config` and `tls::stream::Stream`), the WebSocket
//! upgrade, `hello` with `minion_key: true` and the real wrapper's hash and path,
//! `challenge` answered with `minion_key::sign_proof`, `welcome` (staged: wait for `go`),
//! then `started`, one output frame, `exited` with code 0, and `done` ends it. Heartbeats
//! go out every `heartbeat_s` of the welcome while welcomed; pings are answered by
//! tungstenite on the next read or flush.
//!
//! The sockets are edge-triggered: after any event a session is driven until it would
//! block (handshake step, every message read, the write buffer flushed). At most
//! `MAX_OPENING` sessions are connecting or saying hello at once, so the hub's listen
//! backlog is never the bottleneck measured; the others wait in a queue.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use saltpeter::tls::stream::Stream;
use saltpeter::wire::wrapper::{
    ExitReason, OutputFrame, PROTOCOL_VERSION, ServerMsg, Stream as OutStream, WRAPPER_PATH,
    WrapperMsg,
};
use tungstenite::handshake::MidHandshake;
use tungstenite::handshake::client::ClientHandshake;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{HandshakeError, Message, WebSocket};

use super::Fleet;
use super::socket::{send, send_json, server_addr};

/// Sessions connecting or not yet welcomed at once.
const MAX_OPENING: usize = 256;
const WAKER: Token = Token(usize::MAX);

/// One wrapper to simulate: what a minion's `cmd.run_all` of the launch starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub run: u64,
    pub minion: String,
    /// `SP_URL`: `wss://host:port/#sha256=PIN` (or `ws://`).
    pub url: String,
    /// The wrapper's path as the launch names it (reported in `hello`).
    pub wrapper: String,
}

/// The handle the bridge keeps: launches go to the loop's thread.
pub struct Handle {
    tx: Sender<Vec<Launch>>,
    waker: Arc<Waker>,
}

impl Handle {
    pub fn launch(&self, launches: Vec<Launch>) -> Result<(), String> {
        self.tx
            .send(launches)
            .map_err(|_| "the session loop has stopped".to_string())?;
        self.waker
            .wake()
            .map_err(|e| format!("waking the loop: {e}"))
    }
}

/// Start the session loop in a thread of its own.
pub fn spawn(fleet: Fleet) -> Result<Handle, String> {
    let poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| format!("waker: {e}"))?);
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("sessions".into())
        .spawn(move || {
            let mut sim = Sessions::new(fleet, poll, rx);
            if let Err(e) = sim.run() {
                eprintln!("simfleet: the session loop failed: {e}");
            }
        })
        .map_err(|e| format!("thread: {e}"))?;
    Ok(Handle { tx, waker })
}

enum Link {
    Connecting(TcpStream),
    Handshaking(MidHandshake<ClientHandshake<Stream>>),
    Open(Box<WebSocket<Stream>>),
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Hello,
    Staged,
    Finishing,
    Ended,
}

struct Session {
    launch: Launch,
    link: Link,
    phase: Phase,
    heartbeat: Duration,
    /// The slower beat while waiting for `go`, when the welcome gave one.
    staged_beat: Option<Duration>,
    next_beat: Option<Instant>,
}

/// What the sessions came to, per run, for the log.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    launched: usize,
    welcomed: usize,
    done: usize,
    rejected: usize,
    failed: usize,
}

struct Sessions {
    fleet: Fleet,
    poll: Poll,
    rx: Receiver<Vec<Launch>>,
    slots: Vec<Option<Session>>,
    free: Vec<usize>,
    queue: VecDeque<Launch>,
    opening: usize,
    tls: HashMap<Option<[u8; 32]>, Arc<rustls::ClientConfig>>,
    hashes: HashMap<String, Option<String>>,
    tally: HashMap<u64, Tally>,
    tally_changed: bool,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Sessions {
    fn new(fleet: Fleet, poll: Poll, rx: Receiver<Vec<Launch>>) -> Sessions {
        Sessions {
            fleet,
            poll,
            rx,
            slots: Vec::new(),
            free: Vec::new(),
            queue: VecDeque::new(),
            opening: 0,
            tls: HashMap::new(),
            hashes: HashMap::new(),
            tally: HashMap::new(),
            tally_changed: false,
        }
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_report = Instant::now() + Duration::from_secs(1);
        let mut next_sweep = Instant::now();
        loop {
            let wait = next_sweep
                .min(next_report)
                .saturating_duration_since(Instant::now());
            self.poll.poll(&mut events, Some(wait))?;
            for ev in events.iter() {
                if ev.token() == WAKER {
                    while let Ok(launches) = self.rx.try_recv() {
                        for l in &launches {
                            self.tally.entry(l.run).or_default().launched += 1;
                        }
                        self.queue.extend(launches);
                        self.tally_changed = true;
                    }
                } else {
                    self.drive(ev.token().0);
                }
            }
            self.open_queued();
            let now = Instant::now();
            if now >= next_sweep {
                self.heartbeats(now);
                next_sweep = now + Duration::from_millis(250);
            }
            if now >= next_report {
                self.report();
                next_report = now + Duration::from_secs(1);
            }
        }
    }

    fn report(&mut self) {
        if !self.tally_changed {
            return;
        }
        self.tally_changed = false;
        let mut runs: Vec<_> = self.tally.iter().collect();
        runs.sort_by_key(|(r, _)| **r);
        for (run, t) in runs {
            eprintln!(
                "simfleet: run {run}: {} launched, {} welcomed, {} done, {} rejected, {} failed",
                t.launched, t.welcomed, t.done, t.rejected, t.failed
            );
        }
    }

    fn open_queued(&mut self) {
        while self.opening < MAX_OPENING {
            let Some(launch) = self.queue.pop_front() else {
                return;
            };
            let run = launch.run;
            if let Err(e) = self.open(launch) {
                eprintln!("simfleet: run {run}: {e}");
                self.tally.entry(run).or_default().failed += 1;
            }
        }
    }

    fn open(&mut self, launch: Launch) -> Result<(), String> {
        let addr = server_addr(&launch.url)?;
        let mut sock = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.poll
            .registry()
            .register(
                &mut sock,
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| format!("register: {e}"))?;
        self.slots[slot] = Some(Session {
            launch,
            link: Link::Connecting(sock),
            phase: Phase::Hello,
            heartbeat: Duration::from_secs(5),
            staged_beat: None,
            next_beat: None,
        });
        self.opening += 1;
        Ok(())
    }

    /// Drive session `slot` as far as it goes without blocking.
    fn drive(&mut self, slot: usize) {
        let Some(mut s) = self.slots.get_mut(slot).and_then(Option::take) else {
            return; // spurious: a closed session's last event
        };
        if let Err(e) = self.step(&mut s) {
            if s.phase != Phase::Ended {
                eprintln!("simfleet: run {} on {}: {e}", s.launch.run, s.launch.minion);
                self.tally.entry(s.launch.run).or_default().failed += 1;
                self.tally_changed = true;
            }
            s.link = Link::Closed;
        }
        if matches!(s.link, Link::Closed) {
            if s.phase == Phase::Hello {
                self.opening -= 1;
            }
            self.free.push(slot);
        } else {
            self.slots[slot] = Some(s);
        }
    }

    fn step(&mut self, s: &mut Session) -> Result<(), String> {
        loop {
            match std::mem::replace(&mut s.link, Link::Closed) {
                Link::Connecting(sock) => {
                    if let Some(e) = sock.take_error().map_err(|e| e.to_string())? {
                        return Err(format!("connect: {e}"));
                    }
                    match sock.peer_addr() {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                            s.link = Link::Connecting(sock);
                            return Ok(());
                        }
                        Err(e) => return Err(format!("connect: {e}")),
                    }
                    sock.set_nodelay(true).map_err(|e| e.to_string())?;
                    let (bare, stream) = self.secure(&s.launch.url, sock)?;
                    let config = WebSocketConfig::default()
                        .read_buffer_size(4096)
                        .write_buffer_size(0);
                    // `SP_URL` names the wrapper endpoint itself (`.../wrapper/v1`).
                    let request = if bare.contains(WRAPPER_PATH) {
                        bare
                    } else {
                        format!("{}{WRAPPER_PATH}", bare.trim_end_matches('/'))
                    };
                    s.link = handshake_step(tungstenite::client::client_with_config(
                        request.as_str(),
                        stream,
                        Some(config),
                    ))?;
                    if let Link::Open(ws) = &mut s.link {
                        self.hello(&s.launch, ws)?;
                    }
                    if !matches!(s.link, Link::Open(_)) {
                        return Ok(());
                    }
                }
                Link::Handshaking(mid) => {
                    s.link = handshake_step(mid.handshake())?;
                    match &mut s.link {
                        Link::Open(ws) => self.hello(&s.launch, ws)?,
                        _ => return Ok(()),
                    }
                }
                Link::Open(mut ws) => {
                    let result = self.read_all(s, &mut ws);
                    if s.phase == Phase::Ended {
                        return Ok(()); // closed: `done` or a final answer
                    }
                    result?;
                    match ws.flush() {
                        Ok(()) => {}
                        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        }
                        Err(e) => return Err(format!("write: {e}")),
                    }
                    s.link = Link::Open(ws);
                    return Ok(());
                }
                Link::Closed => return Ok(()),
            }
        }
    }

    fn secure(&mut self, url: &str, sock: TcpStream) -> Result<(String, Stream), String> {
        let (bare, pin) = match url.split_once('#') {
            Some((bare, pin)) => (bare, saltpeter::tls::parse_pin(pin)),
            None => (url, None),
        };
        let Some(rest) = bare.strip_prefix("wss://") else {
            return Ok((bare.to_string(), Stream::Plain(sock)));
        };
        let config = match self.tls.get(&pin) {
            Some(c) => c.clone(),
            None => {
                let c = saltpeter::tls::verify::client_config(pin)?;
                self.tls.insert(pin, c.clone());
                c
            }
        };
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host:?}: {e}"))?;
        let stream = Stream::connect_tls(sock, config, name).map_err(|e| format!("TLS: {e}"))?;
        Ok((bare.to_string(), stream))
    }

    fn hello(&mut self, launch: &Launch, ws: &mut WebSocket<Stream>) -> Result<(), String> {
        let sha = self
            .hashes
            .entry(launch.wrapper.clone())
            .or_insert_with(|| {
                std::fs::File::open(&launch.wrapper)
                    .and_then(saltpeter::wrapper::sha256_hex)
                    .ok()
            })
            .clone();
        let hello = WrapperMsg::Hello {
            v: PROTOCOL_VERSION,
            run: launch.run,
            machine: launch.minion.clone(),
            token: None,
            resume_key: None,
            minion_key: true,
            wrapper_version: format!("{} (simfleet)", env!("CARGO_PKG_VERSION")),
            pid: std::process::id(),
            resume_from: None,
            wrapper_sha256: sha,
            wrapper_path: Some(launch.wrapper.clone()),
            // Like an older wrapper: never asked to suspend.
            capabilities: Vec::new(),
            suspended: false,
            compression: Vec::new(),
        };
        send_json(ws, &hello)
    }

    /// Every message the hub sent, answered.
    fn read_all(&mut self, s: &mut Session, ws: &mut WebSocket<Stream>) -> Result<(), String> {
        loop {
            let msg = match ws.read() {
                Ok(Message::Text(text)) => serde_json::from_str::<ServerMsg>(text.as_str())
                    .map_err(|e| format!("bad message from the hub: {e}"))?,
                Ok(Message::Close(_)) => return Err("the hub closed the connection".into()),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(());
                }
                Err(e) => return Err(format!("read: {e}")),
            };
            self.answer(s, ws, msg)?;
            if s.phase == Phase::Ended {
                return Ok(());
            }
        }
    }

    fn answer(
        &mut self,
        s: &mut Session,
        ws: &mut WebSocket<Stream>,
        msg: ServerMsg,
    ) -> Result<(), String> {
        let run = s.launch.run;
        match msg {
            ServerMsg::Challenge { nonce } => {
                let key = self.fleet.key_file(&s.launch.minion);
                let signature =
                    saltpeter::minion_key::sign_proof(&key, &nonce, s.launch.run, &s.launch.minion)
                        .map_err(|e| format!("signing the proof: {e}"))?;
                send_json(ws, &WrapperMsg::Proof { signature })?;
            }
            ServerMsg::Welcome {
                job, wait_for_go, ..
            } => {
                if s.phase == Phase::Hello {
                    self.opening -= 1;
                    self.tally.entry(run).or_default().welcomed += 1;
                    self.tally_changed = true;
                }
                s.heartbeat = Duration::from_secs(job.heartbeat_s.max(1));
                // Waiting for `go`, the staged beat the welcome gave (as the wrapper).
                s.staged_beat = (wait_for_go && job.staged_heartbeat_s > 0)
                    .then(|| Duration::from_secs(job.staged_heartbeat_s));
                s.next_beat = Some(Instant::now() + s.staged_beat.unwrap_or(s.heartbeat));
                s.phase = Phase::Staged;
                if !wait_for_go {
                    self.start_command(s, ws)?;
                }
            }
            ServerMsg::Go {} if s.phase == Phase::Staged => self.start_command(s, ws)?,
            // Suspend, resume and output_held go only to wrappers that advertise them;
            // this one does not.
            ServerMsg::Go {}
            | ServerMsg::Ack { .. }
            | ServerMsg::Suspend {}
            | ServerMsg::Resume {}
            | ServerMsg::OutputHeld { .. } => {}
            ServerMsg::Done {} => {
                self.tally.entry(run).or_default().done += 1;
                self.tally_changed = true;
                s.phase = Phase::Ended;
                // As the wrapper ends: a close frame, not a reset.
                let _ = ws.close(None);
                let _ = ws.flush();
            }
            ServerMsg::Cancel { .. } | ServerMsg::Kill { .. } => {
                if s.phase == Phase::Staged {
                    let exited = WrapperMsg::Exited {
                        end_seq: 0,
                        code: None,
                        signal: None,
                        reason: ExitReason::Canceled,
                        at: now_ms(),
                    };
                    send_json(ws, &exited)?;
                    s.phase = Phase::Finishing;
                }
            }
            ServerMsg::Reject { code, message } => {
                if s.phase == Phase::Hello {
                    self.opening -= 1;
                }
                eprintln!(
                    "simfleet: run {} on {}: rejected ({code:?}): {message}",
                    s.launch.run, s.launch.minion
                );
                self.tally.entry(run).or_default().rejected += 1;
                self.tally_changed = true;
                s.phase = Phase::Ended;
            }
        }
        Ok(())
    }

    /// The command "runs": `started`, its output in one frame, `exited` with 0.
    fn start_command(&mut self, s: &mut Session, ws: &mut WebSocket<Stream>) -> Result<(), String> {
        let pid = std::process::id();
        send_json(
            ws,
            &WrapperMsg::Started {
                pid,
                at: now_ms(),
                limits: None,
            },
        )?;
        let mut data =
            format!("simulated run {} on {}\n", s.launch.run, s.launch.minion).into_bytes();
        data.resize(self.fleet.output_bytes.max(data.len()), b'.');
        if let Some(last) = data.last_mut() {
            *last = b'\n';
        }
        let frame = OutputFrame {
            stream: OutStream::Stdout,
            seq: 1,
            data,
        };
        send(ws, Message::binary(frame.encode()))?;
        let exited = WrapperMsg::Exited {
            end_seq: 1,
            code: Some(0),
            signal: None,
            reason: ExitReason::Exit,
            at: now_ms(),
        };
        send_json(ws, &exited)?;
        s.phase = Phase::Finishing;
        s.next_beat = Some(Instant::now() + s.heartbeat);
        Ok(())
    }

    fn heartbeats(&mut self, now: Instant) {
        for slot in 0..self.slots.len() {
            let due = matches!(
                &self.slots[slot],
                Some(s) if s.next_beat.is_some_and(|at| at <= now) && matches!(s.link, Link::Open(_))
            );
            if !due {
                continue;
            }
            let Some(s) = self.slots[slot].as_mut() else {
                continue;
            };
            let staged = s.staged_beat.filter(|_| s.phase == Phase::Staged);
            s.next_beat = Some(now + staged.unwrap_or(s.heartbeat));
            if let Link::Open(ws) = &mut s.link
                && send_json(
                    ws,
                    &WrapperMsg::Heartbeat {
                        at: now_ms(),
                        suspended: false,
                    },
                )
                .is_err()
            {
                s.link = Link::Closed;
                self.slots[slot] = None;
                self.free.push(slot);
            }
        }
    }
}

fn handshake_step<R>(
    step: Result<(WebSocket<Stream>, R), HandshakeError<ClientHandshake<Stream>>>,
) -> Result<Link, String> {
    match step {
        Ok((ws, _)) => Ok(Link::Open(Box::new(ws))),
        Err(HandshakeError::Interrupted(mid)) => Ok(Link::Handshaking(mid)),
        Err(HandshakeError::Failure(e)) => Err(format!("handshake: {e}")),
    }
}

/// Where the keys of the benchmark's fleet are cached.
pub fn key_cache(target_dir: &std::path::Path) -> PathBuf {
    target_dir.join("bench").join("simfleet-keys")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_come_from_the_url() {
        assert_eq!(
            server_addr("wss://127.0.0.1:8889/#sha256=00").unwrap(),
            "127.0.0.1:8889".parse().unwrap()
        );
        assert!(server_addr("http://x:1").is_err());
    }
}
