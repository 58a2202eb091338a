//! What a hostile client of the wrapper port costs the server: refused hellos are
//! clipped, escaped and rate-limited in main's log and events (per address, and in all),
//! a proof must fit the run's executor, and every refusal of an unproven hello reads the
//! same.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::Message;

use crate::util::*;

fn hello(run: u64, machine: &str) -> Value {
    json!({"type": "hello", "v": 1, "run": run, "machine": machine, "token": "x",
           "wrapper_version": "test", "pid": 1, "resume_from": null})
}

fn answer(port: u16, msg: &Value) -> Value {
    let mut ws = wrapper_ws(port);
    ws.send(Message::text(msg.to_string())).expect("send");
    next_json(&mut ws).unwrap_or(Value::Null)
}

/// The bytes of the log and of the database files (with its WAL).
fn disk(d: &Daemon) -> (u64, u64) {
    let log = std::fs::metadata(d.state_dir().join("../daemon.log"))
        .map(|m| m.len())
        .unwrap_or(0);
    let db = std::fs::read_dir(d.state_dir())
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("saltpeter.db"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    (log, db)
}

fn refused_events(d: &Daemon) -> Vec<Value> {
    d.ctl_json(&["events", "--kind", "wrapper_refused", "--limit", "10000"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn hostile_hellos_cost_bounded_log_lines_and_event_rows() {
    let d = Daemon::start(&[("01-fast.yaml", FAST)]);
    let port = d.wrapper_port();
    let (log0, db0) = disk(&d);
    // A 900 KB machine id that would forge a log line and drive a terminal.
    let machine = format!(
        "evil\n2026-01-01 INFO forged line\u{1b}]0;owned\u{7}\u{202e}{}",
        "m".repeat(900_000)
    );
    for _ in 0..20 {
        let a = answer(port, &hello(999_999, &machine));
        assert_eq!(a["code"], "unknown_run", "{a}");
    }
    // Main answers before it writes; give the writes a moment, then measure.
    std::thread::sleep(Duration::from_secs(2));
    let (log1, db1) = disk(&d);
    eprintln!(
        "20 hostile hellos: log +{} bytes, database +{} bytes",
        log1.saturating_sub(log0),
        db1.saturating_sub(db0),
    );
    let events = wait_until("the refusals recorded", Duration::from_secs(30), || {
        let e = refused_events(&d);
        (!e.is_empty()).then_some(e)
    });
    assert!(
        log1.saturating_sub(log0) < 64 * 1024,
        "log grew {}",
        log1 - log0
    );
    assert!(
        db1.saturating_sub(db0) < 1024 * 1024,
        "db grew {}",
        db1 - db0
    );
    assert!(
        events.len() <= 10,
        "at most 10 refusals a minute: {}",
        events.len()
    );
    for row in &events {
        let m = row["machine"].as_str().unwrap_or("");
        assert!(m.chars().count() <= 257, "machine clipped: {}", m.len());
        assert!(row["message"].as_str().unwrap_or("").len() < 8192, "{row}");
    }
    // The rows keep what was sent (bounded); the operator's terminal gets it escaped.
    let table = d.ctl(&["events", "--kind", "wrapper_refused"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{202e}'),
        "{table}"
    );
    assert!(!table.contains("\n2026-01-01 INFO forged"), "{table}");
    assert!(table.contains("evil\\n2026-01-01"), "{table}");
    let log = d.log_text();
    assert!(!log.contains("\nINFO forged line") && !log.contains("\n2026-01-01 INFO forged"));
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{202e}'),
        "escaped in the log"
    );
    assert!(
        log.contains("evil\\n2026-01-01"),
        "the machine id escaped in the log"
    );
}

/// A minion-key hello's answer: the hub's challenge, signed with `key` for (run, machine).
fn proof_answer(port: u16, key: &std::path::Path, run: u64, machine: &str) -> String {
    let mut ws = wrapper_ws(port);
    let mut msg = hello(run, machine);
    msg.as_object_mut().map(|o| o.remove("token"));
    msg["minion_key"] = json!(true);
    ws.send(Message::text(msg.to_string())).expect("send");
    let challenge = next_json(&mut ws).expect("a challenge");
    assert_eq!(challenge["type"], "challenge", "{challenge}");
    let nonce = challenge["nonce"].as_str().expect("nonce");
    let signature = saltpeter::minion_key::sign_proof(key, nonce, run, machine).expect("sign");
    ws.send(Message::text(
        json!({"type": "proof", "signature": signature}).to_string(),
    ))
    .expect("send");
    text_answer(&mut ws)
}

/// The next text frame, as sent; empty once the link closed.
fn text_answer(ws: &mut tungstenite::WebSocket<std::net::TcpStream>) -> String {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return t.as_str().to_string(),
            Ok(Message::Close(_)) | Err(_) => return String::new(),
            Ok(_) => continue,
        }
    }
}

fn raw_answer(port: u16, msg: &Value) -> String {
    let mut ws = wrapper_ws(port);
    ws.send(Message::text(msg.to_string())).expect("send");
    text_answer(&mut ws)
}

/// Every refusal of a hello that proves nothing reads the same, byte for byte: whether
/// the run exists, has ended, is in flight with that target or another, and whatever
/// was shown (a wrong token, a wrong resume key, a minion key proof for a local run). The
/// server's own records keep the precise reason.
#[test]
fn every_refusal_of_an_unproven_hello_reads_the_same() {
    let keys = tempfile::tempdir().expect("tempdir");
    let key = crate::lost_daemon::minion_key(keys.path(), "web1");
    // A wrapper that never connects: the target waits for its pick-up.
    let stall = keys.path().join("stalled-wrapper");
    std::fs::write(&stall, "#!/bin/sh\nexec sleep 30\n").expect("write wrapper");
    std::fs::set_permissions(&stall, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = Daemon::start(&[
        (
            "01-pki.yaml",
            &format!(
                "saltpeter_config:\n  salt_pki_dir: {}\n  pickup_timeout: 20\n",
                keys.path().join("master-pki").display()
            ),
        ),
        (
            "jobs.yaml",
            &format!(
                "local_web:\n  schedule: '@yearly'\n  targets: [web1]\n  command: 'true'\n  \
                 wrapper_path: {}\nquick:\n  schedule: '@yearly'\n  targets: [web1]\n  \
                 command: 'true'\n",
                stall.display()
            ),
        ),
    ]);
    let (ended, code) = d.run_wait("quick");
    assert_eq!(code, 0, "{ended}");
    let ended = ended["id"].as_u64().expect("run id");
    let run = d.run_now("local_web");
    let port = d.wrapper_port();
    let with_resume_key = |run: u64| {
        let mut h = hello(run, "web1");
        h.as_object_mut().map(|o| o.remove("token"));
        h["resume_key"] = json!("not-the-key");
        h
    };
    let answers = [
        ("no such run", raw_answer(port, &hello(run + 1000, "web1"))),
        (
            "in flight, a wrong token",
            raw_answer(port, &hello(run, "web1")),
        ),
        ("not a target", raw_answer(port, &hello(run, "nosuch"))),
        (
            "in flight, a wrong resume key",
            raw_answer(port, &with_resume_key(run)),
        ),
        ("ended, a token", raw_answer(port, &hello(ended, "web1"))),
        (
            "ended, a resume key",
            raw_answer(port, &with_resume_key(ended)),
        ),
        (
            "a minion key, a local run",
            proof_answer(port, &key, run, "web1"),
        ),
        (
            "a minion key, no such run",
            proof_answer(port, &key, run + 1000, "web1"),
        ),
    ];
    eprintln!("{answers:#?}");
    let (_, first) = &answers[0];
    let a: Value = serde_json::from_str(first).unwrap_or(Value::Null);
    assert_eq!(a["type"], "reject", "{first}");
    assert_eq!(a["code"], "unknown_run", "{first}");
    for (what, answer) in &answers {
        assert_eq!(answer, first, "{what}");
    }
    assert!(
        !first.contains("web1") && !first.contains(&run.to_string()),
        "{first}"
    );
    // The server's own records keep why.
    let text = wait_until("the refusals recorded", HANG, || {
        let text = refused_events(&d)
            .iter()
            .map(Value::to_string)
            .collect::<String>();
        text.contains("Salt runs only").then_some(text)
    });
    for why in ["not in flight", "not valid", "Salt runs only"] {
        assert!(text.contains(why), "{why}: {text}");
    }
}

/// The hub's answer to `msg` on a wrapper-port connection from `src` (a loopback address
/// of its own: 127.0.0.0/8 is all local), as the text frame it sent; the connection is
/// then closed with a closing handshake, as a wrapper does.
/// The answer to `msg` from `src`; then the connection is closed, or with `reset` cut
/// with a TCP reset (linger 0), as a client that vanishes does.
fn answer_from(src: Ipv4Addr, port: u16, msg: &Value, reset: bool) -> String {
    let stream = connect_from(src, port);
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let url = format!("ws://127.0.0.1:{port}/wrapper/v1");
    let (mut ws, _) = tungstenite::client(url, stream).expect("websocket handshake");
    ws.send(Message::text(msg.to_string())).expect("send");
    let answer = text_answer(&mut ws);
    if reset {
        let linger = nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        let _ =
            nix::sys::socket::setsockopt(ws.get_ref(), nix::sys::socket::sockopt::Linger, &linger);
        return answer;
    }
    let _ = ws.close(None);
    while ws.read().is_ok() {}
    answer
}

#[test]
fn hellos_from_many_addresses_cost_a_bounded_log_and_database() {
    let mut d = Daemon::prepare(&[("01-fast.yaml", FAST)]);
    // What a daemon writes as shipped: info and above.
    d.spawn_with_env(&[("RUST_LOG", "info")]);
    d.wait_ready();
    let port = d.wrapper_port();
    let (log0, db0) = disk(&d);
    let started = Instant::now();
    const ADDRESSES: u32 = 5_000;
    for i in 0..ADDRESSES {
        let src = Ipv4Addr::new(127, 10, (i / 250 + 1) as u8, (i % 250 + 1) as u8);
        // Half of them close cleanly, half vanish with a reset.
        let text = answer_from(src, port, &hello(999_999, &format!("m{i}")), i % 2 == 1);
        let a: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(a["code"], "unknown_run", "{src}: {text}");
    }
    let took = started.elapsed();
    // Main answers before it writes; give the writes a moment, then measure.
    std::thread::sleep(Duration::from_secs(2));
    let (log1, db1) = disk(&d);
    let (log_growth, db_growth) = (log1.saturating_sub(log0), db1.saturating_sub(db0));
    let events = refused_events(&d);
    eprintln!(
        "one hello from each of {ADDRESSES} addresses in {took:.1?}: log +{log_growth} bytes, \
         database +{db_growth} bytes, {} wrapper_refused events",
        events.len()
    );
    assert!(
        log_growth < 64 * 1024,
        "log grew {log_growth} bytes:\n{}",
        d.log_tail(12)
    );
    assert!(db_growth < 1024 * 1024, "database grew {db_growth} bytes");
    assert!(events.len() <= 40, "{} refusals recorded", events.len());
    // What was held back is counted and said: one line per window, in the log and events.
    let summary = wait_until("the summary of what was held", HANG, || {
        let log = d.log_text();
        log.lines()
            .find(|l| l.contains("more refused wrapper hello"))
            .map(str::to_string)
    });
    assert!(summary.contains("not logged or recorded"), "{summary}");
    let held: u64 = d
        .log_text()
        .lines()
        .filter_map(|l| {
            let before = l.split(" more refused wrapper hello").next()?;
            before.rsplit(' ').next()?.parse::<u64>().ok()
        })
        .sum();
    assert!(held > 0, "{summary}");
}
