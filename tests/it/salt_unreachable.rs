//! `retry_unreachable` against a real salt-master: a stopped minion restarted inside the
//! window runs its target as a new attempt; a minion that never answers is given up when
//! the window closes; a waiting target can be cancelled.
//!
//! The first test stops and restarts minion-04, the minion no other test targets (the
//! testbed's destructive tests share it, each holding `salt::lock_minion` while it is
//! down, so they never stop and restart it under each other). The other tests here wait
//! for minions that do not exist (minion-96, minion-97: named in a list next to a live
//! minion, never answering), which needs no minion stopped. Job names are this file's
//! own. Run outside scripts/run-tests, export the testbed's SALT_PUBLISH_PORT and
//! SALT_RET_PORT too: the restart (`salt-testbed up`) rewrites the minions' configs.

use crate::salt::{lock_minion, minion_count, salt_daemon, testbed};
use crate::util::*;

/// The minion this file stops and restarts.
const DEDICATED: &str = "minion-04";

fn testbed_script(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/salt-testbed");
    let out = std::process::Command::new(script)
        .args(args)
        .output()
        .expect("salt-testbed");
    assert!(
        out.status.success(),
        "salt-testbed {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn events(d: &Daemon, run: u64, kind: &str) -> Vec<serde_json::Value> {
    d.ctl_json(&["events", "--run", &run.to_string(), "--kind", kind])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_minion_back_inside_the_window_runs_its_target_as_a_new_attempt() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let minions = std::env::var("SALT_MINIONS").unwrap_or_default();
    assert!(
        minions.split(',').any(|m| m == DEDICATED),
        "this test needs {DEDICATED} (scripts/salt-testbed up DIR 4); the testbed has {minions}"
    );
    let _down = lock_minion(&root, DEDICATED);
    testbed_script(&["stop-minion", path_str(&root), DEDICATED]);
    let fast = root.join("cli-fast");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&fast),
        2,
        &format!(
            "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_token: {}\n\
             comeback:\n  schedule: '@yearly'\n  targets: [minion-02, {DEDICATED}]\n  target_type: list\n  \
             retry_unreachable: 150s\n  command: 'echo back-on-$SP_MACHINE'\n",
            crate::api::TOKEN
        ),
    );
    let run = d.run_now("comeback");
    // Visible while it waits; the other target runs meanwhile.
    let waiting = wait_until("the target waiting for its minion", HANG, || {
        let r = d.run_record(run);
        (target(&r, DEDICATED)["state"] == "waiting_unreachable"
            && target(&r, "minion-02")["state"] == "finished")
            .then_some(r)
    });
    assert_eq!(target(&waiting, "minion-02")["exit_code"], 0, "{waiting}");
    assert!(!is_final(&waiting), "{waiting}");
    let listed = d.ctl(&["show-run", &run.to_string()]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("waiting_unreachable"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    // The API's run view says so too.
    let api = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    let resp = crate::api::get(api, &format!("/api/v1/runs/{run}"));
    assert_eq!(resp.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&resp.body).expect("json");
    assert_eq!(target(&v, DEDICATED)["state"], "waiting_unreachable", "{v}");
    testbed_script(&["up", path_str(&root), &minion_count()]);
    let done = wait_until(
        "the run after the minion came back",
        std::time::Duration::from_secs(240),
        || {
            let r = d.run_record(run);
            is_final(&r).then_some(r)
        },
    );
    assert_eq!(done["state"], "succeeded", "{done}\n{}", d.log_text());
    let t = target(&done, DEDICATED);
    assert_eq!(t["exit_code"], 0, "{done}");
    assert_eq!(t["reason"], "exit", "{done}");
    assert_eq!(d.output(run, DEDICATED), format!("back-on-{DEDICATED}\n"));
    // Its attempts: the unreachable one, then the one that ran.
    let attempts = t["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{done}");
    assert_eq!(attempts[0]["attempt"], 1);
    assert_eq!(attempts[0]["reason"], "unreachable");
    assert_eq!(attempts[0]["exit_code"], 255);
    assert_eq!(attempts[1]["attempt"], 2);
    assert_eq!(attempts[1]["exit_code"], 0);
    assert!(!events(&d, run, "target_unreachable").is_empty());
    assert!(!events(&d, run, "target_retry").is_empty());
    assert!(events(&d, run, "target_given_up").is_empty());
}

#[test]
fn a_minion_that_never_answers_is_given_up_and_a_waiting_target_can_be_cancelled() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let fast = root.join("cli-fast");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&fast),
        2,
        "neverback:\n  schedule: '@yearly'\n  targets: [minion-01, minion-97]\n  target_type: list\n  \
         retry_unreachable: 12s\n  command: 'echo here'\n\
         cancelwait:\n  schedule: '@yearly'\n  targets: [minion-03, minion-96]\n  target_type: list\n  \
         retry_unreachable: 1h\n  command: 'echo never'\n",
    );
    let given_up = d.run_now("neverback");
    let waiting = d.run_now("cancelwait");
    wait_until("the cancelwait target waiting", HANG, || {
        let r = d.run_record(waiting);
        (target(&r, "minion-96")["state"] == "waiting_unreachable").then_some(())
    });
    let kill = d.ctl(&["kill", &waiting.to_string(), "--machine", "minion-96"]);
    assert!(
        kill.status.success(),
        "{}",
        String::from_utf8_lossy(&kill.stderr)
    );
    let canceled = d.wait_run_final(waiting);
    // The live minion ran; the one waited for was cancelled, not killed (it never ran).
    assert_eq!(canceled["state"], "partial", "{canceled}");
    assert_eq!(target(&canceled, "minion-03")["exit_code"], 0, "{canceled}");
    let t = target(&canceled, "minion-96");
    assert_eq!(t["reason"], "canceled", "{canceled}");
    assert_eq!(t["exit_code"], serde_json::Value::Null, "{canceled}");

    let done = wait_until(
        "the window to close",
        std::time::Duration::from_secs(120),
        || {
            let r = d.run_record(given_up);
            is_final(&r).then_some(r)
        },
    );
    assert_eq!(done["state"], "partial", "{done}");
    assert_eq!(target(&done, "minion-01")["exit_code"], 0, "{done}");
    let t = target(&done, "minion-97");
    assert_eq!(t["reason"], "gave_up", "{done}");
    assert_eq!(t["exit_code"], 255, "{done}");
    let ev = events(&d, given_up, "target_given_up");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("retry_unreachable"),
        "{ev:?}"
    );
}

#[test]
fn bad_retry_unreachable_values_are_errors_at_their_line() {
    let (passed, text) = config_check(
        "jobs.yaml",
        "a:\n  schedule: '@daily'\n  targets: x\n  command: 'true'\n  retry_unreachable: 30 minutes\n\
         b:\n  schedule: '@daily'\n  targets: x\n  command: 'true'\n  retry_unreachable: 30d\n",
    );
    assert!(!passed, "{text}");
    assert!(
        text.contains("jobs.yaml:5") && text.contains("30 minutes"),
        "{text}"
    );
    assert!(
        text.contains("jobs.yaml:10") && text.contains("7 days"),
        "{text}"
    );
}
