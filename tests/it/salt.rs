//! The salt executor against a real salt-master and minions (scripts/salt-testbed), and
//! against fake `salt` programs for the failure modes a real master rarely shows.
//!
//! The testbed is started once by scripts/run-tests (4 minions: minion-04 is the one the
//! destructive tests stop, here and in `salt_unreachable`, each holding
//! [`lock_minion`] meanwhile; no other test targets it). Set SALTPETER_TEST_SKIP=salt to
//! skip the real-Salt tests.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::util::*;

/// How long a test waits for scheduled salt runs to succeed: only a hang detector. Slots
/// are seconds apart, and on a loaded 2-core machine running the whole suite each launch
/// costs several seconds of salt CLI time, so early slots are skipped by the overlap rule
/// while the pre-staging lead adapts.
const SALT_SLOTS: std::time::Duration = std::time::Duration::from_secs(180);

/// The shared testbed, or `None` when told to run without Salt.
pub(crate) fn testbed() -> Option<(PathBuf, String, String)> {
    if !crate::components::present_or_skipped(
        "salt",
        || std::env::var_os("SALTPETER_SALT_TESTBED").is_some(),
        "no Salt testbed: run `scripts/salt-testbed up /tmp/sp-salt 4` and export the \
         variables it prints plus SALTPETER_SALT_TESTBED=/tmp/sp-salt (scripts/run-tests \
         does this)",
    ) {
        return None;
    }
    let root = std::env::var("SALTPETER_SALT_TESTBED").expect("checked above");
    let bin = std::env::var("SALT_BIN").expect("SALT_BIN from the testbed");
    Some((PathBuf::from(root), bin, String::new()))
}

/// A daemon on the salt executor; `config_dir` is the master config dir to use.
pub(crate) fn salt_daemon(
    root: &std::path::Path,
    bin: &str,
    config_dir: &str,
    ping: u64,
    jobs: &str,
) -> Daemon {
    let wrapper_dir = tempfile::Builder::new()
        .prefix("wrapper-")
        .tempdir_in(root.join("var"))
        .expect("wrapper dir")
        .keep();
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {bin}\n  salt_config_dir: {config_dir}\n  \
         ping_timeout: {ping}\n  heartbeat: 1\n  pickup_timeout: 20\n  \
         default_wrapper_path: {}/saltpeter-wrapper\n",
        wrapper_dir.display()
    );
    Daemon::start(&[("02-salt.yaml", &config), ("jobs.yaml", jobs)])
}

/// The testbed's minions, in order.
pub(crate) fn minion_names() -> Vec<String> {
    std::env::var("SALT_MINIONS")
        .map(|m| m.split(',').map(str::to_string).collect())
        .unwrap_or_else(|_| (1..=4).map(|i| format!("minion-{i:02}")).collect())
}

/// How many minions the testbed has (`up` with fewer would stop the others).
pub(crate) fn minion_count() -> String {
    std::env::var("SALT_MINIONS")
        .map(|m| m.split(',').count().to_string())
        .unwrap_or_else(|_| "4".to_string())
}

/// Held by a test that stops `minion` (and restarts it) for as long as it needs it down:
/// tests run in parallel processes, so two of them must not stop and restart the same
/// minion under each other.
pub(crate) fn lock_minion(
    root: &std::path::Path,
    minion: &str,
) -> nix::fcntl::Flock<std::fs::File> {
    let path = root.join("var").join(format!("{minion}.test-lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("lock {}: {e}", path.display()))
}

/// The machines of a run's record, sorted.
pub(crate) fn machines(run: &serde_json::Value) -> Vec<String> {
    let mut m: Vec<String> = run["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["machine"].as_str().expect("machine").to_string())
        .collect();
    m.sort();
    m
}

#[test]
fn targeting_output_exit_codes_deployment_and_secrets() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let secret = format!("s3cret-{}", std::process::id());
    let jobs = format!(
        "glob:\n  schedule: '@yearly'\n  targets: 'minion-0[12]'\n  command: 'echo on-$SP_MACHINE'\n\
         list:\n  schedule: '@yearly'\n  targets: [minion-01, minion-03]\n  target_type: list\n  command: 'true'\n\
         grain:\n  schedule: '@yearly'\n  targets: 'role:web'\n  target_type: grain\n  command: 'true'\n\
         compound:\n  schedule: '@yearly'\n  targets: 'G@role:web and G@env:prod'\n  target_type: compound\n  command: 'true'\n\
         nothing:\n  schedule: '@yearly'\n  targets: 'role:nosuch'\n  target_type: grain\n  command: 'true'\n\
         codes:\n  schedule: '@yearly'\n  targets: minion-02\n  env:\n    TOKEN_FOR_API: {secret}\n  \
         command: 'echo out-$TOKEN_FOR_API; echo err >&2; exit 7'\n"
    );
    let config_dir = root.join("master");
    let d = salt_daemon(&root, &bin, path_str(&config_dir), 10, &jobs);

    let (run, code) = d.run_wait("glob");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    assert_eq!(machines(&run), ["minion-01", "minion-02"]);
    let id = run["id"].as_u64().expect("id");
    assert_eq!(d.output(id, "minion-01"), "on-minion-01\n");
    // Deployed on first use, executable.
    let wrapper_path = std::fs::read_to_string(d.config_dir().join("02-salt.yaml"))
        .expect("config")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("default_wrapper_path: ")
                .map(str::to_string)
        })
        .expect("wrapper path");
    let mode = std::fs::metadata(&wrapper_path)
        .expect("deployed wrapper")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    assert_eq!(machines(&d.run_wait("list").0), ["minion-01", "minion-03"]);
    assert_eq!(machines(&d.run_wait("grain").0), ["minion-01", "minion-03"]);
    assert_eq!(machines(&d.run_wait("compound").0), ["minion-01"]);

    let (run, code) = d.run_wait("nothing");
    assert_eq!(code, 1);
    assert_eq!(run["state"], "skipped");
    assert!(
        run["reason"]
            .as_str()
            .unwrap_or("")
            .contains("no minions matched"),
        "{run}"
    );

    let (run, _) = d.run_wait("codes");
    let t = target(&run, "minion-02");
    assert_eq!(t["exit_code"], 7, "{run}");
    assert_eq!(t["reason"], "exit");
    let id = run["id"].as_u64().expect("id");
    let out = d.output(id, "minion-02");
    assert!(
        out.contains(&format!("out-{secret}\n")) && out.contains("err\n"),
        "{out}"
    );

    // The secret went over the WebSocket only: not in Salt's job cache or logs.
    let found = std::process::Command::new("grep")
        .args(["-rl", "--binary-files=text", &secret])
        .arg(&root)
        .output()
        .expect("grep");
    assert!(
        found.stdout.is_empty(),
        "secret found under the testbed: {}",
        String::from_utf8_lossy(&found.stdout)
    );
    assert!(!d.log_text().contains(&secret));
}

#[test]
fn a_stopped_or_unknown_minion_is_255_while_others_succeed() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/salt-testbed");
    let _minion_04 = lock_minion(&root, "minion-04");
    let stop = std::process::Command::new(script)
        .args(["stop-minion", path_str(&root), "minion-04"])
        .output()
        .expect("stop minion");
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let fast = root.join("cli-fast");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&fast),
        2,
        "partly:\n  schedule: '@yearly'\n  targets: [minion-02, minion-04, minion-99]\n  \
         target_type: list\n  command: 'echo here'\n",
    );
    let (run, code) = d.run_wait("partly");
    let up = std::process::Command::new(script)
        .args(["up", path_str(&root), &minion_count()])
        .output()
        .expect("restart minion");
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert_eq!(code, 1);
    assert_eq!(run["state"], "partial", "{run}");
    assert_eq!(target(&run, "minion-02")["exit_code"], 0);
    for m in ["minion-04", "minion-99"] {
        assert_eq!(target(&run, m)["exit_code"], 255, "{run}");
        assert_eq!(target(&run, m)["reason"], "unreachable");
    }
}

#[test]
fn two_jobs_in_the_same_second_do_not_wait_for_each_other() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = root.join("master");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&config_dir),
        10,
        "left:\n  schedule: '*/20 * * * * *'\n  targets: minion-01\n  command: 'sleep 6'\n\
         right:\n  schedule: '*/20 * * * * *'\n  targets: minion-03\n  command: 'sleep 6'\n",
    );
    // The first slot both jobs ran (a slot may be skipped by the overlap rule when the
    // machine is slow).
    let (left, right) = wait_until("both jobs run the same slot", SALT_SLOTS, || {
        let done = |job: &str| -> Vec<serde_json::Value> {
            d.runs(job)
                .into_iter()
                .filter(|r| r["state"] == "succeeded")
                .collect()
        };
        let lefts = done("left");
        let rights = done("right");
        lefts.iter().find_map(|l| {
            rights
                .iter()
                .find(|r| r["slot"] == l["slot"])
                .map(|r| (l.clone(), r.clone()))
        })
    });
    let l = target(&left, "minion-01");
    let r = target(&right, "minion-03");
    assert_eq!(l["exit_code"], 0, "{left}");
    assert_eq!(r["exit_code"], 0, "{right}");
    // Each command ran 6 s; had one launch waited for the other run, they would not overlap.
    assert!(
        time_at(l, "started") < time_at(r, "ended"),
        "{left} {right}"
    );
    assert!(
        time_at(r, "started") < time_at(l, "ended"),
        "{left} {right}"
    );
}

/// A fake `salt` program (bad input that a real master rarely produces).
fn fake_salt(dir: &std::path::Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write fake salt");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_string_lossy().into_owned()
}

#[test]
fn broken_salt_fails_the_run_with_its_cause_and_scheduling_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = fake_salt(dir.path(), "garbage", "echo '{\"minion-01\": tr'; exit 0");
    let hangs = fake_salt(dir.path(), "hangs", "exec sleep 1000");
    let jobs = "missing_bin:\n  schedule: '@yearly'\n  targets: m\n  command: 'true'\n\
         truncated:\n  schedule: '@yearly'\n  targets: m\n  command: 'true'\n\
         ticking:\n  schedule: '* * * * * *'\n  executor: local\n  targets: [tick]\n  command: 'true'\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-salt.yaml",
            "saltpeter_config:\n  executor: salt\n  salt_bin: /nonexistent/salt\n  ping_timeout: 1\n",
        ),
        ("jobs.yaml", jobs),
    ]);
    let (run, code) = d.run_wait("missing_bin");
    assert_eq!(code, 1);
    assert_eq!(run["state"], "failed");
    let reason = run["reason"].as_str().unwrap_or("");
    assert!(reason.contains("/nonexistent/salt"), "{reason}");

    // Switch to a salt that prints a truncated line, then to one that hangs.
    d.write_config(
        "02-salt.yaml",
        &format!("saltpeter_config:\n  executor: salt\n  salt_bin: {garbage}\n  ping_timeout: 1\n"),
    );
    assert!(d.ctl(&["reload"]).status.success());
    let (run, _) = d.run_wait("truncated");
    assert_eq!(run["state"], "failed");
    assert!(
        run["reason"]
            .as_str()
            .unwrap_or("")
            .contains("no usable answer"),
        "{run}"
    );

    d.write_config(
        "02-salt.yaml",
        &format!("saltpeter_config:\n  executor: salt\n  salt_bin: {hangs}\n  ping_timeout: 1\n"),
    );
    assert!(d.ctl(&["reload"]).status.success());
    let (run, _) = d.run_wait("truncated");
    assert_eq!(run["state"], "failed");
    assert!(
        run["reason"].as_str().unwrap_or("").contains("killed"),
        "{run}"
    );

    // Meanwhile the local job kept firing every second.
    let ticks = d
        .runs("ticking")
        .into_iter()
        .filter(|r| r["state"] == "succeeded")
        .count();
    assert!(ticks >= 5, "only {ticks} ticks");
}

#[test]
fn scheduled_salt_runs_are_prestaged_and_start_at_their_slot() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = root.join("master");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&config_dir),
        10,
        "stamp:\n  schedule: '*/5 * * * * *'\n  targets: [minion-01, minion-02]\n  \
         target_type: list\n  command: 'date +%s%3N'\n",
    );
    // Two pre-staged runs that went (a slot may be skipped under the overlap rule when
    // the machine is slow).
    let runs = wait_until("two succeeded runs", SALT_SLOTS, || {
        let ok: Vec<serde_json::Value> = d
            .runs("stamp")
            .into_iter()
            .filter(|r| r["state"] == "succeeded")
            .collect();
        (ok.len() >= 2).then_some(ok)
    });
    for run in &runs {
        let slot = chrono::DateTime::parse_from_rfc3339(run["slot"].as_str().expect("slot"))
            .expect("rfc3339")
            .timestamp_millis();
        let id = run["id"].as_u64().expect("id");
        for m in ["minion-01", "minion-02"] {
            let started: i64 = d.output(id, m).trim().parse().expect("ms timestamp");
            // Never before its slot; lateness is a benchmark figure, not asserted.
            assert!(
                started >= slot,
                "{m} started {} ms before its slot",
                slot - started
            );
        }
    }
    assert!(
        d.log_text().contains("pre-staging slot"),
        "{}",
        d.log_text()
    );
    // A staged run refused at its slot (global maintenance switched on while it waits)
    // records why, as every run that did not run does.
    let out = d.ctl(&["maintenance", "on"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("a slot refused for maintenance", SALT_SLOTS, || {
        d.runs("stamp").into_iter().find(|r| {
            is_final(r)
                && r["reason"]
                    .as_str()
                    .is_some_and(|why| why.contains("maintenance"))
        })
    });
    for r in d.runs("stamp").iter().filter(|r| is_final(r)) {
        if r["state"] != "succeeded" {
            assert!(
                r["reason"].is_string(),
                "a run ended without its reason: {r}"
            );
        }
    }
}

#[test]
fn wrapper_deploy_on_demand() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = root.join("master");
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&config_dir),
        10,
        "any:\n  schedule: '@yearly'\n  targets: minion-01\n  command: 'true'\n",
    );
    let out = d.ctl(&["wrapper", "deploy", "minion-0[12]"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("minion-01: ok") && text.contains("minion-02: ok"),
        "{text}"
    );
    assert!(!text.contains("minion-03"), "{text}");
    // The fleet state: both minions have this build, recorded by the deployment; a run
    // on minion-01 deploys nothing more, and its wrapper's hello says the same build.
    let status = d.ctl_json(&["wrapper", "status"]);
    let this = status["this_build"]
        .as_str()
        .expect("this build")
        .to_string();
    let expected = {
        use sha2::Digest;
        let wrapper = std::fs::read(WRAPPER).expect("read the wrapper");
        sha2::Sha256::digest(&wrapper)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(this, expected, "{status}");
    let minions: Vec<&str> = status["minions"]
        .as_array()
        .expect("minions")
        .iter()
        .filter(|m| m["current"] == true && m["sha256"] == this.as_str())
        .filter_map(|m| m["minion"].as_str())
        .collect();
    assert_eq!(minions, ["minion-01", "minion-02"], "{status}");
    let (run, code) = d.run_wait("any");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    assert!(
        !d.log_text().contains("fleet: deploying"),
        "a deployed minion was deployed again\n{}",
        d.log_text()
    );
    let out = d.ctl(&["wrapper", "status"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("(this build)") && table.contains("minion-01, minion-02"),
        "{table}"
    );
    // The fleet knew minion-01's wrapper: the launch was only published, no returns
    // awaited.
    let bridge_log =
        || std::fs::read_to_string(d.root.path().join("state/salt-bridge.log")).unwrap_or_default();
    assert!(
        bridge_log()
            .lines()
            .any(|l| l.contains("fun=cmd.run_all") && l.ends_with("returns=no")),
        "{}",
        bridge_log()
    );
    // The wrapper vanishes from the minion: that launch cannot see it, the pick-up
    // deadline does (the minion answers test.ping: 254), and the next run deploys again.
    let path = status["minions"][0]["path"]
        .as_str()
        .expect("path")
        .to_string();
    std::fs::remove_file(&path).expect("remove the deployed wrapper");
    let (run, code) = d.run_wait("any");
    assert_eq!(code, 1, "{run}");
    assert_eq!(target(&run, "minion-01")["exit_code"], 254, "{run}");
    assert_eq!(
        target(&run, "minion-01")["reason"],
        "wrapper_failed",
        "{run}"
    );
    assert!(
        d.log_text().contains("by the pick-up deadline; pinging"),
        "{}",
        d.log_text()
    );
    let (run, code) = d.run_wait("any");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    assert!(
        d.log_text().contains("fleet: deploying"),
        "{}",
        d.log_text()
    );
    assert!(std::path::Path::new(&path).exists(), "not deployed again");
}

#[test]
fn deploying_while_another_state_runs_on_the_minion_does_not_wait_for_it() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = root.join("master");
    // Another state run holds minion-02's state lock for half a minute, as a user's
    // highstate does: the deployment is an execution function and does not wait for it.
    let mut holder = std::process::Command::new(&bin)
        .args(["-c", path_str(&config_dir), "--out=json", "minion-02"])
        .args(["state.single", "cmd.run", "name=sleep 30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("salt state.single");
    wait_until("the holding state runs on minion-02", HANG, || {
        let out = std::process::Command::new(&bin)
            .args(["-c", path_str(&config_dir), "--out=json", "minion-02"])
            .args(["saltutil.is_running", "state.*"])
            .output()
            .expect("salt saltutil.is_running");
        String::from_utf8_lossy(&out.stdout)
            .contains("state.single")
            .then_some(())
    });
    // A fresh wrapper path: every run deploys to every minion, three at the same moment.
    let d = salt_daemon(
        &root,
        &bin,
        path_str(&config_dir),
        10,
        "first:\n  schedule: '@yearly'\n  targets: 'minion-0[123]'\n  command: 'true'\n\
         second:\n  schedule: '@yearly'\n  targets: 'minion-0[123]'\n  command: 'true'\n\
         third:\n  schedule: '@yearly'\n  targets: 'minion-0[123]'\n  command: 'true'\n",
    );
    let d = &d;
    let results: Vec<(serde_json::Value, i32)> = std::thread::scope(|s| {
        let runs: Vec<_> = ["first", "second", "third"]
            .into_iter()
            .map(|job| s.spawn(move || d.run_wait(job)))
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("run_wait"))
            .collect()
    });
    let holder_done = holder.try_wait().expect("try_wait");
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        holder_done.is_none(),
        "the runs waited for the other state run\n{}",
        d.log_text()
    );
    for (run, code) in &results {
        assert_eq!(*code, 0, "{run}\n{}", d.log_text());
        assert_eq!(
            machines(run),
            ["minion-01", "minion-02", "minion-03"],
            "{run}"
        );
    }
}
