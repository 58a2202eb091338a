//! The wrapper endpoint under bad input and forged credentials: every bad client is
//! rejected or dropped with a log line, and everyone else keeps being served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;
use tungstenite::Message;

use crate::util::*;

fn hello(run: u64, machine: &str, token: &str) -> Message {
    Message::text(
        json!({"type": "hello", "v": 1, "run": run, "machine": machine, "token": token,
               "wrapper_version": "test", "pid": 1, "resume_from": null})
        .to_string(),
    )
}

fn reject_code(ws: &mut tungstenite::WebSocket<TcpStream>) -> String {
    let msg = next_json(ws).expect("an answer");
    assert_eq!(msg["type"], "reject", "{msg}");
    msg["code"].as_str().expect("code").to_string()
}

/// A daemon with a 4-second run in flight on machine `machine` (a name unique to the
/// test: the wrapper's overlap lock is per host, shared by the tests' daemons).
fn start_sleeper(machine: &str) -> (Daemon, u64) {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            &format!(
                "nap:\n  schedule: '@yearly'\n  targets: [{machine}]\n  \
                 command: 'sleep 4; echo rested'\n"
            ),
        ),
    ]);
    let id = d.run_now("nap");
    wait_until("nap running", HANG, || {
        (target(&d.run_record(id), machine)["state"] == "running").then_some(())
    });
    (d, id)
}

#[test]
fn forged_replayed_and_wrong_run_tokens_are_rejected() {
    let (d, id) = start_sleeper("w1");
    let port = d.wrapper_port();
    let mut ws = wrapper_ws(port);
    ws.send(hello(id, "w1", &"ab".repeat(32))).expect("send");
    assert_eq!(reject_code(&mut ws), "unknown_run");

    // The genuine token, computed from the server secret: already used by the real
    // wrapper, so it is refused (single use).
    let secret = saltpeter::tokens::Secret::load_or_create(&d.state_dir().join("server.secret"))
        .expect("secret");
    let mut ws = wrapper_ws(port);
    ws.send(hello(id, "w1", &secret.launch_token(id, "w1", 1)))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "unknown_run");

    // A valid token of another run or machine does not open this one.
    let mut ws = wrapper_ws(port);
    ws.send(hello(id, "w1", &secret.launch_token(id + 1, "w1", 1)))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "unknown_run");
    let mut ws = wrapper_ws(port);
    ws.send(hello(id + 7, "w1", &secret.launch_token(id + 7, "w1", 1)))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "unknown_run");

    // The real run is not disturbed.
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(d.output(id, "w1"), "rested\n");
}

#[test]
fn bad_clients_are_dropped_and_others_served() {
    let (d, id) = start_sleeper("w2");
    let port = d.wrapper_port();

    // Plain garbage instead of an HTTP upgrade.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    raw.write_all(b"\x00\x01garbage\r\n\r\n").expect("write");
    raw.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 256];
    let n = raw.read(&mut buf).unwrap_or(0);
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || answer.starts_with("HTTP/1.1 4"), "{answer}");

    // A wrong path.
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    assert!(tungstenite::client(format!("ws://127.0.0.1:{port}/elsewhere"), stream).is_err());

    // Not JSON, an unknown message type, output before hello.
    let mut ws = wrapper_ws(port);
    ws.send(Message::text("this is not json")).expect("send");
    assert_eq!(reject_code(&mut ws), "bad_message");
    let mut ws = wrapper_ws(port);
    ws.send(Message::text(r#"{"type":"teleport","to":"mars"}"#))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "bad_message");
    let mut ws = wrapper_ws(port);
    ws.send(Message::binary(vec![1u8, 0, 0, 0, 0, 0, 0, 0, 1, b'x']))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "bad_message");
    let mut ws = wrapper_ws(port);
    ws.send(Message::text(r#"{"type":"hello","v":99,"run":1,"machine":"m","wrapper_version":"x","pid":1,"resume_from":null}"#))
        .expect("send");
    assert_eq!(reject_code(&mut ws), "version");

    // An oversize message (limit 1 MiB): the connection is dropped.
    let mut ws = wrapper_ws(port);
    let _ = ws.send(Message::binary(vec![0u8; 3 * 1024 * 1024]));
    assert!(
        next_json(&mut ws).is_none(),
        "oversize message must not be answered"
    );

    // A client that connects and never says anything is dropped after the hello
    // deadline (2 s here).
    let mut silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let n = silent.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "silent client closed by the server");

    // Meanwhile the real wrapper finished normally.
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");
    let log = d.log_text();
    for needle in [
        "rejected (BadMessage)",
        "rejected (Version)",
        "no hello within the deadline",
    ] {
        assert!(log.contains(needle), "log lacks {needle:?}:\n{log}");
    }
}

/// Holds `quota` idle connections to the wrapper port from 127.0.0.1, opening a new one
/// (every 20 ms) whenever the hub closed one, until told to stop: a local user starving
/// local wrappers. Returns how many it opened in all.
fn squat(port: u16, quota: usize, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> usize {
    use std::sync::atomic::Ordering;
    let mut held: Vec<TcpStream> = Vec::new();
    let mut opened = 0;
    while !stop.load(Ordering::Relaxed) {
        held.retain_mut(|s| {
            let mut b = [0u8; 64];
            match s.read(&mut b) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            }
        });
        while held.len() < quota {
            let Ok(s) = TcpStream::connect(("127.0.0.1", port)) else {
                break;
            };
            s.set_nonblocking(true).expect("nonblocking");
            opened += 1;
            held.push(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    opened
}

#[test]
fn idle_connections_from_one_address_do_not_starve_its_wrappers() {
    let quota = 16;
    let d = Daemon::start(&[
        (
            "01-fast.yaml",
            &format!("{FAST}  max_connections_per_addr: {quota}\n"),
        ),
        (
            "jobs.yaml",
            "squatted:\n  schedule: '@yearly'\n  targets: [sq1, sq2, sq3]\n  \
             command: 'echo through'\n",
        ),
    ]);
    let port = d.wrapper_port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let squatter = {
        let stop = stop.clone();
        std::thread::spawn(move || squat(port, quota, stop))
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut codes = Vec::new();
    for _ in 0..3 {
        let (run, _) = d.run_wait("squatted");
        for m in ["sq1", "sq2", "sq3"] {
            codes.push(target(&run, m)["exit_code"].as_i64().unwrap_or(-1));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let opened = squatter.join().expect("squatter");
    let ok = codes.iter().filter(|c| **c == 0).count();
    println!(
        "local targets under a {quota}-connection squatter ({opened} connections opened): \
         {ok} of {} succeeded, exit codes {codes:?}",
        codes.len()
    );
    assert_eq!(ok, codes.len(), "{codes:?}");
    assert!(opened >= quota, "the squatter held the quota");
}
