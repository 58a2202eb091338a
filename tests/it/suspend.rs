//! Suspending and resuming runs (issue 29) with the real daemon, wrapper and commands on
//! the local executor: a suspended command really stops using CPU and continues on
//! resume; `timeout_counts_suspended` moves the timeout or not; a kill of a suspended
//! target ends it; a run suspended across a daemon restart stays suspended and resumes.
//!
//! Each command carries a marker (a no-op `:` word) so the test finds its shell in
//! `/proc` and reads its state and CPU time from `/proc/PID/stat`.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::util::*;

/// State letter and CPU ticks (utime + stime) of `pid`, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: the fields after it follow its `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((state, utime + stime))
}

/// The one shell running the command marked `marker`.
fn command_pid(marker: &str) -> u32 {
    wait_until(&format!("the command {marker}"), HANG, || {
        let pids = pids_with(marker);
        (pids.len() == 1).then(|| pids[0])
    })
}

/// CPU ticks `pid` used over `span`.
fn cpu_over(pid: u32, span: Duration) -> u64 {
    let before = stat(pid).expect("stat").1;
    std::thread::sleep(span);
    stat(pid).expect("stat").1 - before
}

fn wait_state(pid: u32, stopped: bool) {
    wait_until(&format!("pid {pid} stopped={stopped}"), HANG, || {
        let (state, _) = stat(pid)?;
        ((state == 'T') == stopped).then_some(())
    });
}

fn suspended_flag(d: &Daemon, run: u64, machine: &str) -> bool {
    target(&d.run_record(run), machine)["suspended"] == Value::Bool(true)
}

fn ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.ctl(args);
    assert!(
        out.status.success(),
        "saltpeterctl {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A busy loop until `stop` exists (marked `marker`).
fn busy_until(marker: &str, stop: &Path) -> String {
    format!(
        "': {marker}; while [ ! -e {} ]; do :; done; echo done-{marker}'",
        stop.display()
    )
}

#[test]
fn a_suspended_command_uses_no_cpu_and_resume_lets_it_finish() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let jobs = format!(
        "busy_sus:\n  schedule: '@yearly'\n  targets: [sus-a]\n  command: {}\n",
        busy_until("sp-sus-cpu", &stop)
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    // Started with `run --wait`, whose progress lines say the suspension too.
    let watch = std::process::Command::new(CTL)
        .arg("--socket")
        .arg(d.socket())
        .args(["run", "busy_sus", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run --wait");
    let run = wait_until("the run", HANG, || {
        d.runs("busy_sus").first().and_then(|r| r["id"].as_u64())
    });
    let pid = command_pid("sp-sus-cpu");
    wait_until("the target to be running", HANG, || {
        (target(&d.run_record(run), "sus-a")["state"] == "running").then_some(())
    });
    assert!(cpu_over(pid, Duration::from_millis(500)) > 0, "busy");

    let said = ok(&d, &["suspend", &run.to_string()]);
    assert!(said.contains("suspend sent to 1 target"), "{said}");
    wait_state(pid, true);
    assert!(suspended_flag(&d, run, "sus-a"), "shown as suspended");
    assert_eq!(
        cpu_over(pid, Duration::from_secs(1)),
        0,
        "a suspended command uses no CPU"
    );
    // The wrapper keeps its heartbeats: the target is not lost while suspended.
    std::thread::sleep(Duration::from_secs(4));
    let r = d.run_record(run);
    assert_eq!(target(&r, "sus-a")["state"], "running", "{r}");

    let said = ok(&d, &["resume", &run.to_string(), "sus-a"]);
    assert!(said.contains("resume sent to 1 target"), "{said}");
    wait_state(pid, false);
    assert!(cpu_over(pid, Duration::from_secs(1)) > 0, "running again");
    wait_until("the flag to clear", HANG, || {
        (!suspended_flag(&d, run, "sus-a")).then_some(())
    });

    std::fs::write(&stop, "").expect("stop file");
    let r = d.wait_run_final(run);
    assert_eq!(r["state"], "succeeded", "{r}\n{}", d.log_text());
    let watched = watch.wait_with_output().expect("run --wait ends");
    let progress = String::from_utf8_lossy(&watched.stderr);
    let said: Vec<&str> = progress.lines().map(str::trim).collect();
    assert_eq!(
        said,
        [
            format!("run {run} started").as_str(),
            "sus-a: started",
            "sus-a: suspended",
            "sus-a: resumed",
            "sus-a: ok (exit 0)"
        ],
        "{progress}"
    );
    let out = d.output(run, "sus-a");
    assert!(out.contains("done-sp-sus-cpu"), "{out}");
    assert!(out.contains("suspended by the server"), "{out}");

    // Audited like a kill: who and what.
    let events = d.ctl_json(&["events", "--run", &run.to_string()]);
    let kinds: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for kind in ["suspend_requested", "resume_requested"] {
        assert!(kinds.contains(&kind), "{kind} missing: {events}");
    }
    // Nothing to suspend any more.
    let out = d.ctl(&["suspend", &run.to_string()]);
    assert_eq!(out.status.code(), Some(2), "a finished run");
}

#[test]
fn timeout_counts_suspended_false_moves_the_deadline_and_true_does_not() {
    // 3 s of running time (six sleeps of 0.5 s), a 5 s timeout, suspended for 3 s: the
    // paused clock ends at ~6.3 s before its deadline (8 s); the counting one passes its
    // deadline (5 s) first.
    let command = |marker: &str| {
        format!("': {marker}; for i in 1 2 3 4 5 6; do sleep 0.5; done; echo finished'")
    };
    let jobs = format!(
        "to_paused:\n  schedule: '@yearly'\n  targets: [to-p]\n  timeout: 5\n  \
         timeout_counts_suspended: false\n  command: {}\n\
         to_counting:\n  schedule: '@yearly'\n  targets: [to-c]\n  timeout: 5\n  \
         kill_grace: 1\n  command: {}\n",
        command("sp-to-paused"),
        command("sp-to-counting")
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    let paused = d.run_now("to_paused");
    let counting = d.run_now("to_counting");
    let shells = [command_pid("sp-to-paused"), command_pid("sp-to-counting")];
    for (run, machine) in [(paused, "to-p"), (counting, "to-c")] {
        wait_until("running", HANG, || {
            (target(&d.run_record(run), machine)["state"] == "running").then_some(())
        });
        ok(&d, &["suspend", &run.to_string()]);
    }
    for pid in shells {
        wait_state(pid, true);
    }
    std::thread::sleep(Duration::from_secs(3));
    for run in [paused, counting] {
        // The counting one may already be over (timed out while suspended).
        let _ = d.ctl(&["resume", &run.to_string()]);
    }
    let r = d.wait_run_final(paused);
    let t = target(&r, "to-p");
    assert_eq!(
        (t["reason"].as_str(), t["exit_code"].as_i64()),
        (Some("exit"), Some(0)),
        "{r}\n{}",
        d.log_text()
    );
    assert!(d.output(paused, "to-p").contains("finished"));
    let r = d.wait_run_final(counting);
    let t = target(&r, "to-c");
    assert_eq!(
        (t["reason"].as_str(), t["exit_code"].as_i64()),
        (Some("timeout"), Some(124)),
        "{r}"
    );
}

#[test]
fn kill_of_a_suspended_target_ends_it_as_killed() {
    let jobs = "kill_sus:\n  schedule: '@yearly'\n  targets: [ks-a]\n  kill_grace: 5\n  \
                command: ': sp-kill-sus; trap \"echo got-term; exit 7\" TERM; \
                while :; do sleep 0.1; done'\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let run = d.run_now("kill_sus");
    let pid = command_pid("sp-kill-sus");
    wait_until("running", HANG, || {
        (target(&d.run_record(run), "ks-a")["state"] == "running").then_some(())
    });
    ok(&d, &["suspend", &run.to_string(), "ks-a"]);
    wait_state(pid, true);
    ok(&d, &["kill", &run.to_string()]);
    let r = d.wait_run_final(run);
    let t = target(&r, "ks-a");
    assert_eq!(t["reason"], "killed", "{r}\n{}", d.log_text());
    assert_eq!(t["suspended"], false, "{r}");
    // The group was continued after TERM: the shell ran its trap, well before the KILL.
    let out = d.output(run, "ks-a");
    assert!(out.contains("got-term"), "{out}");
    assert!(!alive(pid));
}

#[test]
fn a_run_suspended_across_a_daemon_restart_stays_suspended_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let jobs = format!(
        "restart_sus:\n  schedule: '@yearly'\n  targets: [rs-a]\n  command: {}\n",
        busy_until("sp-restart-sus", &stop)
    );
    let port = fixed_port_config();
    let mut d = Daemon::prepare(&[
        ("01-fast.yaml", FAST),
        ("02-port.yaml", &port),
        ("jobs.yaml", &jobs),
    ]);
    d.spawn();
    d.wait_ready();
    let run = d.run_now("restart_sus");
    let pid = command_pid("sp-restart-sus");
    wait_until("running", HANG, || {
        (target(&d.run_record(run), "rs-a")["state"] == "running").then_some(())
    });
    ok(&d, &["suspend", &run.to_string()]);
    wait_state(pid, true);
    wait_until("the flag stored", HANG, || {
        suspended_flag(&d, run, "rs-a").then_some(())
    });

    // The ordered stop (SIGTERM); the wrapper and its stopped command stay.
    d.signal(Signal::SIGTERM);
    let _ = d.wait_exit();
    assert_eq!(cpu_over(pid, Duration::from_secs(1)), 0, "still stopped");

    d.start_again();
    assert!(
        suspended_flag(&d, run, "rs-a"),
        "restored from the database"
    );
    // The wrapper reconnects (its hello says suspended) and the command stays stopped.
    wait_until("the wrapper back", HANG, || {
        let hellos = d
            .log_text()
            .lines()
            .filter(|l| l.contains(&format!("run {run}: wrapper")) && l.ends_with(") connected"))
            .count();
        (hellos >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        stat(pid).map(|s| s.0),
        Some('T'),
        "stopped after the restart"
    );
    assert_eq!(cpu_over(pid, Duration::from_secs(1)), 0);
    assert!(suspended_flag(&d, run, "rs-a"));

    ok(&d, &["resume", &run.to_string()]);
    wait_state(pid, false);
    assert!(
        cpu_over(pid, Duration::from_millis(500)) > 0,
        "running again"
    );
    std::fs::write(&stop, "").expect("stop file");
    let r = d.wait_run_final(run);
    assert_eq!(r["state"], "succeeded", "{r}\n{}", d.log_text());
    assert!(d.output(run, "rs-a").contains("done-sp-restart-sus"));
}

#[test]
fn suspend_and_resume_over_the_api_need_the_operator_role_and_are_audited_by_name() {
    use sha2::{Digest, Sha256};
    let sha = |t: &str| -> String {
        Sha256::digest(t.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let (viewer, operator) = ("sus-viewer-token", "sus-operator-token");
    let config = format!(
        "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  heartbeat: 1\n  \
         pickup_timeout: 5\n  hello_timeout: 2\n  api_tokens:\n    \
         - {{name: vera, role: viewer, token_sha256: {}}}\n    \
         - {{name: otto, role: operator, token_sha256: {}}}\n",
        sha(viewer),
        sha(operator)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let jobs = format!(
        "api_sus:\n  schedule: '@yearly'\n  targets: [as-a, as-b]\n  command: {}\n",
        busy_until("sp-api-sus", &stop)
    );
    let (d, port) = crate::api::start_with(&config, &jobs);
    let call = |method: &str, path: &str, token: &str| {
        let auth = format!("Bearer {token}");
        crate::api::client::request(port, method, path, &[("Authorization", &auth)], b"")
    };
    let run = d.run_now("api_sus");
    wait_until("both running", HANG, || {
        let r = d.run_record(run);
        ["as-a", "as-b"]
            .iter()
            .all(|m| target(&r, m)["state"] == "running")
            .then_some(())
    });

    let refused = call("POST", &format!("/api/v1/runs/{run}/suspend"), viewer);
    assert_eq!(refused.status, 403, "{}", refused.text());
    let done = call(
        "POST",
        &format!("/api/v1/runs/{run}/targets/as-a/suspend"),
        operator,
    );
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(
        done.text().contains("suspend sent to 1 target"),
        "{}",
        done.text()
    );
    let shown = call("GET", &format!("/api/v1/runs/{run}"), viewer).json();
    let flags: Vec<(Value, Value)> = ["as-a", "as-b"]
        .iter()
        .map(|m| {
            let t = target(&shown, m);
            (t["state"].clone(), t["suspended"].clone())
        })
        .collect();
    assert_eq!(
        flags,
        [
            (Value::from("running"), Value::Bool(true)),
            (Value::from("running"), Value::Bool(false))
        ],
        "{shown}"
    );
    let metrics = call("GET", "/metrics", viewer).text();
    assert!(
        metrics
            .lines()
            .any(|l| l == "saltpeter_targets_suspended 1"),
        "{metrics}"
    );
    let resumed = call("POST", &format!("/api/v1/runs/{run}/resume"), operator);
    assert_eq!(resumed.status, 200, "{}", resumed.text());
    assert_eq!(
        call("POST", "/api/v1/runs/99999/suspend", operator).status,
        404
    );
    assert_eq!(
        call("GET", &format!("/api/v1/runs/{run}/suspend"), operator).status,
        405
    );
    let events = d
        .ctl_json(&["events", "--run", &run.to_string()])
        .to_string();
    for asked in ["suspend_requested", "resume_requested"] {
        assert!(events.contains(asked), "{events}");
    }
    assert!(events.contains("(by api:otto)"), "{events}");

    std::fs::write(&stop, "").expect("stop file");
    let r = d.wait_run_final(run);
    assert_eq!(r["state"], "succeeded", "{r}");
}

#[test]
fn a_target_whose_wrapper_cannot_suspend_is_refused_with_a_clear_message() {
    // No real wrapper (`/bin/true` is launched instead): this test plays an older wrapper,
    // whose hello advertises no capability.
    let jobs = "old_wrapper:\n  schedule: '@yearly'\n  targets: [ow1]\n  \
                wrapper_path: /bin/true\n  command: 'sleep 60'\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let run = d.run_now("old_wrapper");
    let secret = saltpeter::tokens::Secret::load_or_create(&d.state_dir().join("server.secret"))
        .expect("secret");
    let send = |ws: &mut tungstenite::WebSocket<std::net::TcpStream>, v: Value| {
        ws.send(tungstenite::Message::text(v.to_string()))
            .expect("send");
    };
    let mut ws = wrapper_ws(d.wrapper_port());
    send(
        &mut ws,
        serde_json::json!({"type": "hello", "v": 1, "run": run, "machine": "ow1",
            "token": secret.launch_token(run, "ow1", 1), "wrapper_version": "0.0.1-old",
            "pid": 1, "resume_from": null}),
    );
    let welcome = next_json(&mut ws).expect("welcome");
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    send(
        &mut ws,
        serde_json::json!({"type": "started", "pid": 1, "at": 0}),
    );
    wait_until("running", HANG, || {
        (target(&d.run_record(run), "ow1")["state"] == "running").then_some(())
    });
    let out = d.ctl(&["suspend", &run.to_string()]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("older build without suspend"), "{said}");
    assert!(!suspended_flag(&d, run, "ow1"));
    // It never hears of suspension: the next messages are the end of its run.
    send(
        &mut ws,
        serde_json::json!({"type": "exited", "end_seq": 0, "code": 0, "signal": null,
            "reason": "exit", "at": 0}),
    );
    loop {
        let msg = next_json(&mut ws).expect("done");
        assert_ne!(msg["type"], "suspend", "{msg}");
        if msg["type"] == "done" {
            break;
        }
    }
    let r = d.wait_run_final(run);
    assert_eq!(r["state"], "succeeded", "{r}");
}
