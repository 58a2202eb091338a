//! The HTTP API, `/ws` and the dashboard against a real daemon (docs/protocols.md,
//! "HTTP API, `/ws` and the dashboard").

mod abuse;
mod bench;
mod browser;
pub mod client;
mod compression;
mod config_errors;
mod endpoints;
mod guard;
mod memory;
mod memory_bounds;
mod metrics;
mod ws;
mod ws_truth;

use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use tungstenite::client::IntoClientRequest;

use crate::util::*;
use client::Resp;

pub const TOKEN: &str = "t0ken-for-tests";
/// A job env value that must never be served.
pub const SECRET: &str = "hunter2-never-shown";

/// `saltpeter_config` of the API tests: the API on an ephemeral loopback port, fast
/// timing, short request timeout.
pub fn api_config(extra: &str) -> String {
    format!(
        "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_token: {TOKEN}\n  \
         api_request_timeout: 2\n  heartbeat: 1\n  pickup_timeout: 5\n  hello_timeout: 2\n{extra}"
    )
}

/// A daemon with the API on and `jobs` (YAML) in its configuration.
pub fn start(jobs: &str) -> (Daemon, u16) {
    start_with(&api_config(""), jobs)
}

pub fn start_with(config: &str, jobs: &str) -> (Daemon, u16) {
    let d = Daemon::start(&[("01-api.yaml", config), ("jobs.yaml", jobs)]);
    let port = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    assert_ne!(port, 0, "the API is served");
    (d, port)
}

pub const AUTH: (&str, &str) = ("Authorization", "Bearer t0ken-for-tests");

pub fn get(port: u16, path: &str) -> Resp {
    client::request(port, "GET", path, &[AUTH], b"")
}

pub fn post(port: u16, path: &str, body: &[u8]) -> Resp {
    client::request(port, "POST", path, &[AUTH], body)
}

pub type Ws = tungstenite::WebSocket<TcpStream>;

/// A `/ws` client with the bearer token.
pub fn ws_connect(port: u16) -> Ws {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("Authorization", AUTH.1.parse().expect("header"));
    let (ws, _) = tungstenite::client(req, stream).expect("websocket handshake");
    ws
}

/// The next JSON message; `None` when the connection ended or timed out.
pub fn next_msg(ws: &mut Ws) -> Option<Value> {
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => return serde_json::from_str(t.as_str()).ok(),
            Ok(tungstenite::Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

pub fn ws_send(ws: &mut Ws, v: Value) {
    ws.send(tungstenite::Message::text(v.to_string()))
        .expect("ws send");
}

/// Messages until `pred` matches one (returned with all before it). The server sends
/// `status` every 2 s, so a connection never falls silent: the wait has its own deadline.
pub fn ws_until(ws: &mut Ws, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    loop {
        if started.elapsed() > HANG {
            panic!("no {what} within {HANG:?}; got {} messages", seen.len());
        }
        let Some(m) = next_msg(ws) else {
            panic!("/ws ended before {what}; got {seen:#?}");
        };
        let done = pred(&m);
        seen.push(m);
        if done {
            return seen;
        }
    }
}
