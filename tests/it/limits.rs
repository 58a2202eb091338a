//! The hub under clients that try to exhaust it: pipelining without reading, too many
//! connections from one address, malformed lengths, and a job whose `env` cannot fit in
//! one wrapper message. Real daemon, real sockets; the figures are printed.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::api::client::Conn;
use crate::api::{AUTH, api_config, start_with};
use crate::util::*;

const JOB: &str = "chatty:\n  schedule: '@yearly'\n  targets: [l1]\n  \
                   command: 'for i in $(seq 1 20); do echo line $i; sleep 0.1; done'\n";

fn hub_pid(d: &Daemon) -> u32 {
    d.processes()
        .into_iter()
        .find(|(role, _)| role == "hub")
        .expect("hub process")
        .1
}

#[test]
fn clients_that_never_read_keep_the_hub_under_a_ceiling() {
    let (d, port) = start_with(&api_config(""), JOB);
    let hub = hub_pid(&d);
    let before = rss_kib(hub).expect("hub rss");
    let one = format!(
        "GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n{}: {}\r\n\r\n",
        AUTH.0, AUTH.1
    );
    let burst = one.repeat(2000).into_bytes();
    let mut clients: Vec<TcpStream> = (0..10)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    // Pipeline requests for a while, never reading an answer.
    let mut sent = 0usize;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let mut moved = false;
        for c in &mut clients {
            match c.write(&burst) {
                Ok(n) => {
                    sent += n;
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("the hub dropped a client early: {e}"),
            }
        }
        if !moved {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // A real job still runs meanwhile, over the same loop.
    let (run, code) = d.run_wait("chatty");
    assert_eq!(code, 0, "{run}");
    let after = rss_kib(hub).expect("hub rss");
    println!(
        "hub RSS {before} KiB -> {after} KiB with 10 never-reading clients that sent {} MiB",
        sent / (1024 * 1024)
    );
    assert!(
        after < before + 64 * 1024,
        "the hub grew from {before} KiB to {after} KiB"
    );
    drop(clients);
}

#[test]
fn one_address_gets_its_share_of_connections() {
    // Long timeouts: the held connections must not be closed as idle meanwhile.
    let config = api_config("  max_connections_per_addr: 20\n")
        .replace("api_request_timeout: 2", "api_request_timeout: 60");
    let (d, port) = start_with(&config, &JOB.replace("chatty", "chatty_cap"));
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..40 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut byte = [0u8; 1];
        match c.read(&mut byte) {
            // Closed at once: refused.
            Ok(_) => refused += 1,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                held.push(c)
            }
            Err(_) => refused += 1,
        }
    }
    println!(
        "API port: {} connections held from one address, {refused} refused",
        held.len()
    );
    assert_eq!(held.len(), 20, "{refused} refused");
    // The held ones are served, and wrappers (their own port) still connect.
    let mut first = Conn::from_stream(held.remove(0));
    let r = first.send("GET", "/api/v1/jobs", &[AUTH], b"");
    assert_eq!(r.status, 200);
    let (run, code) = d.run_wait("chatty_cap");
    assert_eq!(code, 0, "{run}");
}

#[test]
fn content_length_takes_digits_only() {
    let (_d, port) = start_with(&api_config(""), &JOB.replace("chatty", "chatty_cl"));
    for bad in ["+5", "0x5", "5 5", "-1"] {
        let mut c = Conn::open(port);
        let text = format!(
            "POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {bad}\r\n\r\nhello"
        );
        c.stream.write_all(text.as_bytes()).expect("send");
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
}

#[test]
fn an_env_too_large_for_one_wrapper_message_is_a_configuration_error() {
    let big = "x".repeat(800 * 1024);
    let jobs = format!(
        "lim_huge:\n  schedule: '@yearly'\n  targets: [l1]\n  command: 'true'\n  env:\n    BIG: {big}\n\
         lim_fine:\n  schedule: '@yearly'\n  targets: [l1]\n  command: 'true'\n"
    );
    let d = Daemon::start(&[("jobs.yaml", &jobs)]);
    let log = d.log_text();
    assert!(
        log.contains("one wrapper message"),
        "{}",
        &log[..log.len().min(3000)]
    );
    let out = d.ctl(&["run", "lim_huge"]);
    assert!(!out.status.success(), "an invalid job does not run");
    let (run, code) = d.run_wait("lim_fine");
    assert_eq!(code, 0, "the other jobs are unaffected: {run}");
}
