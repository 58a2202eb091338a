//! A load generator that speaks the wrapper protocol (docs/protocols.md): N simulated
//! wrappers, each a real WebSocket connection to the hub's `/wrapper/v1` that says `hello`
//! with the launch token the daemon handed to its launch command, reports `started`, then
//! sends a `heartbeat` every `heartbeat_s` of its welcome, spread evenly over the period.
//! A few connections at a time send a small output frame; the time to its cumulative `ack`
//! (wrapper → hub → main → db commit → back) is the message latency. At the end every
//! simulated wrapper sends `exited` and waits for `done`, so the run ends cleanly.
//!
//! One thread, one mio poll, non-blocking sockets; bounded in connections, in time and in
//! what it buffers (tungstenite's read buffer is 4 KiB per connection, not 128 KiB).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use saltpeter::wire::wrapper::{
    ExitReason, OutputFrame, PROTOCOL_VERSION, ServerMsg, Stream, WRAPPER_PATH, WrapperMsg,
};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{HandshakeError, Message, WebSocket};

/// One launch the daemon asked for, as the recording launch command wrote it:
/// `RUN MACHINE TOKEN URL` on one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub run: u64,
    pub machine: String,
    pub token: String,
}

/// The launch command that stands in for the wrapper: it takes the launch token from its
/// file (and deletes it, as the wrapper does), appends what the daemon gave it to `record`,
/// one line per launch, and says it started, as a detached wrapper does (`--detach`).
pub fn recorder_script(record: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\ntoken=$(cat \"$SP_TOKEN_FILE\") && rm -f \"$SP_TOKEN_FILE\"\n\
         printf '%s %s %s\\n' \"$SP_RUN\" \"$SP_MACHINE\" \"$token\" >> '{}'\n\
         echo started\n",
        record.display()
    )
}

/// Parses the recorder's lines; a malformed line is an error naming it.
pub fn parse_launches(text: &str) -> Result<Vec<Launch>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split_whitespace();
            let (Some(run), Some(machine), Some(token), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(format!(
                    "launch record `{line}`: expected RUN MACHINE TOKEN"
                ));
            };
            let run = run
                .parse()
                .map_err(|_| format!("launch record `{line}`: run `{run}` is not a number"))?;
            Ok(Launch {
                run,
                machine: machine.to_string(),
                token: token.to_string(),
            })
        })
        .collect()
}

/// Heartbeats of all connections in due order: each connection has the same period, so a
/// queue kept in due order stays in order when a sent one goes to the back.
pub struct HeartbeatQueue {
    period: Duration,
    queue: VecDeque<(Instant, usize)>,
}

impl HeartbeatQueue {
    /// `n` connections, their first heartbeats spread evenly over one period after `start`.
    pub fn new(n: usize, period: Duration, start: Instant) -> HeartbeatQueue {
        let queue = (0..n)
            .map(|i| (start + period.mul_f64((i + 1) as f64 / n.max(1) as f64), i))
            .collect();
        HeartbeatQueue { period, queue }
    }

    /// Connections due at `now`; each is rescheduled one period after its due time.
    pub fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(&(at, i)) = self.queue.front() {
            if at > now {
                break;
            }
            self.queue.pop_front();
            self.queue.push_back((at + self.period, i));
            out.push(i);
        }
        out
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }
}

/// An output frame waiting for its acknowledgement.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub seq: u64,
    pub sent: Instant,
}

impl Probe {
    /// Acks are cumulative: an ack at or past the probe's seq answers it.
    pub fn answered_by(&self, acked: u64) -> bool {
        acked >= self.seq
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub connected: usize,
    pub welcomed: usize,
    pub rejected: usize,
    pub failed: usize,
    pub heartbeats: u64,
    /// Output frame → ack round trips, milliseconds.
    pub latencies_ms: Vec<f64>,
    pub done: usize,
    pub connect_secs: f64,
}

struct Conn {
    ws: WebSocket<TcpStream>,
    launch: Launch,
    welcomed: bool,
    seq: u64,
    probe: Option<Probe>,
    done: bool,
    closed: bool,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn send(conn: &mut Conn, msg: Message) {
    // A full socket keeps the message in tungstenite's buffer; WRITABLE flushes it.
    match conn.ws.send(msg) {
        Ok(()) => {}
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(_) => conn.closed = true,
    }
}

fn send_json(conn: &mut Conn, msg: &WrapperMsg) {
    match serde_json::to_string(msg) {
        Ok(text) => send(conn, Message::text(text)),
        Err(_) => conn.closed = true,
    }
}

fn connect(addr: SocketAddr, launch: Launch) -> Result<Conn, String> {
    let std_stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    std_stream.set_nodelay(true).map_err(|e| e.to_string())?;
    std_stream
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let stream = TcpStream::from_std(std_stream);
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0);
    let url = format!("ws://{addr}{WRAPPER_PATH}");
    let mut attempt = tungstenite::client::client_with_config(url.as_str(), stream, Some(config));
    let started = Instant::now();
    let ws = loop {
        match attempt {
            Ok((ws, _)) => break ws,
            Err(HandshakeError::Interrupted(mid)) => {
                if started.elapsed() > Duration::from_secs(10) {
                    return Err("WebSocket handshake took over 10 s".into());
                }
                std::thread::sleep(Duration::from_micros(200));
                attempt = mid.handshake();
            }
            Err(HandshakeError::Failure(e)) => return Err(format!("handshake: {e}")),
        }
    };
    let mut conn = Conn {
        ws,
        launch,
        welcomed: false,
        seq: 0,
        probe: None,
        done: false,
        closed: false,
    };
    let hello = WrapperMsg::Hello {
        v: PROTOCOL_VERSION,
        run: conn.launch.run,
        machine: conn.launch.machine.clone(),
        token: Some(conn.launch.token.clone()),
        resume_key: None,
        minion_key: false,
        wrapper_version: "bench-loadgen".into(),
        pid: std::process::id(),
        resume_from: None,
        wrapper_sha256: None,
        wrapper_path: None,
        capabilities: Vec::new(),
        suspended: false,
        compression: Vec::new(),
    };
    send_json(&mut conn, &hello);
    Ok(conn)
}

/// Reads what the hub sent to connection `i`.
fn drain(conn: &mut Conn, outcome: &mut Outcome, heartbeat_s: &mut u64) {
    loop {
        match conn.ws.read() {
            Ok(Message::Text(text)) => match serde_json::from_str::<ServerMsg>(text.as_str()) {
                Ok(ServerMsg::Welcome { job, .. }) => {
                    if !conn.welcomed {
                        conn.welcomed = true;
                        outcome.welcomed += 1;
                        *heartbeat_s = job.heartbeat_s.max(1);
                        let started = WrapperMsg::Started {
                            pid: std::process::id(),
                            at: now_ms(),
                            limits: None,
                        };
                        send_json(conn, &started);
                    }
                }
                Ok(ServerMsg::Ack { seq }) => {
                    if let Some(p) = conn.probe
                        && p.answered_by(seq)
                    {
                        outcome
                            .latencies_ms
                            .push(p.sent.elapsed().as_secs_f64() * 1000.0);
                        conn.probe = None;
                    }
                }
                Ok(ServerMsg::Done {}) => {
                    conn.done = true;
                    outcome.done += 1;
                }
                Ok(ServerMsg::Reject { .. }) => {
                    outcome.rejected += 1;
                    conn.closed = true;
                }
                Ok(_) => {}
                Err(_) => conn.closed = true,
            },
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                conn.closed = true;
                break;
            }
        }
    }
}

/// Connects one simulated wrapper per launch to `addr`, heartbeats until `stop` is set
/// (or `limit` passes), then ends each session with `exited` and waits up to 60 s for the
/// `done`s.
pub fn run(
    addr: SocketAddr,
    launches: Vec<Launch>,
    stop: Arc<AtomicBool>,
    welcomed: Arc<AtomicUsize>,
    limit: Duration,
) -> io::Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut conns: Vec<Conn> = Vec::with_capacity(launches.len());
    let begin = Instant::now();
    let mut heartbeat_s = 5u64;
    for launch in launches {
        welcomed.store(outcome.welcomed, Ordering::Relaxed);
        match connect(addr, launch) {
            Ok(mut conn) => {
                poll.registry().register(
                    conn.ws.get_mut(),
                    Token(conns.len()),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                conns.push(conn);
                outcome.connected += 1;
            }
            Err(e) => {
                outcome.failed += 1;
                if outcome.failed <= 3 {
                    eprintln!("  loadgen: {e}");
                }
            }
        }
        // Read welcomes as they come, so the hub's queues stay short.
        if conns.len().is_multiple_of(100) {
            poll.poll(&mut events, Some(Duration::ZERO))?;
            for ev in events.iter() {
                if let Some(c) = conns.get_mut(ev.token().0) {
                    drain(c, &mut outcome, &mut heartbeat_s);
                }
            }
        }
    }
    outcome.connect_secs = begin.elapsed().as_secs_f64();
    let mut beats = HeartbeatQueue::new(
        conns.len(),
        Duration::from_secs(heartbeat_s),
        Instant::now(),
    );
    let probe_every = Duration::from_millis(200);
    let mut next_probe = Instant::now() + probe_every;
    let mut probe_at = 0usize;
    let deadline = begin + limit;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let now = Instant::now();
        let wait = beats
            .next_due()
            .unwrap_or(now + probe_every)
            .min(next_probe)
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        poll.poll(&mut events, Some(wait))?;
        for ev in events.iter() {
            if let Some(c) = conns.get_mut(ev.token().0) {
                if ev.is_writable() {
                    let _ = c.ws.flush();
                }
                drain(c, &mut outcome, &mut heartbeat_s);
            }
        }
        welcomed.store(outcome.welcomed, Ordering::Relaxed);
        let now = Instant::now();
        for i in beats.due(now) {
            let c = &mut conns[i];
            if c.welcomed && !c.closed {
                send_json(
                    c,
                    &WrapperMsg::Heartbeat {
                        at: now_ms(),
                        suspended: false,
                    },
                );
                outcome.heartbeats += 1;
            }
        }
        if now >= next_probe && !conns.is_empty() {
            next_probe = now + probe_every;
            probe_at = (probe_at + 1) % conns.len();
            let c = &mut conns[probe_at];
            if c.welcomed && !c.closed && c.probe.is_none() {
                c.seq += 1;
                let frame = OutputFrame {
                    stream: Stream::Stdout,
                    seq: c.seq,
                    data: b"probe\n".to_vec(),
                };
                c.probe = Some(Probe {
                    seq: c.seq,
                    sent: Instant::now(),
                });
                send(c, Message::binary(frame.encode()));
            }
        }
    }
    for c in conns.iter_mut().filter(|c| c.welcomed && !c.closed) {
        let exited = WrapperMsg::Exited {
            end_seq: c.seq,
            code: Some(0),
            signal: None,
            reason: ExitReason::Exit,
            at: now_ms(),
        };
        send_json(c, &exited);
    }
    let ending = Instant::now();
    while ending.elapsed() < Duration::from_secs(60)
        && conns.iter().any(|c| c.welcomed && !c.closed && !c.done)
    {
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        for ev in events.iter() {
            if let Some(c) = conns.get_mut(ev.token().0) {
                if ev.is_writable() {
                    let _ = c.ws.flush();
                }
                drain(c, &mut outcome, &mut heartbeat_s);
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_records_parse_and_bad_lines_are_named() {
        let ok = parse_launches("12 m-1 abcd\n\n13 m-2 ef01\n").expect("parse");
        assert_eq!(ok.len(), 2);
        assert_eq!(
            ok[1],
            Launch {
                run: 13,
                machine: "m-2".into(),
                token: "ef01".into()
            }
        );
        let err = parse_launches("x m t\n").expect_err("bad run");
        assert!(
            err.contains("`x m t`") && err.contains("not a number"),
            "{err}"
        );
        assert!(parse_launches("1 m\n").is_err());
        assert!(parse_launches("1 m t extra\n").is_err());
    }

    #[test]
    fn the_recorder_writes_one_line_per_launch_from_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("launched");
        let script = dir.path().join("rec.sh");
        std::fs::write(&script, recorder_script(&record)).expect("script");
        for (run, machine) in [("5", "a"), ("6", "b")] {
            let token_file = dir.path().join(format!("{run}.token"));
            std::fs::write(&token_file, "t0k").expect("token file");
            let status = std::process::Command::new("sh")
                .arg(&script)
                .args(["--daemonize", "--log", "/dev/null"])
                .env("SP_RUN", run)
                .env("SP_MACHINE", machine)
                .env("SP_TOKEN_FILE", &token_file)
                .status()
                .expect("sh");
            assert!(status.success());
            assert!(!token_file.exists(), "the token file is taken");
        }
        let launches =
            parse_launches(&std::fs::read_to_string(&record).expect("record")).expect("parse");
        assert_eq!(launches.len(), 2);
        assert_eq!((launches[1].run, launches[1].machine.as_str()), (6, "b"));
    }

    #[test]
    fn heartbeats_are_spread_over_the_period_and_come_back_each_period() {
        let start = Instant::now();
        let period = Duration::from_secs(5);
        let mut q = HeartbeatQueue::new(4, period, start);
        assert!(q.due(start).is_empty());
        assert_eq!(q.due(start + Duration::from_millis(1250)), vec![0]);
        assert_eq!(q.due(start + Duration::from_millis(2600)), vec![1]);
        assert_eq!(q.due(start + Duration::from_secs(5)), vec![2, 3]);
        assert_eq!(q.next_due(), Some(start + Duration::from_millis(6250)));
        // A late caller gets everything due, once each.
        let all = q.due(start + Duration::from_secs(10));
        assert_eq!(all, vec![0, 1, 2, 3]);
    }

    #[test]
    fn acks_are_cumulative_for_probes() {
        let p = Probe {
            seq: 7,
            sent: Instant::now(),
        };
        assert!(!p.answered_by(6));
        assert!(p.answered_by(7));
        assert!(p.answered_by(9));
    }
}
