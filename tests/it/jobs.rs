//! Jobs end to end on the local executor: schedule, wrappers, output, exit codes, kill,
//! timeouts, tokens, overlap, batches, pickup and liveness failures.

use std::time::{Duration, Instant};

use crate::util::*;

fn start(jobs: &str) -> Daemon {
    Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)])
}

#[test]
fn scheduled_job_records_exit_codes_and_output() {
    let d = start(
        "every2:\n  schedule: '*/2 * * * * *'\n  targets: [m1, m2]\n  \
         command: 'echo out-$SP_MACHINE; echo err-$SP_MACHINE >&2; exit 3'\n",
    );
    let runs = d.wait_final_runs("every2", 2);
    for run in &runs {
        assert_eq!(run["trigger"], "schedule");
        assert_eq!(run["state"], "failed", "{run}");
        let slot = run["slot"].as_str().expect("slot");
        let secs: u32 = slot[17..19].parse().expect("seconds of slot");
        assert_eq!(secs % 2, 0, "slots are on even seconds: {slot}");
        for m in ["m1", "m2"] {
            let t = target(run, m);
            assert_eq!(t["state"], "finished");
            assert_eq!(t["reason"], "exit");
            assert_eq!(t["exit_code"], 3);
            let out = d.output(run["id"].as_u64().expect("id"), m);
            assert!(out.contains(&format!("out-{m}\n")), "{out:?}");
            assert!(out.contains(&format!("err-{m}\n")), "{out:?}");
        }
    }
    let jobs = d.ctl_json(&["jobs"]);
    let job = &jobs.as_array().expect("jobs")[0];
    assert_eq!(job["name"], "every2");
    assert_eq!(job["group"], "jobs");
    assert_eq!(job["last_result"], "failed");
    assert!(job["next_run"].is_string());
    assert_eq!(job["enabled"], true);
}

#[test]
fn run_now_and_wait() {
    let d = start(
        "ok:\n  schedule: '@yearly'\n  targets: [a]\n  command: 'echo fine'\n\
         bad:\n  schedule: '@yearly'\n  targets: [a, b]\n  command: 'test $SP_MACHINE = a'\n",
    );
    let id = d.run_now("ok");
    let run = d.wait_run_final(id);
    assert_eq!(run["trigger"], "manual");
    assert!(run["slot"].is_null());
    assert_eq!(run["state"], "succeeded");
    let (run, code) = d.run_wait("ok");
    assert_eq!(code, 0);
    assert_eq!(run["state"], "succeeded");
    assert_eq!(d.output(run["id"].as_u64().expect("id"), "a"), "fine\n");
    let (run, code) = d.run_wait("bad");
    assert_eq!(code, 1, "a failed target fails run --wait");
    assert_eq!(run["state"], "partial");
    assert_eq!(target(&run, "a")["exit_code"], 0);
    assert_eq!(target(&run, "b")["exit_code"], 1);
    let out = d.ctl(&["run", "nosuchjob"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuchjob"));
}

#[test]
fn kill_gives_143_and_leaves_no_process() {
    let marker = "98765";
    let d = start(&format!(
        "sleeper:\n  schedule: '@yearly'\n  targets: [k1, k2]\n  kill_grace: 2\n  \
         command: 'sleep 1{marker} & sleep 2{marker}; echo never'\n"
    ));
    let id = d.run_now("sleeper");
    wait_until("both commands running", HANG, || {
        let r = d.run_record(id);
        (target(&r, "k1")["state"] == "running" && target(&r, "k2")["state"] == "running")
            .then_some(())
    });
    assert!(!pids_with(&format!("sleep 1{marker}")).is_empty());
    let out = d.ctl(&["kill", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = d.wait_run_final(id);
    for m in ["k1", "k2"] {
        assert_eq!(target(&run, m)["exit_code"], 143, "{run}");
        assert_eq!(target(&run, m)["reason"], "killed");
    }
    assert_eq!(run["state"], "canceled");
    wait_until("job processes gone", Duration::from_secs(10), || {
        (pids_with(&format!("1{marker}")).is_empty() && pids_with(&format!("2{marker}")).is_empty())
            .then_some(())
    });
}

#[test]
fn kill_one_machine() {
    let d = start(
        "pair:\n  schedule: '@yearly'\n  targets: [x, y]\n  command: 'sleep 3; echo slept'\n",
    );
    let id = d.run_now("pair");
    wait_until("x running", HANG, || {
        (target(&d.run_record(id), "x")["state"] == "running").then_some(())
    });
    let out = d.ctl(&["kill", &id.to_string(), "--machine", "x"]);
    assert!(out.status.success());
    let run = d.wait_run_final(id);
    assert_eq!(target(&run, "x")["exit_code"], 143);
    assert_eq!(target(&run, "y")["exit_code"], 0);
    assert_eq!(run["state"], "partial");
}

#[test]
fn timeout_gives_124_and_zero_means_no_limit() {
    let d = start(
        "short:\n  schedule: '@yearly'\n  targets: [t]\n  timeout: 1\n  kill_grace: 1\n  \
         command: 'echo begin; sleep 30'\n\
         unlimited:\n  schedule: '@yearly'\n  targets: [t]\n  timeout: 0\n  \
         command: 'sleep 3; echo survived'\n",
    );
    let started = Instant::now();
    let (run, _) = d.run_wait("short");
    assert_eq!(target(&run, "t")["exit_code"], 124, "{run}");
    assert_eq!(target(&run, "t")["reason"], "timeout");
    assert!(started.elapsed() < Duration::from_secs(20));
    let id = run["id"].as_u64().expect("id");
    assert!(d.output(id, "t").starts_with("begin\n"));
    let (run, code) = d.run_wait("unlimited");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("id");
    assert_eq!(d.output(id, "t"), "survived\n");
}

#[test]
fn command_environment_has_no_token() {
    let d = start(
        "envjob:\n  schedule: '@yearly'\n  targets: [e1]\n  env:\n    GREETING: hi there\n  \
         command: env\n",
    );
    let (run, code) = d.run_wait("envjob");
    assert_eq!(code, 0);
    let id = run["id"].as_u64().expect("id");
    let out = d.output(id, "e1");
    assert!(!out.contains("SP_TOKEN"), "{out}");
    assert!(!out.contains("SP_URL"), "{out}");
    for needle in [
        "SP_JOB_NAME=envjob".to_string(),
        format!("SP_RUN={id}"),
        format!("SP_JOB_INSTANCE={id}"),
        "SP_MACHINE=e1".to_string(),
        "GREETING=hi there".to_string(),
    ] {
        assert!(out.lines().any(|l| l == needle), "{needle} missing: {out}");
    }
    // The env value is a secret: the daemon never logs it.
    assert!(!d.log_text().contains("hi there"));
}

#[test]
fn overlap_forbid_skips_and_records() {
    let d = start("long:\n  schedule: '* * * * * *'\n  targets: [o]\n  command: 'sleep 3'\n");
    let skipped = wait_until("a skipped firing", HANG, || {
        d.runs("long").into_iter().find(|r| r["state"] == "skipped")
    });
    let reason = skipped["reason"].as_str().expect("reason");
    assert!(reason.contains("overlap"), "{reason}");
    assert_eq!(skipped["trigger"], "schedule");
    assert!(skipped["slot"].is_string());
    // Never two runs of the job at once.
    let runs = d.wait_final_runs("long", 4);
    let ran: Vec<&serde_json::Value> = runs.iter().filter(|r| r["state"] != "skipped").collect();
    for pair in ran.windows(2) {
        assert!(
            time_at(pair[0], "ended") <= time_at(pair[1], "started"),
            "runs overlap: {} {}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn batches_run_one_after_another() {
    let d = start(
        "batched:\n  schedule: '@yearly'\n  targets: [b1, b2, b3]\n  batch_size: 1\n  \
         command: 'sleep 1'\n",
    );
    let (run, code) = d.run_wait("batched");
    assert_eq!(code, 0, "{run}");
    let mut spans: Vec<_> = run["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| (time_at(t, "started"), time_at(t, "ended")))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "batches overlap: {spans:?}");
    }
}

#[test]
fn number_of_targets_picks_a_subset() {
    let d = start(
        "some:\n  schedule: '@yearly'\n  targets: [n1, n2, n3, n4]\n  number_of_targets: 2\n  \
         command: 'true'\n",
    );
    let (run, code) = d.run_wait("some");
    assert_eq!(code, 0);
    assert_eq!(run["targets"].as_array().map(Vec::len), Some(2), "{run}");
}

#[test]
fn wrapper_that_never_connects_gives_254() {
    let d = start(
        "ghost:\n  schedule: '@yearly'\n  targets: [g]\n  wrapper_path: /bin/true\n  \
         command: 'echo never'\n",
    );
    let (run, code) = d.run_wait("ghost");
    assert_eq!(code, 1);
    assert_eq!(target(&run, "g")["exit_code"], 254, "{run}");
    assert_eq!(target(&run, "g")["reason"], "wrapper_failed");
}

#[test]
fn wrapper_that_goes_silent_gives_253() {
    let d = start("quiet:\n  schedule: '@yearly'\n  targets: [q]\n  command: 'sleep 1234567'\n");
    let id = d.run_now("quiet");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), "q")["state"] == "running").then_some(())
    });
    let wrappers = wrapper_pids(id, "q");
    assert!(!wrappers.is_empty(), "wrapper found");
    for pid in &wrappers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGSTOP,
        );
    }
    let run = d.wait_run_final(id);
    assert_eq!(target(&run, "q")["exit_code"], 253, "{run}");
    assert_eq!(target(&run, "q")["reason"], "lost");
    for pid in wrappers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    for pid in pids_with("sleep 1234567") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
