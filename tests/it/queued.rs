//! What a run waits for is visible: targets of a batch waiting for its turn are `queued`
//! in `saltpeterctl show-run` and the API's run view, and each target tried more than once
//! lists its attempts (number, exit, times) in both.

use serde_json::Value;

use crate::util::*;

#[test]
fn a_batch_waiting_for_its_turn_is_queued_in_the_cli_and_the_api() {
    let jobs = "batched:\n  schedule: '@yearly'\n  targets: [b1, b2]\n  batch_size: 1\n  command: 'sleep 3; echo done'\n";
    let (d, api) = crate::api::start(jobs);
    let run = d.run_now("batched");
    // One of the two runs first; the other waits for its turn, shown as queued.
    let seen = wait_until("a queued target", HANG, || {
        let r = d.run_record(run);
        let states: Vec<String> = ["b1", "b2"]
            .iter()
            .map(|m| target(&r, m)["state"].as_str().unwrap_or("").to_string())
            .collect();
        states.iter().any(|s| s == "queued").then_some(r)
    });
    let queued = ["b1", "b2"]
        .into_iter()
        .find(|m| target(&seen, m)["state"] == "queued")
        .expect("a queued machine");
    let resp = crate::api::get(api, &format!("/api/v1/runs/{run}"));
    assert_eq!(resp.status, 200);
    let v: Value = serde_json::from_slice(&resp.body).unwrap();
    let state = target(&v, queued)["state"].clone();
    // It may have started between the two reads; then it is past queued, never before.
    assert!(
        state == "queued" || state == "launching" || state == "picked_up" || state == "running",
        "{v}"
    );
    let done = d.wait_run_final(run);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(target(&done, queued)["exit_code"], 0);
}

#[test]
fn attempts_are_listed_per_target_in_the_cli_and_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let command = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; [ $n -ge 2 ] || exit 6",
        c = count.display()
    );
    let jobs = format!(
        "twice:\n  schedule: '@yearly'\n  targets: [a1, a2]\n  command: 'case $SP_MACHINE in a2) true;; *) {command};; esac'\n  retries: 1\n  retry_delay: 1\n"
    );
    let (d, api) = crate::api::start(&jobs);
    let (run, code) = d.run_wait("twice");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    let id = run["id"].as_u64().unwrap();
    let shown = d.run_record(id);
    let a1 = target(&shown, "a1");
    let attempts = a1["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{shown}");
    assert_eq!(attempts[0]["attempt"], 1);
    assert_eq!(attempts[0]["exit_code"], 6);
    assert_eq!(attempts[0]["reason"], "exit");
    assert!(
        attempts[0]["started"].is_string() && attempts[0]["ended"].is_string(),
        "{shown}"
    );
    assert_eq!(attempts[1]["attempt"], 2);
    assert_eq!(attempts[1]["exit_code"], 0);
    // A target tried once has no attempts list.
    assert!(target(&shown, "a2").get("attempts").is_none(), "{shown}");
    let resp = crate::api::get(api, &format!("/api/v1/runs/{id}"));
    assert_eq!(resp.status, 200);
    let v: Value = serde_json::from_slice(&resp.body).unwrap();
    assert_eq!(target(&v, "a1")["attempts"], a1["attempts"], "{v}");
    let table = d.ctl(&["show-run", &id.to_string()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("attempts:") && text.contains("ATTEMPT"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("a1 "))
        .collect();
    assert!(rows.len() >= 3, "the target and its two attempts: {text}");
}

/// A pre-staged salt run (launched ahead of its slot) is `queued` until its slot, and its
/// start is recorded at the slot, not at the launch.
#[test]
fn a_prestaged_run_is_queued_until_its_slot() {
    let Some((root, bin, _)) = crate::salt::testbed() else {
        return;
    };
    let config_dir = root.join("master");
    let d = crate::salt::salt_daemon(
        &root,
        &bin,
        path_str(&config_dir),
        10,
        "queuedslot:\n  schedule: '*/5 * * * * *'\n  targets: [minion-03]\n  \
         target_type: list\n  command: 'true'\n",
    );
    // The lead is at least 1 s: a poll of the newest run meets it queued in some slot.
    wait_until(
        "a run queued for its slot",
        std::time::Duration::from_secs(180),
        || {
            let runs = d.ctl_json(&["runs", "queuedslot", "--limit", "1"]);
            (runs[0]["state"] == "queued").then_some(())
        },
    );
    let ok = wait_until(
        "two succeeded runs",
        std::time::Duration::from_secs(180),
        || {
            let ok: Vec<Value> = d
                .runs("queuedslot")
                .into_iter()
                .filter(|r| r["state"] == "succeeded")
                .collect();
            (ok.len() >= 2).then_some(ok)
        },
    );
    for run in ok {
        let at = |k: &str| {
            chrono::DateTime::parse_from_rfc3339(run[k].as_str().expect(k))
                .expect("rfc3339")
                .timestamp_millis()
        };
        assert!(
            at("started") >= at("slot"),
            "started before its slot: {run}"
        );
    }
}
