//! `/ws` shows the truth to the original UI (issue 14): `status` and `details` again every
//! 2 s with fresh heartbeats, no `null` for absent values, one failed target fails the
//! run, a configuration change reaches clients at once, a finished target's real
//! `output_length`, and one rule for run now of a disabled job (CLI, API, `/ws`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// Messages read for `window` (at least; reading stops at the first one after it).
fn read_for(ws: &mut Ws, window: Duration) -> Vec<(Instant, Value)> {
    let end = Instant::now() + window;
    let mut got = Vec::new();
    while Instant::now() < end {
        let m = next_msg(ws).expect("/ws ended");
        got.push((Instant::now(), m));
    }
    got
}

fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(has_null),
        Value::Array(a) => a.iter().any(has_null),
        _ => false,
    }
}

fn millis(iso: &Value) -> i64 {
    let text = iso.as_str().unwrap_or_else(|| panic!("a time: {iso}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .timestamp_millis()
}

#[test]
fn ws_status_and_details_come_again_every_2s_with_heartbeats() {
    let jobs = "long:\n  schedule: '@yearly'\n  targets: [wt1]\n  command: 'sleep 60'\n  \
                kill_grace: 1\n";
    let (d, port) = start(jobs);
    let mut watcher = ws_connect(port);
    let mut table = ws_connect(port); // the jobs table: subscribes to nothing
    ws_send(&mut watcher, json!({"subscribe": "long"}));
    ws_send(&mut watcher, json!({"run": "long"}));
    ws_until(&mut watcher, "the target running", |m| {
        m["type"] == "details" && m["data"]["results"]["wt1"]["state"] == "running"
    });
    // Nothing changes for main from now on but heartbeats (every second, `heartbeat: 1`).
    let got = read_for(&mut watcher, Duration::from_secs(7));
    let status_at: Vec<Instant> = got
        .iter()
        .filter(|(_, m)| m["type"] == "status")
        .map(|(t, _)| *t)
        .collect();
    assert!(status_at.len() >= 3, "status repeated: {got:#?}");
    for pair in status_at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap <= Duration::from_secs(3), "status {gap:?} apart");
    }
    let details: Vec<(Instant, &Value)> = got
        .iter()
        .filter(|(_, m)| m["type"] == "details")
        .map(|(t, m)| (*t, &m["data"]))
        .collect();
    assert!(details.len() >= 3, "details repeated: {got:#?}");
    for (at, data) in &details {
        assert!(
            data["results"]["wt1"]["state"] == "running",
            "still running: {data}"
        );
        // The heartbeat shown is at most a few seconds old (beats come every second).
        let beat = millis(&data["results"]["wt1"]["last_heartbeat"]);
        let age = chrono::Utc::now().timestamp_millis()
            - beat
            - Instant::now().duration_since(*at).as_millis() as i64;
        assert!(age < 3_000, "last heartbeat {age} ms old in {data}");
    }
    let first = millis(&details[0].1["results"]["wt1"]["last_heartbeat"]);
    let last = millis(&details[details.len() - 1].1["results"]["wt1"]["last_heartbeat"]);
    assert!(last > first, "the heartbeat moved on");
    // A client that subscribed to nothing gets the status again too.
    let table_msgs = read_for(&mut table, Duration::from_secs(5));
    let running_status = table_msgs
        .iter()
        .filter(|(_, m)| {
            m["type"] == "status" && m["running"].as_object().is_some_and(|r| !r.is_empty())
        })
        .count();
    assert!(running_status >= 2, "{table_msgs:#?}");
    ws_send(&mut watcher, json!({"killCron": "long"}));
    let run = d.runs("long")[0]["id"].as_u64().unwrap();
    d.wait_run_final(run);
}

#[test]
fn ws_leaves_out_absent_values() {
    let before = chrono::Utc::now();
    let jobs = "never:\n  schedule: '@yearly'\n  targets: [wt2]\n  command: 'true'\n\
                off:\n  schedule: '@daily'\n  enabled: false\n  targets: [wt2]\n  command: 'true'\n";
    let (_d, port) = start(jobs);
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": ["never", "off"]}));
    let mut seen = Vec::new();
    let mut details = std::collections::BTreeMap::new();
    while details.len() < 2 {
        let m = next_msg(&mut ws).expect("details of both");
        if m["type"] == "details" {
            details.insert(m["cron"].as_str().unwrap().to_string(), m.clone());
        }
        seen.push(m);
    }
    for m in &seen {
        assert!(!has_null(m), "a null was sent: {m}");
    }
    assert!(seen.iter().any(|m| m["type"] == "config"));
    assert!(seen.iter().any(|m| m["type"] == "status"));
    let never = &details["never"]["data"];
    assert!(never.get("last_run").is_none(), "{never}");
    let yearly = next_yearly(before);
    assert!(
        yearly.iter().any(|y| never["next_run"] == y.as_str()),
        "next_run {}, expected {yearly:?}",
        never["next_run"]
    );
    let off = &details["off"]["data"];
    assert!(
        off.get("next_run").is_none(),
        "a disabled job has no next run: {off}"
    );
}

#[test]
fn ws_one_failed_target_fails_the_run_and_lengths_are_real() {
    let jobs = "mixed:\n  schedule: '@yearly'\n  targets: [wt3a, wt3b]\n  \
                command: 'echo \"out of $SP_MACHINE ✓\"; test \"$SP_MACHINE\" = wt3a'\n";
    let (d, port) = start(jobs);
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": "mixed"}));
    ws_send(&mut ws, json!({"run": "mixed"}));
    let seen = ws_until(&mut ws, "the run's end", |m| {
        m["type"] == "status"
            && m["running"].as_object().is_some_and(|r| r.is_empty())
            && m["last_state"]["mixed"].is_object()
    });
    let status = seen.last().unwrap();
    assert_eq!(
        status["last_state"]["mixed"]["result_ok"], false,
        "{status}"
    );
    let done = ws_until(&mut ws, "details of the ended run", |m| {
        m["type"] == "details" && m["data"]["last_success"].is_boolean()
    });
    assert_eq!(done.last().unwrap()["data"]["last_success"], false);
    let runs = d.runs("mixed");
    assert_eq!(runs[0]["state"], "partial", "{}", runs[0]);

    // A client subscribing afterwards: its first details carry the real lengths.
    let mut late = ws_connect(port);
    ws_send(&mut late, json!({"subscribe": "mixed"}));
    let first = ws_until(&mut late, "details", |m| m["type"] == "details");
    let results = &first.last().unwrap()["data"]["results"];
    for machine in ["wt3a", "wt3b"] {
        let text = format!("out of {machine} ✓\n");
        assert_eq!(
            results[machine]["output_length"],
            text.chars().count(),
            "{results}"
        );
    }
    assert_eq!(results["wt3b"]["retcode"], 1);
}

#[test]
fn ws_config_change_reaches_clients_at_once() {
    let (d, port) = start("first:\n  schedule: '@yearly'\n  targets: [wt4]\n  command: 'true'\n");
    let mut ws = ws_connect(port);
    let config = ws_until(&mut ws, "config", |m| m["type"] == "config");
    let serial = config.last().unwrap()["config"]["serial"].clone();
    // Several changes: each must reach the client within 2 s (the directory is scanned
    // every second, and the message follows the reload at once, not the next event).
    let mut serial = serial;
    for n in 0..3 {
        std::thread::sleep(Duration::from_millis(1100));
        let written = Instant::now();
        let job = format!("added{n}");
        d.write_config(
            &format!("more{n}.yaml"),
            &format!("{job}:\n  schedule: '@yearly'\n  targets: [wt4]\n  command: 'true'\n"),
        );
        let got = ws_until(&mut ws, "the new config", |m| {
            (m["type"] == "config" && m["config"]["crons"][job.as_str()].is_object())
                || written.elapsed() > Duration::from_secs(5)
        });
        let elapsed = written.elapsed();
        let new_serial = got.last().unwrap()["config"]["serial"].clone();
        assert_ne!(new_serial, serial);
        serial = new_serial;
        assert!(
            elapsed < Duration::from_secs(2),
            "config came {elapsed:?} after change {n}"
        );
    }
}

#[test]
fn run_now_of_a_disabled_job_is_refused_everywhere() {
    let jobs = "off:\n  schedule: '@daily'\n  enabled: false\n  targets: [wt5]\n  command: 'true'\n\
                on:\n  schedule: '@yearly'\n  targets: [wt5]\n  command: 'true'\n";
    let (d, port) = start(jobs);
    let cli = d.ctl(&["run", "off"]);
    assert_eq!(cli.status.code(), Some(2), "{cli:?}");
    let err = String::from_utf8_lossy(&cli.stderr);
    assert!(err.contains("disabled"), "{err}");
    let api = post(port, "/api/v1/jobs/off/run", b"");
    assert_eq!(api.status, 409, "{}", api.text());
    assert!(api.text().contains("disabled"), "{}", api.text());
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"run": "off"}));
    // Commands are handled in order: once the next one ran, the first was refused.
    ws_send(&mut ws, json!({"run": "on"}));
    d.wait_final_runs("on", 1);
    assert!(d.runs("off").is_empty(), "{:?}", d.runs("off"));
}

#[test]
fn ws_output_after_a_daemon_restart_shows_each_line_once() {
    // 40 numbered lines over about 4 s; the daemon restarts in the middle and the wrapper
    // re-attaches, resending what was not yet committed.
    let command = "for i in $(seq 1 40); do echo line-$i; sleep 0.1; done";
    let jobs =
        format!("counter:\n  schedule: '@yearly'\n  targets: [wt6]\n  command: '{command}'\n");
    let config = api_config(&format!(
        "  machines_ws_port: {}\n",
        crate::util::free_port()
    ));
    let (mut d, port) = start_with(&config, &jobs);
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": "counter"}));
    ws_send(&mut ws, json!({"run": "counter"}));
    ws_until(&mut ws, "some output", |m| {
        m["type"] == "output_chunk" && m["chunk"].as_str().is_some_and(|c| c.contains("line-5\n"))
    });
    drop(ws);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait_exit().code(), Some(0));
    d.spawn();
    d.wait_ready();
    let port = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": "counter"}));
    let mut text = String::new();
    let mut pos = 0u64;
    ws_until(&mut ws, "the whole output", |m| {
        if m["type"] != "output_chunk" {
            return false;
        }
        assert_eq!(m["position"].as_u64(), Some(pos), "contiguous: {m}");
        let chunk = m["chunk"].as_str().expect("chunk");
        pos += chunk.chars().count() as u64;
        text.push_str(chunk);
        m["is_complete"] == true
    });
    let expected: String = (1..=40).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(text, expected, "{}", d.log_text());
}

#[test]
fn ws_output_length_of_a_long_finished_target_is_its_whole_length() {
    // 1.5 MB: more than the hub keeps (1 MiB) and than it reads back from the store.
    let jobs = "big:\n  schedule: '@yearly'\n  targets: [wt7]\n  \
                command: 'head -c 1500000 /dev/zero | tr \"\\\\0\" y'\n";
    let (d, port) = start(jobs);
    let id = d.run_now("big");
    d.wait_run_final(id);
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": "big"}));
    let got = ws_until(&mut ws, "details", |m| m["type"] == "details");
    let details = got.last().unwrap();
    assert_eq!(
        details["data"]["results"]["wt7"]["output_length"], 1_500_000,
        "{details}"
    );
    // The text shown is the newest part, at its place in the whole output.
    let chunk = ws_until(&mut ws, "output", |m| m["type"] == "output_chunk");
    let chunk = chunk.last().unwrap();
    assert_eq!(chunk["total_length"], 1_500_000);
    let start = chunk["position"].as_u64().unwrap();
    assert!(start > 0 && start < 1_500_000, "{}", chunk["position"]);
}
