//! What a hostile client of the wrapper port costs the server: refused hellos are
//! clipped, escaped and rate-limited in main's log and events, and a proof must fit the
//! run's executor.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

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
    d.ctl_json(&["events", "--kind", "wrapper_refused", "--limit", "1000"])
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

#[test]
fn a_minion_key_does_not_prove_a_local_target_of_the_same_name() {
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
                 wrapper_path: {}\n",
                stall.display()
            ),
        ),
    ]);
    let run = d.run_now("local_web");
    let port = d.wrapper_port();
    let mut ws = wrapper_ws(port);
    let mut msg = hello(run, "web1");
    msg.as_object_mut().map(|o| o.remove("token"));
    msg["minion_key"] = json!(true);
    ws.send(Message::text(msg.to_string())).expect("send");
    let challenge = next_json(&mut ws).expect("a challenge");
    assert_eq!(challenge["type"], "challenge", "{challenge}");
    let nonce = challenge["nonce"].as_str().expect("nonce");
    let signature = saltpeter::minion_key::sign_proof(&key, nonce, run, "web1").expect("sign");
    ws.send(Message::text(
        json!({"type": "proof", "signature": signature}).to_string(),
    ))
    .expect("send");
    let answer = next_json(&mut ws).unwrap_or(Value::Null);
    assert_eq!(answer["code"], "bad_token", "{answer}\n{}", d.log_text());
    let text = refused_events(&d)
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(text.contains("Salt runs only"), "{text}");
}

#[test]
fn refusals_do_not_tell_which_runs_and_machines_exist() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "held:\n  schedule: '@yearly'\n  targets: [h]\n  command: 'sleep 5'\n",
        ),
    ]);
    let run = d.run_now("held");
    let port = d.wrapper_port();
    let unknown_run = answer(port, &hello(run + 1000, "h"));
    let wrong_machine = answer(port, &hello(run, "nosuch"));
    assert_eq!(unknown_run["code"], "unknown_run", "{unknown_run}");
    assert_eq!(wrong_machine["code"], "unknown_run", "{wrong_machine}");
    let strip = |a: &Value, run: u64| {
        a["message"]
            .as_str()
            .unwrap_or("")
            .replace(&run.to_string(), "N")
    };
    assert_eq!(strip(&unknown_run, run + 1000), strip(&wrong_machine, run));
    assert!(
        !wrong_machine.to_string().contains("nosuch"),
        "{wrong_machine}"
    );
}
