//! `/ws` as the original UI uses it: config, status, details and incremental output of a
//! running job; commands; the timeline. Secrets never appear.

use serde_json::{Value, json};

use super::*;

const EXPECTED: &str = "line 1 ✓ é\nline 2 ✓ é\nline 3 ✓ é\nline 4 ✓ é\nline 5 ✓ é\n";

fn jobs(machine: &str) -> String {
    format!(
        "stream:\n  schedule: '@yearly'\n  targets: [{machine}]\n  \
         command: 'for i in 1 2 3 4 5; do printf \"line %s ✓ é\\n\" $i; sleep 0.4; done'\n  \
         env:\n    API_KEY: {SECRET}\n\
         long:\n  schedule: '@yearly'\n  targets: [{machine}]\n  command: 'echo started; sleep 60'\n  \
         kill_grace: 1\n"
    )
}

/// Output chunks of `machine` until the complete one: checks that positions follow each
/// other from 0 and returns the text.
fn collect_output(ws: &mut Ws, machine: &str, seen: &mut Vec<Value>) -> String {
    let mut text = String::new();
    let mut pos = 0u64;
    let started = std::time::Instant::now();
    loop {
        // Status comes every 2 s: the connection is never silent, so the wait has a deadline.
        assert!(started.elapsed() < HANG, "no complete output of {machine}");
        let m = next_msg(ws).unwrap_or_else(|| panic!("/ws ended; got {seen:#?}"));
        seen.push(m.clone());
        if m["type"] != "output_chunk" || m["machine"] != machine {
            continue;
        }
        let chunk = m["chunk"].as_str().expect("chunk");
        assert_eq!(
            m["position"].as_u64(),
            Some(pos),
            "contiguous positions: {m}"
        );
        pos += chunk.chars().count() as u64;
        text.push_str(chunk);
        assert!(m["total_length"].as_u64().unwrap() >= pos);
        if m["is_complete"] == true {
            return text;
        }
    }
}

fn no_secret(msgs: &[Value]) {
    for m in msgs {
        assert!(!m.to_string().contains(SECRET), "a secret was sent: {m}");
    }
}

#[test]
fn ws_subscribe_receives_config_status_details_and_output() {
    let before = chrono::Utc::now();
    let (d, port) = start(&jobs("ws1"));
    let mut a = ws_connect(port);
    let config = next_msg(&mut a).expect("config");
    assert_eq!(config["type"], "config");
    assert_eq!(config["config"]["crons"]["stream"]["env"]["API_KEY"], "***");
    assert_eq!(config["config"]["crons"]["stream"]["sec"], "0");
    assert_eq!(config["config"]["maintenance"]["global"], false);
    assert!(config["sp_version"].is_string());
    let mut seen = vec![config];

    ws_send(&mut a, json!({"subscribe": "stream"}));
    seen.extend(ws_until(&mut a, "details", |m| m["type"] == "details"));
    assert!(
        seen.iter().any(|m| m["type"] == "status"),
        "status on subscribe"
    );
    let details = seen.last().unwrap().clone();
    assert_eq!(details["cron"], "stream");
    let yearly = next_yearly(before);
    assert!(
        yearly
            .iter()
            .any(|y| details["data"]["next_run"] == y.as_str()),
        "next_run {}, expected {yearly:?}",
        details["data"]["next_run"]
    );

    ws_send(&mut a, json!({"run": "stream"}));
    // A second client subscribes while the run is going: it gets what came before from
    // the store and the rest live, without gaps or repeats.
    seen.extend(ws_until(&mut a, "a first chunk", |m| {
        m["type"] == "output_chunk"
    }));
    let first = seen.last().unwrap().clone();
    let mut pos = first["chunk"].as_str().unwrap().chars().count() as u64;
    let mut text_a = first["chunk"].as_str().unwrap().to_string();
    assert_eq!(first["position"], 0);
    let mut b = ws_connect(port);
    ws_send(&mut b, json!({"subscribe": ["stream"]}));
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed() < HANG, "no complete output for a");
        let m = next_msg(&mut a).expect("more for a");
        seen.push(m.clone());
        if m["type"] != "output_chunk" {
            continue;
        }
        assert_eq!(m["position"].as_u64(), Some(pos), "{m}");
        pos += m["chunk"].as_str().unwrap().chars().count() as u64;
        text_a.push_str(m["chunk"].as_str().unwrap());
        if m["is_complete"] == true {
            break;
        }
    }
    assert_eq!(text_a, EXPECTED);
    let mut seen_b = Vec::new();
    assert_eq!(collect_output(&mut b, "ws1", &mut seen_b), EXPECTED);

    // Status and details followed the run.
    let running = seen.iter().any(|m| {
        m["type"] == "status"
            && m["running"].as_object().is_some_and(|r| {
                r.values()
                    .any(|v| v["name"] == "stream" && v["machines"][0] == "ws1")
            })
    });
    assert!(running, "a status showed the run: {seen:#?}");
    let target_running = seen
        .iter()
        .any(|m| m["type"] == "details" && m["data"]["results"]["ws1"]["state"] == "running");
    assert!(target_running, "details showed the target running");
    let finished_target =
        |m: &Value| m["type"] == "details" && m["data"]["results"]["ws1"]["retcode"] == 0;
    let run_over = |m: &Value| {
        m["type"] == "status"
            && m["last_state"]["stream"]["result_ok"] == true
            && m["running"].as_object().is_some_and(|r| r.is_empty())
    };
    let started = std::time::Instant::now();
    while !(seen.iter().any(finished_target) && seen.iter().any(run_over)) {
        assert!(
            started.elapsed() < HANG,
            "no status and details after the run"
        );
        seen.push(next_msg(&mut a).expect("status and details after the run"));
    }
    let done = &seen.iter().rev().find(|m| finished_target(m)).unwrap()["data"];
    assert_eq!(
        done["results"]["ws1"]["output_length"],
        EXPECTED.chars().count()
    );
    assert!(done["results"]["ws1"]["endtime"].is_string());
    let instance = done["job_instance"].as_str().unwrap().to_string();

    // A client subscribing after the run gets the whole output of the last run at once.
    let mut c = ws_connect(port);
    ws_send(&mut c, json!({"subscribe": "stream"}));
    let mut seen_c = Vec::new();
    assert_eq!(collect_output(&mut c, "ws1", &mut seen_c), EXPECTED);

    // The timeline of the last hour has the run.
    ws_send(
        &mut a,
        json!({"getTimeline": {"start_date": "now-1h", "end_date": "now", "id": 42}}),
    );
    let tl = ws_until(&mut a, "timeline", |m| m.get("timeline").is_some());
    let tl = &tl.last().unwrap()["timeline"];
    assert_eq!(tl["id"], 42);
    let content = tl["content"].as_array().unwrap();
    assert!(
        content
            .iter()
            .any(|e| e["msg_type"] == "machine_start" && e["job_instance"] == instance.as_str())
    );
    assert!(
        content.iter().any(|e| e["msg_type"] == "machine_result"
            && e["ret_code"] == 0
            && e["cron"] == "stream")
    );

    // Unsubscribed clients get no more output.
    ws_send(&mut b, json!({"unsubscribe": "stream"}));
    seen.extend(seen_b);
    seen.extend(seen_c);
    no_secret(&seen);
    drop(d);
}

#[test]
fn ws_commands_run_and_kill() {
    let (d, port) = start(&jobs("ws2"));
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": "long"}));
    ws_send(&mut ws, json!({"run": "long"}));
    let msgs = ws_until(&mut ws, "the long job running", |m| {
        m["type"] == "details" && m["data"]["results"]["ws2"]["state"] == "running"
    });
    let instance = msgs.last().unwrap()["data"]["job_instance"]
        .as_str()
        .unwrap()
        .to_string();
    ws_send(
        &mut ws,
        json!({"killMachine": {"cron": "long", "machine": "ws2", "job_instance": instance}}),
    );
    ws_until(&mut ws, "the target killed", |m| {
        m["type"] == "details" && m["data"]["results"]["ws2"]["retcode"] == 143
    });
    let runs = d.runs("long");
    assert_eq!(runs[0]["targets"][0]["exit_code"], 143);

    ws_send(
        &mut ws,
        json!({"ack": {"cron": "long", "machine": "ws2", "position": 8}}),
    );
    ws_send(&mut ws, json!({"run": "long"}));
    // The new run's output starts at position 0 again.
    let new_chunk =
        |m: &Value| m["type"] == "output_chunk" && m["job_instance"] != instance.as_str();
    let after = ws_until(&mut ws, "the second run's output", new_chunk);
    let first = after.last().unwrap();
    assert_eq!(first["position"], 0, "{first}");
    assert_eq!(first["chunk"], "started\n");
    ws_send(&mut ws, json!({"killCron": "long"}));
    let id = wait_until("two runs of long", HANG, || {
        let runs = d.runs("long");
        (runs.len() == 2).then(|| runs[0]["id"].as_u64().unwrap())
    });
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "canceled", "{run}");
}
