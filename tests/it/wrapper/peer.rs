//! A protocol peer for `saltpeter-wrapper`: a small blocking tungstenite server that
//! plays the hub's side of the wrapper protocol (docs/protocols.md, "Wrapper <-> hub"),
//! plus helpers to start the real binary.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use saltpeter::wire::wrapper::{JobSpec, OutputFrame, ServerMsg, Stream, WrapperMsg};
use tungstenite::{Message, WebSocket};

pub const BIN: &str = env!("CARGO_BIN_EXE_saltpeter-wrapper");
pub const TOKEN: &str = "tok-secret-123";

pub struct Peer {
    listener: TcpListener,
}

impl Peer {
    pub fn new() -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Peer { listener }
    }

    pub fn url(&self) -> String {
        format!("ws://{}", self.listener.local_addr().unwrap())
    }

    /// Accepts the next wrapper connection (panics after `within`).
    pub fn accept_within(&self, within: Duration) -> Conn {
        let deadline = Instant::now() + within;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(30)))
                        .unwrap();
                    let ws = tungstenite::accept(stream).unwrap();
                    return Conn { ws };
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no wrapper connection in time");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
    }

    pub fn accept(&self) -> Conn {
        self.accept_within(Duration::from_secs(20))
    }

    /// A listener on the same address as a peer that went away (a server restarted).
    pub fn on(url: &str) -> Peer {
        let addr = url.trim_start_matches("ws://");
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        Peer { listener }
    }

    /// The next wrapper connection if one is waiting and completes its handshake.
    pub fn try_accept(&self) -> Option<Conn> {
        match self.listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                // A wrapper that gave up while its connection waited in the backlog
                // is not a connection.
                tungstenite::accept(stream).ok().map(|ws| Conn { ws })
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[derive(Debug)]
pub enum In {
    Msg(WrapperMsg),
    Frame(OutputFrame),
}

pub struct Conn {
    pub ws: WebSocket<TcpStream>,
}

impl Conn {
    /// Next message or frame; `None` when the wrapper closed the link.
    pub fn recv(&mut self) -> Option<In> {
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    return Some(In::Msg(serde_json::from_str(&t).unwrap()));
                }
                Ok(Message::Binary(b)) => return Some(In::Frame(OutputFrame::decode(&b).unwrap())),
                Ok(Message::Close(_)) => return None,
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed)
                | Err(tungstenite::Error::AlreadyClosed)
                | Err(tungstenite::Error::Protocol(_)) => return None,
                Err(tungstenite::Error::Io(e))
                    if e.kind() == std::io::ErrorKind::ConnectionReset
                        || e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    return None;
                }
                Err(e) => panic!("peer read: {e}"),
            }
        }
    }

    /// The next control message, skipping heartbeats and storing frames into `out`.
    pub fn next_msg(&mut self, out: &mut Output) -> WrapperMsg {
        loop {
            match self.recv().expect("wrapper closed the link") {
                In::Msg(WrapperMsg::Heartbeat { .. }) => {}
                In::Msg(m) => return m,
                In::Frame(f) => out.store(f),
            }
        }
    }

    pub fn send(&mut self, m: &ServerMsg) {
        self.ws
            .send(Message::text(serde_json::to_string(m).unwrap()))
            .unwrap();
    }

    pub fn welcome(&mut self, job: &JobSpec, key: &str, acked_seq: u64, wait_for_go: bool) {
        self.send(&ServerMsg::Welcome {
            job: Box::new(job.clone()),
            resume_key: key.into(),
            acked_seq,
            wait_for_go,
            slot_in_ms: None,
            compression: None,
        });
    }

    /// A pre-staged welcome whose slot is `slot_in` away.
    pub fn welcome_staged(&mut self, job: &JobSpec, key: &str, slot_in: Duration) {
        self.send(&ServerMsg::Welcome {
            job: Box::new(job.clone()),
            resume_key: key.into(),
            acked_seq: 0,
            wait_for_go: true,
            slot_in_ms: Some(slot_in.as_millis() as u64),
            compression: None,
        });
    }

    /// Reads until `exited` (acking every frame), returns it.
    pub fn collect_until_exited(&mut self, out: &mut Output) -> WrapperMsg {
        loop {
            match self.recv().expect("wrapper closed the link before exited") {
                In::Msg(WrapperMsg::Heartbeat { .. }) => {}
                In::Msg(m @ WrapperMsg::Exited { .. }) => return m,
                In::Msg(WrapperMsg::Started { .. }) => out.started += 1,
                In::Msg(m) => panic!("unexpected {m:?}"),
                In::Frame(f) => {
                    out.store(f);
                    self.send(&ServerMsg::Ack {
                        seq: out.contiguous(),
                    });
                }
            }
        }
    }
}

/// Output stored by seq, as the hub does (a resend with the same seq must be identical).
#[derive(Default)]
pub struct Output {
    pub frames: BTreeMap<u64, OutputFrame>,
    pub duplicates: usize,
    pub started: usize,
}

impl Output {
    pub fn store(&mut self, f: OutputFrame) {
        if let Some(old) = self.frames.get(&f.seq) {
            assert_eq!(old, &f, "seq {} resent with different content", f.seq);
            self.duplicates += 1;
        } else {
            self.frames.insert(f.seq, f);
        }
    }

    /// Highest seq such that all of 1..=seq are held.
    pub fn contiguous(&self) -> u64 {
        let mut n = 0;
        while self.frames.contains_key(&(n + 1)) {
            n += 1;
        }
        n
    }

    pub fn text(&self, stream: Stream) -> String {
        let mut s = Vec::new();
        for f in self.frames.values().filter(|f| f.stream == stream) {
            s.extend_from_slice(&f.data);
        }
        String::from_utf8_lossy(&s).into_owned()
    }
}

pub fn job(command: &str) -> JobSpec {
    JobSpec {
        name: "test-job".into(),
        command: command.into(),
        user: None,
        cwd: None,
        env: BTreeMap::from([("FOO".into(), "bar".into())]),
        timeout_s: 0,
        kill_grace_s: 2,
        heartbeat_s: 1,
        overlap_lock: false,
        splay_s: 0,
        timeout_counts_suspended: true,
        limits: Default::default(),
        staged_heartbeat_s: 0,
    }
}

pub fn wrapper_cmd(url: &str, run: u64) -> Command {
    let mut c = Command::new(BIN);
    c.env("SP_URL", url)
        .env("SP_RUN", run.to_string())
        .env("SP_MACHINE", "m1")
        .env("SP_TOKEN", TOKEN)
        .env("SP_WRAPPER_LOG", "debug")
        .stdin(Stdio::null());
    c
}

/// A running wrapper, killed if a test fails before it exits.
pub struct Wrapper(pub Child);

impl Drop for Wrapper {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Wrapper {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Wrapper {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

pub fn start_wrapper(url: &str, run: u64) -> Wrapper {
    Wrapper(wrapper_cmd(url, run).spawn().unwrap())
}

/// Waits for the wrapper process to exit and returns its exit code.
pub fn wait_exit(child: &mut Child, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("wrapper did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Hello, then welcome with `job`; returns the hello.
pub fn handshake(conn: &mut Conn, job: &JobSpec, wait_for_go: bool) -> WrapperMsg {
    let mut out = Output::default();
    let hello = conn.next_msg(&mut out);
    conn.welcome(job, "resume-key-1", 0, wait_for_go);
    hello
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}
