//! Bad input on the API port: malformed and oversized requests, slow and idle clients,
//! bad WebSocket frames. Each gets a clean HTTP error or a close, and everyone else —
//! other API clients and the wrappers on the same hub loop — keeps being served.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use super::client::{Conn, request};
use super::*;

fn sleeper(machine: &str) -> String {
    format!(
        "tick:\n  schedule: '@yearly'\n  targets: [{machine}]\n  \
         command: 'for i in 1 2 3 4; do echo tick $i; sleep 0.5; done'\n"
    )
}

/// Send raw bytes, read the answer (the server closes after an error).
fn raw(port: u16, bytes: &[u8]) -> client::Resp {
    let mut c = Conn::open(port);
    c.stream.write_all(bytes).expect("send");
    c.read_response(false).expect("an answer")
}

#[test]
fn malformed_and_oversize_requests_get_clean_errors() {
    let (_d, port) = start(&sleeper("ab1"));
    let garbage = raw(
        port,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert_eq!(garbage.status, 400);
    assert_eq!(garbage.header("connection"), Some("close"));
    let no_path = raw(port, b"GET nowhere HTTP/1.1\r\n\r\n");
    assert_eq!(no_path.status, 400);
    let big_header = format!(
        "GET /api/v1/jobs HTTP/1.1\r\nX-Filler: {}\r\n\r\n",
        "x".repeat(20_000)
    );
    assert_eq!(raw(port, big_header.as_bytes()).status, 431);
    let many = format!(
        "GET / HTTP/1.1\r\n{}\r\n",
        (0..100)
            .map(|i| format!("X-{i}: y\r\n"))
            .collect::<String>()
    );
    assert_eq!(raw(port, many.as_bytes()).status, 431);
    let big_body = b"POST /api/v1/login HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n";
    assert_eq!(raw(port, big_body).status, 413);
    let chunked =
        b"POST /api/v1/login HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(raw(port, chunked).status, 501);
    let bad_length = b"POST /api/v1/login HTTP/1.1\r\nContent-Length: -1\r\n\r\n";
    assert_eq!(raw(port, bad_length).status, 400);
    let bad_escape = get(port, "/api/v1/jobs/%ff%fe");
    assert_eq!(bad_escape.status, 400);
    let bad_json = post(port, "/api/v1/jobs/tick/kill", b"{\"machine\": ");
    assert_eq!(
        (bad_json.status, bad_json.code().as_str()),
        (400, "bad_request")
    );
    let not_object = post(port, "/api/v1/jobs/tick/kill", b"[1, 2]");
    assert_eq!(not_object.status, 400);
    // A huge body sent in full is refused and the connection closed, not buffered.
    let mut c = Conn::open(port);
    let mut flood = b"POST /api/v1/login HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n".to_vec();
    flood.extend(vec![b'a'; 2_000_000]);
    let _ = c.stream.write_all(&flood);
    let answer = c.read_response(false);
    assert!(
        answer.as_ref().is_none_or(|r| r.status == 413),
        "{answer:?}"
    );
    // Still serving.
    assert_eq!(get(port, "/api/v1/jobs").status, 200);
}

#[test]
fn slow_and_idle_clients_are_dropped_while_others_are_served() {
    // All from 127.0.0.1: the per-address cap (limits.rs tests it) is raised here.
    let config = api_config("  max_connections_per_addr: 2000\n");
    let (d, port) = start_with(&config, &sleeper("ab2"));
    // Lots of descriptors on our side.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    // A thousand connections that never send anything.
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("idle connect"))
        .collect();
    // A client that starts a request and never finishes it.
    let started = Instant::now();
    let mut slow = Conn::open(port);
    slow.stream
        .write_all(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    // A job runs meanwhile: its wrapper talks to the same hub loop.
    let run = post(port, "/api/v1/jobs/tick/run", b"").json()["run"]
        .as_u64()
        .unwrap();
    // Everyone else is served promptly.
    let mut worst = Duration::ZERO;
    while started.elapsed() < Duration::from_millis(1500) {
        let t = Instant::now();
        assert_eq!(get(port, "/api/v1/status").status, 200);
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(worst < Duration::from_secs(1), "a request took {worst:?}");
    // The slow one gets 408 once its 2 seconds are up, and is closed.
    let answer = slow
        .read_response(false)
        .expect("an answer to the slow client");
    assert_eq!(answer.status, 408, "{}", answer.text());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(4500),
        "dropped after its 2 s (checked every second): {took:?}"
    );
    assert!(slow.closed_within(Duration::from_secs(5)));
    // The idle ones are closed too.
    let mut closed = 0;
    for s in idle {
        let mut c = Conn::from_stream(s);
        if c.closed_within(Duration::from_secs(5)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 1000, "every idle connection was closed");
    let record = d.wait_run_final(run);
    assert_eq!(
        record["state"], "succeeded",
        "the wrapper was not disturbed: {record}"
    );
    assert_eq!(get(port, "/api/v1/status").status, 200);
}

#[test]
fn bad_websocket_frames_close_only_that_client() {
    let (_d, port) = start(&sleeper("ab3"));
    let mut good = ws_connect(port);
    assert_eq!(next_msg(&mut good).unwrap()["type"], "config");

    // Not JSON, or not an object: ignored, the client stays.
    let mut odd = ws_connect(port);
    next_msg(&mut odd);
    ws_send(&mut odd, json!([1, 2, 3]));
    odd.send(tungstenite::Message::text("{not json")).unwrap();
    ws_send(&mut odd, json!({"subscribe": "tick"}));
    let msgs = ws_until(&mut odd, "status after subscribe", |m| {
        m["type"] == "status"
    });
    assert!(!msgs.is_empty());

    // Binary frames are not part of the protocol: closed.
    let mut binary = ws_connect(port);
    binary
        .send(tungstenite::Message::binary(vec![1, 2, 3]))
        .unwrap();
    assert!(
        std::iter::from_fn(|| next_msg(&mut binary))
            .take(10)
            .count()
            < 10,
        "the binary client is closed"
    );
    // Oversized messages: closed.
    let mut huge = ws_connect(port);
    let _ = huge.send(tungstenite::Message::text("x".repeat(200_000)));
    assert!(std::iter::from_fn(|| next_msg(&mut huge)).take(10).count() < 10);
    // Garbage after the handshake (not a frame): closed. It is long enough to be a whole
    // frame header (a shorter one is a frame still arriving, which just waits; status
    // comes every 2 s, so only a closed connection ends the count below).
    let mut junk = ws_connect(port);
    junk.get_mut()
        .write_all(b"\xff\xff\xff\xff garbage, and more of it")
        .unwrap();
    assert!(std::iter::from_fn(|| next_msg(&mut junk)).take(10).count() < 10);

    // The good client is still served.
    ws_send(&mut good, json!({"run": "tick"}));
    ws_until(&mut good, "a status with tick running", |m| {
        m["type"] == "status"
            && m["running"]
                .as_object()
                .is_some_and(|r| r.values().any(|v| v["name"] == "tick"))
    });
    assert_eq!(request(port, "GET", "/healthz", &[], b"").status, 200);
}
