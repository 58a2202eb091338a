//! The hub's memory under clients that send and never read: many connections from one
//! address, each pipelining requests whose answers it never reads and then starting a
//! request of the largest size allowed. The hub's resident size is read from
//! `/proc/<hub>/status` while they hold on and after they are gone; the figures are
//! printed.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::*;

fn hub_pid(d: &Daemon) -> u32 {
    d.processes()
        .into_iter()
        .find(|(role, _)| role == "hub")
        .expect("hub process")
        .1
}

#[test]
fn never_reading_connections_stay_within_the_hub_budget() {
    let clients = 250;
    let config = api_config("  max_connections_per_addr: 1000\n  api_max_connections: 2000\n")
        .replace("api_request_timeout: 2", "api_request_timeout: 30");
    let (d, port) = start_with(&config, "");
    let hub = hub_pid(&d);
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let before = rss_kib(hub).expect("hub rss");
    // Answers to pile up unread (401s: no credentials), then the largest request there
    // may be, never finished.
    let mut burst = "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        .repeat(4000)
        .into_bytes();
    burst.extend_from_slice(
        b"POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1040000\r\n\r\n",
    );
    burst.extend(std::iter::repeat_n(b'a', 1_030_000));
    let mut conns: Vec<(TcpStream, usize)> = (0..clients)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            (s, 0)
        })
        .collect();
    let mut peak = before;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let mut moved = false;
        for (s, sent) in &mut conns {
            if *sent == burst.len() {
                continue;
            }
            match s.write(&burst[*sent..]) {
                Ok(n) => {
                    *sent += n;
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => *sent = burst.len(),
            }
        }
        peak = peak.max(rss_kib(hub).unwrap_or(0));
        if !moved {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let sent: usize = conns.iter().map(|(_, n)| n).sum();
    // Someone else is still served meanwhile.
    assert_eq!(get(port, "/api/v1/status").status, 200);
    peak = peak.max(rss_kib(hub).unwrap_or(0));
    drop(conns);
    std::thread::sleep(Duration::from_secs(3));
    let after = rss_kib(hub).expect("hub rss");
    let metrics = get(port, "/metrics").text();
    for l in metrics.lines().filter(|l| l.starts_with("saltpeter_http_")) {
        eprintln!("{l}");
    }
    println!(
        "hub RSS with {clients} never-reading connections ({} MiB sent): {} MiB before, \
         {} MiB at the peak, {} MiB after they closed",
        sent >> 20,
        before >> 10,
        peak >> 10,
        after >> 10
    );
    assert!(
        peak < before + 100 * 1024,
        "the hub grew from {before} KiB to {peak} KiB"
    );
    assert!(
        after < before + 32 * 1024,
        "the hub kept {after} KiB after the clients left (from {before} KiB)"
    );
}

#[test]
fn unread_ws_subscribers_of_a_streaming_job_are_bounded() {
    let clients = 40;
    let job = "firehose:\n  schedule: '@yearly'\n  targets: [fh1]\n  \
               command: 'for i in $(seq 1 300); do head -c 100000 /dev/zero | tr \"\\\\0\" x; \
               echo; sleep 0.02; done'\n";
    let (d, port) = start(job);
    let hub = hub_pid(&d);
    let before = rss_kib(hub).expect("hub rss");
    let mut subscribers: Vec<Ws> = (0..clients)
        .map(|_| {
            let mut ws = ws_connect(port);
            ws_send(&mut ws, serde_json::json!({"subscribe": "firehose"}));
            ws
        })
        .collect();
    let run = d.run_now("firehose");
    let mut peak = before;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        peak = peak.max(rss_kib(hub).unwrap_or(0));
        if is_final(&d.run_record(run)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    peak = peak.max(rss_kib(hub).unwrap_or(0));
    // A reading client is still served.
    let mut reader = ws_connect(port);
    assert_eq!(next_msg(&mut reader).expect("config")["type"], "config");
    // Those dropped end with a close or a reset once their backlog is read; the others
    // would go on (a read timeout).
    let mut dropped = 0;
    for ws in &mut subscribers {
        let _ = ws
            .get_mut()
            .set_read_timeout(Some(Duration::from_millis(500)));
        loop {
            match ws.read() {
                Ok(tungstenite::Message::Close(_)) => {
                    dropped += 1;
                    break;
                }
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    break;
                }
                Err(_) => {
                    dropped += 1;
                    break;
                }
            }
        }
    }
    println!(
        "hub RSS with {clients} unread /ws subscribers of a job writing 30 MB: {} MiB before, \
         {} MiB at the peak; {dropped} of them dropped",
        before >> 10,
        peak >> 10
    );
    assert_eq!(d.run_record(run)["state"], "succeeded");
    assert!(
        peak < before + 120 * 1024,
        "the hub grew from {before} KiB to {peak} KiB"
    );
}

#[test]
fn unread_output_answers_are_held_within_the_budget() {
    let clients = 100;
    let job = "bulky:\n  schedule: '@yearly'\n  targets: [bk1]\n  \
               command: 'head -c 8000000 /dev/zero | tr \"\\\\0\" y'\n";
    let config = api_config("  max_connections_per_addr: 1000\n")
        .replace("api_request_timeout: 2", "api_request_timeout: 30");
    let (d, port) = start_with(&config, job);
    let (run, code) = d.run_wait("bulky");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("run id");
    let hub = hub_pid(&d);
    let before = rss_kib(hub).expect("hub rss");
    let request = format!(
        "GET /api/v1/runs/{id}/targets/bk1/output?max_bytes=8388608 HTTP/1.1\r\n\
         Host: 127.0.0.1\r\n{}: {}\r\n\r\n",
        AUTH.0, AUTH.1
    );
    let conns: Vec<TcpStream> = (0..clients)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.write_all(request.as_bytes()).expect("send");
            s
        })
        .collect();
    let mut peak = before;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        peak = peak.max(rss_kib(hub).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Someone else is still served.
    assert_eq!(get(port, "/api/v1/status").status, 200);
    drop(conns);
    println!(
        "hub RSS with {clients} unread 8 MB output answers: {} MiB before, {} MiB at the peak",
        before >> 10,
        peak >> 10
    );
    assert!(
        peak < before + 120 * 1024,
        "the hub grew from {before} KiB to {peak} KiB"
    );
}
