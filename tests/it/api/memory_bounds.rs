//! The API budget holds at scale (docs/security.md, "The API's memory budget"):
//!
//! - a thousand connections from four addresses, each trickling the body of the largest
//!   request allowed and never finishing it, are held back at their floor once request
//!   buffers reach their share, however many the one-second sweep retries at once;
//! - a hundred viewers asking for output made of control bytes (each 6 bytes in JSON)
//!   and never reading their answers get answers within what was set aside for them.
//!
//! The hub's resident size is read from `/proc/<hub>/status`; the figures are printed.

use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use super::*;
use crate::util::connect_from;

fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn buffered_bytes(port: u16) -> u64 {
    get(port, "/metrics")
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("saltpeter_http_buffered_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes up to `slice` more of `body` on each connection, without blocking. A
/// connection the hub closed (its request timed out) is done.
fn push(conns: &mut [(TcpStream, usize)], body: &[u8], slice: usize) {
    for (s, sent) in conns.iter_mut() {
        let end = body.len().min(*sent + slice);
        if *sent >= end {
            continue;
        }
        match s.write(&body[*sent..end]) {
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => *sent = body.len(),
        }
    }
}

fn open_from(n: usize, port: u16) -> Vec<(TcpStream, usize)> {
    (0..n)
        .map(|i| {
            let s = connect_from(Ipv4Addr::new(127, 0, 0, 21 + (i % 4) as u8), port);
            s.set_nonblocking(true).expect("nonblocking");
            (s, 0)
        })
        .collect()
}

#[test]
fn a_thousand_held_back_connections_stay_within_the_api_budget() {
    const CLIENTS: usize = 1000;
    raise_fd_limit();
    let config = api_config("  api_max_connections: 2000\n")
        .replace("api_request_timeout: 2", "api_request_timeout: 3");
    let (d, port) = start_with(&config, "");
    let hub = d.pid_of("hub");
    let before = rss_kib(hub).expect("hub rss");
    // Each sends the largest request allowed, slowly, never finished.
    let mut body =
        b"POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1040000\r\n\r\n"
            .to_vec();
    body.extend(std::iter::repeat_n(b'a', 1_030_000));
    // Two waves from four addresses. Their floors fill the request buffers' share of the
    // budget, so each is held back at its floor, the rest of what it sends waiting in its
    // socket; when the first wave's requests time out (408), the one-second sweep gives
    // the second wave's held-back connections another go, all at once.
    let mut waves = open_from(CLIENTS / 2, port);
    let mut second_wave = false;
    let mut peak = before;
    let mut most_buffered = 0;
    let started = Instant::now();
    let mut round = 0u32;
    while started.elapsed() < Duration::from_secs(9) {
        round += 1;
        if !second_wave && started.elapsed() > Duration::from_millis(1500) {
            second_wave = true;
            waves.extend(open_from(CLIENTS / 2, port));
        }
        push(&mut waves, &body, 64 * 1024);
        peak = peak.max(rss_kib(hub).unwrap_or(0));
        if round.is_multiple_of(5) {
            most_buffered = most_buffered.max(buffered_bytes(port));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent: usize = waves.iter().map(|(_, n)| n).sum();
    // Someone else is still served meanwhile.
    assert_eq!(get(port, "/api/v1/status").status, 200);
    most_buffered = most_buffered.max(buffered_bytes(port));
    peak = peak.max(rss_kib(hub).unwrap_or(0));
    drop(waves);
    println!(
        "hub RSS with {CLIENTS} held-back API connections ({} MiB sent): {} MiB before, \
         {} MiB at the peak; at most {} MiB buffered",
        sent >> 20,
        before >> 10,
        peak >> 10,
        most_buffered >> 20
    );
    // The budget: 48 MiB, and a floor of 32 KiB for each connection.
    let allowed = 48 * 1024 * 1024 + CLIENTS as u64 * 32 * 1024 + 64 * 1024;
    assert!(
        most_buffered <= allowed,
        "the API buffered {most_buffered} bytes, over its budget of {allowed}"
    );
    assert!(
        peak < before + 100 * 1024,
        "the hub grew from {} MiB to {} MiB",
        before >> 10,
        peak >> 10
    );
}

/// A hundred viewers of output that is all control bytes: each asks for `max_bytes` in
/// JSON and never reads the answer.
fn viewers_of_control_bytes(max_bytes: u64) {
    const VIEWERS: usize = 100;
    raise_fd_limit();
    let job = "noisy:\n  schedule: '@yearly'\n  targets: [nz1]\n  \
               output_limit: {head: 8000000, tail: 1000000}\n  \
               command: 'head -c 9000000 /dev/zero'\n";
    let config = api_config("  max_connections_per_addr: 1000\n")
        .replace("api_request_timeout: 2", "api_request_timeout: 30");
    let (d, port) = start_with(&config, job);
    let (run, code) = d.run_wait("noisy");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("run id");
    let hub = d.pid_of("hub");
    let before = rss_kib(hub).expect("hub rss");
    let path = format!("/api/v1/runs/{id}/targets/nz1/output?max_bytes={max_bytes}");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{}: {}\r\n\r\n",
        AUTH.0, AUTH.1
    );
    let conns: Vec<TcpStream> = (0..VIEWERS)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(request.as_bytes()).expect("send");
            s
        })
        .collect();
    let mut peak = before;
    let mut most_buffered = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) {
        peak = peak.max(rss_kib(hub).unwrap_or(0));
        most_buffered = most_buffered.max(buffered_bytes(port));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Someone else is still served.
    assert_eq!(get(port, "/api/v1/status").status, 200);
    most_buffered = most_buffered.max(buffered_bytes(port));
    peak = peak.max(rss_kib(hub).unwrap_or(0));
    drop(conns);
    println!(
        "hub RSS with {VIEWERS} unread JSON answers of {max_bytes} control bytes: {} MiB \
         before, {} MiB at the peak; at most {} MiB buffered",
        before >> 10,
        peak >> 10,
        most_buffered >> 20
    );
    // Once they left, a viewer that reads gets the output in answers that fit what was
    // set aside for them, each continuing where the last stopped.
    let first = wait_until("an answer once the viewers left", HANG, || {
        let r = get(port, &path);
        (r.status != 503).then_some(r)
    });
    assert_eq!(first.status, 200, "{}", first.text());
    let body = first.json();
    assert!(
        first.body.len() as u64 <= 2 * max_bytes + 4096,
        "a JSON answer of {} bytes for max_bytes={max_bytes}",
        first.body.len()
    );
    let got = body["bytes"].as_u64().expect("bytes");
    assert!(got > 0 && got < max_bytes, "{got} bytes");
    assert_eq!(body["next_from"], got, "it continues where it stopped");
    assert_eq!(body["data"].as_str().map(str::len), Some(got as usize));
    assert!(body["data"].as_str().unwrap_or("").bytes().all(|b| b == 0));
    let next = get(port, &format!("{path}&from={got}")).json();
    assert_eq!(next["from"], got);
    assert_eq!(next["next_from"], 2 * got, "{}", next["bytes"]);
    let allowed = 48 * 1024 * 1024 + VIEWERS as u64 * 32 * 1024;
    assert!(
        most_buffered <= allowed,
        "the API buffered {most_buffered} bytes, over its budget of {allowed}"
    );
    assert!(
        peak < before + 100 * 1024,
        "the hub grew from {} MiB to {} MiB",
        before >> 10,
        peak >> 10
    );
}

#[test]
fn a_hundred_viewers_of_control_bytes_stay_within_the_api_budget() {
    viewers_of_control_bytes(1 << 20);
}

#[test]
fn large_json_answers_of_control_bytes_stay_within_the_api_budget() {
    viewers_of_control_bytes(8 << 20);
}
