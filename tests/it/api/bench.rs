//! Measurements of the API, not tests: they print figures and fail only on a hang. Run
//! with `cargo test --release --test it bench_api -- --ignored --nocapture`.
//!
//! - `bench_api_latency`: 50 keep-alive clients at once, per endpoint p50/p99 and
//!   throughput (and `wrk`'s view, if installed).
//! - `bench_ws_fanout`: 100 `/ws` subscribers of a job; a test "wrapper" (speaking the
//!   wrapper protocol with a genuine launch token) sends output frames; the time from a
//!   frame leaving it (the hub's arrival, give or take loopback) until each subscriber
//!   has it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tungstenite::Message;

use super::client::Conn;
use super::*;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
#[ignore]
fn bench_api_latency() {
    let mut jobs = String::new();
    for i in 0..50 {
        jobs.push_str(&format!(
            "job{i}:\n  schedule: '*/5 * * * *'\n  targets: [bench{i}]\n  command: 'echo {i}'\n"
        ));
    }
    let (d, port) = start(&jobs);
    // Some history to read.
    for i in 0..10 {
        let id = post(port, &format!("/api/v1/jobs/job{i}/run"), b"").json()["run"]
            .as_u64()
            .unwrap();
        d.wait_run_final(id);
    }
    const CLIENTS: usize = 50;
    const PER_CLIENT: usize = 200;
    for path in [
        "/healthz",
        "/app.js",
        "/api/v1/status",
        "/api/v1/jobs",
        "/api/v1/runs?limit=20",
        "/api/v1/runs/1/targets/bench0/output",
    ] {
        let start = Instant::now();
        let threads: Vec<_> = (0..CLIENTS)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut c = Conn::open(port);
                    let mut lat = Vec::with_capacity(PER_CLIENT);
                    for _ in 0..PER_CLIENT {
                        let t = Instant::now();
                        let r = c.send("GET", path, &[AUTH], b"");
                        lat.push(t.elapsed());
                        assert_eq!(r.status, 200, "{path}: {}", r.text());
                    }
                    lat
                })
            })
            .collect();
        let mut all: Vec<Duration> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("client"))
            .collect();
        let took = start.elapsed();
        all.sort();
        println!(
            "{path:<40} {CLIENTS} clients x {PER_CLIENT}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {:.0} req/s",
            ms(percentile(&all, 0.5)),
            ms(percentile(&all, 0.99)),
            ms(*all.last().unwrap()),
            all.len() as f64 / took.as_secs_f64()
        );
    }
    if std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok()
    {
        for path in ["/api/v1/status", "/api/v1/jobs"] {
            let out = std::process::Command::new("wrk")
                .args(["-t2", "-c50", "-d5s", "--latency", "-H"])
                .arg(format!("{}: {}", AUTH.0, AUTH.1))
                .arg(format!("http://127.0.0.1:{port}{path}"))
                .output()
                .expect("wrk");
            println!(
                "wrk -t2 -c50 -d5s {path}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

/// A wrapper of our own for `run` on `machine`, with the genuine launch token.
fn fake_wrapper(d: &Daemon, run: u64, machine: &str) -> Ws {
    let secret = saltpeter::tokens::Secret::load_or_create(&d.state_dir().join("server.secret"))
        .expect("secret");
    let port = d.wrapper_port();
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (mut ws, _) =
        tungstenite::client(format!("ws://127.0.0.1:{port}/wrapper/v1"), stream).expect("ws");
    let hello = json!({"type": "hello", "v": 1, "run": run, "machine": machine,
        "token": secret.launch_token(run, machine, 1), "wrapper_version": "bench", "pid": 1,
        "resume_from": null});
    ws.send(Message::text(hello.to_string())).unwrap();
    let welcome = next_msg(&mut ws).expect("welcome");
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    ws.send(Message::text(
        json!({"type": "started", "pid": 1, "at": 0}).to_string(),
    ))
    .unwrap();
    ws
}

fn frame(seq: u64, data: &[u8]) -> Message {
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes.extend_from_slice(data);
    Message::binary(bytes)
}

#[test]
#[ignore]
fn bench_ws_fanout() {
    const SUBSCRIBERS: usize = 100;
    const FRAMES: u64 = 200;
    let jobs = "fan:\n  schedule: '@yearly'\n  targets: [fan1]\n  command: 'true'\n  \
                wrapper_path: /bin/true\n";
    let (d, port) = start_with(&api_config("  pickup_timeout: 30\n"), jobs);
    // The subscribers.
    let received: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(std::sync::Barrier::new(SUBSCRIBERS + 1));
    let threads: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| {
            let received = received.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                let mut ws = ws_connect(port);
                ws_send(&mut ws, json!({"subscribe": "fan"}));
                ws_until(&mut ws, "details", |m| m["type"] == "details");
                ready.wait();
                let mut mine = Vec::new();
                while let Some(m) = next_msg(&mut ws) {
                    if m["type"] != "output_chunk" {
                        continue;
                    }
                    let at = Instant::now();
                    for marker in m["chunk"].as_str().unwrap().split_terminator(';') {
                        if let Ok(seq) = marker.trim_start_matches('M').parse::<u64>() {
                            mine.push((seq, at));
                        }
                    }
                    if mine.last().is_some_and(|(s, _)| *s == FRAMES) {
                        break;
                    }
                }
                received.lock().unwrap().extend(mine);
            })
        })
        .collect();
    ready.wait();
    let run = post(port, "/api/v1/jobs/fan/run", b"").json()["run"]
        .as_u64()
        .unwrap();
    let mut wrapper = fake_wrapper(&d, run, "fan1");
    wrapper.get_mut().set_nonblocking(true).unwrap();
    let mut sent = Vec::new();
    for seq in 1..=FRAMES {
        sent.push((seq, Instant::now()));
        let _ = wrapper.send(frame(seq, format!("M{seq};").as_bytes()));
        // Drain acks without blocking.
        while let Ok(_msg) = wrapper.read() {}
        std::thread::sleep(Duration::from_millis(20));
    }
    for t in threads {
        t.join().expect("subscriber");
    }
    let received = received.lock().unwrap();
    let mut to_all = Vec::new();
    let mut each = Vec::new();
    for (seq, at) in &sent {
        let mut times: Vec<Duration> = received
            .iter()
            .filter(|(s, _)| s == seq)
            .map(|(_, t)| t.duration_since(*at))
            .collect();
        assert_eq!(
            times.len(),
            SUBSCRIBERS,
            "frame {seq} reached every subscriber"
        );
        times.sort();
        to_all.push(*times.last().unwrap());
        each.extend(times);
    }
    to_all.sort();
    each.sort();
    println!(
        "/ws fan-out, {SUBSCRIBERS} subscribers, {FRAMES} frames 20 ms apart: frame to all \
         subscribers p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; frame to one subscriber p50 \
         {:.2} ms, p99 {:.2} ms",
        ms(percentile(&to_all, 0.5)),
        ms(percentile(&to_all, 0.99)),
        ms(*to_all.last().unwrap()),
        ms(percentile(&each, 0.5)),
        ms(percentile(&each, 0.99)),
    );
    wrapper.get_mut().set_nonblocking(false).unwrap();
    let _ = wrapper.send(Message::text(
        json!({"type": "exited", "end_seq": FRAMES, "code": 0, "signal": null, "reason": "exit", "at": 0})
            .to_string(),
    ));
    let record = d.wait_run_final(run);
    assert_eq!(record["state"], "succeeded", "{record}");
}
