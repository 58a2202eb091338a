//! Retries of failed targets: new attempts of the same run, the last one counts.

use serde_json::Value;

use crate::util::*;

fn retry_events(d: &Daemon, run: u64) -> Vec<Value> {
    d.ctl_json(&[
        "events",
        "--run",
        &run.to_string(),
        "--kind",
        "target_retry",
    ])
    .as_array()
    .cloned()
    .unwrap_or_default()
}

#[test]
fn a_command_that_fails_twice_then_succeeds_succeeds_on_its_third_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let command = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo attempt-$n; [ $n -ge 3 ]",
        c = count.display()
    );
    let jobs = format!(
        "flaky:\n  schedule: '@yearly'\n  targets: [r1]\n  command: '{command}'\n  retries: 2\n  retry_delay: 1\n"
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    let (run, code) = d.run_wait("flaky");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    assert_eq!(run["state"], "succeeded");
    let id = run["id"].as_u64().unwrap();
    assert_eq!(target(&run, "r1")["exit_code"], 0);
    // The output of every attempt, one after the other.
    assert_eq!(d.output(id, "r1"), "attempt-1\nattempt-2\nattempt-3\n");
    let events = retry_events(&d, id);
    assert_eq!(events.len(), 2, "{events:?}");
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("attempt 1 ended (exit 1); attempt 2 starts")),
        "{messages:?}"
    );
}

#[test]
fn the_last_attempt_counts_when_retries_run_out() {
    let jobs = "always_bad:\n  schedule: '@yearly'\n  targets: [r2]\n  command: 'echo try; exit 4'\n  retries: 1\n  retry_delay: 1\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let (run, code) = d.run_wait("always_bad");
    assert_eq!(code, 1, "{run}");
    assert_eq!(run["state"], "failed");
    assert_eq!(target(&run, "r2")["exit_code"], 4);
    let id = run["id"].as_u64().unwrap();
    assert_eq!(d.output(id, "r2"), "try\ntry\n");
    assert_eq!(retry_events(&d, id).len(), 1);
}

#[test]
fn a_killed_run_is_not_retried() {
    let jobs = "sleepy:\n  schedule: '@yearly'\n  targets: [r3]\n  command: 'sleep 30'\n  retries: 3\n  retry_delay: 1\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let id = d.run_now("sleepy");
    wait_until("the command to run", HANG, || {
        (target(&d.run_record(id), "r3")["state"] == "running").then_some(())
    });
    let out = d.ctl(&["kill", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = d.wait_run_final(id);
    assert_eq!(target(&run, "r3")["exit_code"], 143, "{run}");
    assert!(retry_events(&d, id).is_empty());
}

#[test]
fn a_kill_cancels_the_batches_not_started_and_the_run_is_canceled() {
    let jobs = "batched:\n  schedule: '@yearly'\n  targets: [b1, b2, b3]\n  batch_size: 1\n  command: 'sleep 30'\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let id = d.run_now("batched");
    let first = wait_until("the first batch to run", HANG, || {
        let r = d.run_record(id);
        r["targets"]
            .as_array()?
            .iter()
            .find(|t| t["state"] == "running")
            .and_then(|t| t["machine"].as_str().map(str::to_string))
    });
    let out = d.ctl(&["kill", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "canceled", "{run}");
    for t in run["targets"].as_array().unwrap() {
        if t["machine"] == first.as_str() {
            assert_eq!(t["exit_code"], 143, "{run}");
        } else {
            assert_eq!(t["reason"], "canceled", "{run}");
            assert!(t["exit_code"].is_null(), "{run}");
        }
    }
}

#[test]
fn attempts_made_before_a_restart_count_against_retries() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let go = dir.path().join("go");
    // Attempt 1 fails at once; attempt 2 fails once `go` exists (after the restart).
    let command = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo attempt-$n; \
         [ $n -ge 2 ] && while [ ! -e {g} ]; do sleep 0.2; done; exit 1",
        c = count.display(),
        g = go.display()
    );
    let jobs = format!(
        "twice:\n  schedule: '@yearly'\n  targets: [r3]\n  command: '{command}'\n  retries: 1\n  retry_delay: 1\n"
    );
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-port.yaml", &fixed_port_config()),
        ("jobs.yaml", &jobs),
    ]);
    let id = d.run_now("twice");
    wait_until("attempt 2 running", HANG, || {
        let n = std::fs::read_to_string(&count).unwrap_or_default();
        (n.trim() == "2").then_some(())
    });
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait_exit().code(), Some(0));
    d.spawn();
    d.wait_ready();
    std::fs::write(&go, "").unwrap();
    let run = wait_until("the run finished", HANG, || {
        let r = d.run_record(id);
        is_final(&r).then_some(r)
    });
    // Attempt 2 was the last one `retries: 1` allows: no third attempt after the restart.
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(target(&run, "r3")["exit_code"], 1, "{run}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "2");
    assert_eq!(d.output(id, "r3"), "attempt-1\nattempt-2\n");
}
