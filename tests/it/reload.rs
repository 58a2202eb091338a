//! Live configuration: files added, changed, broken and removed are picked up by the
//! daemon's own scan (no signal, no `saltpeterctl reload`), errors show in `status` with
//! `file:line`, and a removed job stops firing while its running run finishes.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

/// How long a change may take to show; the contract is 2 s, this only detects hangs.
const PICKUP: Duration = Duration::from_secs(10);

fn job_names(d: &Daemon) -> Vec<String> {
    d.ctl_json(&["jobs"])
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|j| j["name"].as_str().map(str::to_string))
        .collect()
}

fn job_info(d: &Daemon, name: &str) -> Option<Value> {
    d.ctl_json(&["jobs"])
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["name"] == name).cloned())
}

fn config_errors(d: &Daemon) -> Vec<String> {
    d.ctl_json(&["status"])["config_errors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect()
}

/// Wait for `f`, print how long it took.
fn picked_up<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    let v = wait_until(what, PICKUP, f);
    println!("{what}: picked up after {} ms", start.elapsed().as_millis());
    v
}

#[test]
fn added_changed_broken_and_removed_files_are_picked_up_without_a_signal() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "a.yaml",
            "alpha:\n  schedule: '@yearly'\n  targets: [a1]\n  command: 'echo alpha'\n",
        ),
    ]);
    assert_eq!(job_names(&d), ["alpha"]);

    // Added.
    d.write_config(
        "b.yaml",
        "beta:\n  schedule: '@yearly'\n  targets: [b1]\n  command: 'echo beta-1'\n",
    );
    picked_up("an added file", || {
        job_names(&d).contains(&"beta".to_string()).then_some(())
    });
    let (run, code) = d.run_wait("beta");
    assert_eq!(code, 0, "{run}");
    assert_eq!(d.output(run["id"].as_u64().expect("id"), "b1"), "beta-1\n");

    // Changed: new command and schedule. 12:30 every day is never @yearly's midnight of
    // 1 January, whatever today's date, so `next_run` must change.
    let yearly_next = job_info(&d, "beta").expect("beta")["next_run"].clone();
    d.write_config(
        "b.yaml",
        "beta:\n  schedule: '30 12 * * *'\n  targets: [b1]\n  command: 'echo beta-2'\n",
    );
    picked_up("a changed file", || {
        let info = job_info(&d, "beta")?;
        (info["next_run"] != yearly_next).then_some(())
    });
    let (run, _) = d.run_wait("beta");
    assert_eq!(d.output(run["id"].as_u64().expect("id"), "b1"), "beta-2\n");

    // Broken: the error shows with file:line, the last good version stays in effect.
    d.write_config(
        "b.yaml",
        "beta:\n  schedule: '30 12 * * *'\n  targets: [b1\n  command: 'echo beta-3'\n",
    );
    let b_path = d.config_dir().join("b.yaml");
    let errors = picked_up("a broken file", || {
        let errors = config_errors(&d);
        (!errors.is_empty()).then_some(errors)
    });
    let prefix = format!("{}:", b_path.display());
    let error = errors
        .iter()
        .find(|e| e.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no error for b.yaml in {errors:?}"));
    let line: usize = error[prefix.len()..]
        .split(':')
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no line number in {error}"));
    assert!((1..=4).contains(&line), "{error}");
    assert!(error.contains("previous version"), "{error}");
    let (run, code) = d.run_wait("beta");
    assert_eq!(code, 0);
    assert_eq!(
        d.output(run["id"].as_u64().expect("id"), "b1"),
        "beta-2\n",
        "the last good version runs"
    );
    // The plain `status` shows it too.
    let out = d.ctl(&["status"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&prefix));

    // A job name in two files: an error naming both, neither runs.
    d.write_config(
        "c.yaml",
        "alpha:\n  schedule: '@yearly'\n  targets: [c1]\n  command: 'echo other'\n",
    );
    picked_up("a duplicate job name", || {
        config_errors(&d)
            .iter()
            .any(|e| e.contains("a.yaml") && e.contains("c.yaml"))
            .then_some(())
    });
    let out = d.ctl(&["run", "alpha"]);
    assert_eq!(out.status.code(), Some(2), "a duplicated job does not run");
    std::fs::remove_file(d.config_dir().join("c.yaml")).expect("remove c.yaml");

    // Fixed: the error goes away.
    d.write_config(
        "b.yaml",
        "beta:\n  schedule: '30 12 * * *'\n  targets: [b1]\n  command: 'echo beta-4'\n",
    );
    picked_up("a fixed file", || {
        config_errors(&d).is_empty().then_some(())
    });
    let (run, _) = d.run_wait("beta");
    assert_eq!(d.output(run["id"].as_u64().expect("id"), "b1"), "beta-4\n");
    let (run, code) = d.run_wait("alpha");
    assert_eq!(
        (code, target(&run, "a1")["exit_code"].as_i64()),
        (0, Some(0))
    );

    // Removed.
    std::fs::remove_file(&b_path).expect("remove b.yaml");
    picked_up("a removed file", || {
        (!job_names(&d).contains(&"beta".to_string())).then_some(())
    });
    assert_eq!(job_names(&d), ["alpha"]);
    let log = d.log_text();
    assert!(!log.contains("SIGHUP"), "no signal was used");
    assert!(
        log.contains("configuration changed on disk"),
        "the scan found the changes"
    );
}

#[test]
fn a_removed_job_stops_firing_and_its_running_run_finishes() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "keep.yaml",
            "keeper:\n  schedule: '@yearly'\n  targets: [k]\n  command: 'true'\n",
        ),
        (
            "going.yaml",
            "going:\n  schedule: '*/2 * * * * *'\n  targets: [g1]\n  \
             command: 'sleep 3; echo finished'\n",
        ),
    ]);
    let running = wait_until("a run of going in flight", HANG, || {
        d.runs("going")
            .into_iter()
            .find(|r| target(r, "g1")["state"] == "running")
    });
    let id = running["id"].as_u64().expect("id");
    std::fs::remove_file(d.config_dir().join("going.yaml")).expect("remove going.yaml");
    picked_up("a removed job", || {
        (!job_names(&d).contains(&"going".to_string())).then_some(())
    });
    let gone_at = chrono::Utc::now();
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(d.output(id, "g1"), "finished\n");
    std::thread::sleep(Duration::from_secs(4));
    let later: Vec<Value> = d
        .runs("going")
        .into_iter()
        .filter(|r| {
            r["slot"]
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .is_some_and(|slot| slot > gone_at)
        })
        .collect();
    assert!(later.is_empty(), "a removed job fired again: {later:?}");
}

/// About 500 KB: a job whose `env` holds 10,000 variables under an anchor, and another
/// whose `env` merges them (`<<`) beside 10,000 of its own.
fn big_merge_file() -> String {
    let mut text = String::from(
        "big_a:\n  schedule: '@yearly'\n  targets: [b]\n  command: 'true'\n  env: &base\n",
    );
    for i in 0..10_000 {
        text.push_str(&format!("    INHERITED_{i:06}: value\n"));
    }
    text.push_str(
        "big_b:\n  schedule: '@yearly'\n  targets: [b]\n  command: 'true'\n  env:\n    <<: *base\n",
    );
    for i in 0..10_000 {
        text.push_str(&format!("    OWN_KEY_{i:06}: value\n"));
    }
    text
}

#[test]
fn a_large_merge_file_is_loaded_while_a_running_target_stays_alive() {
    // Heartbeat 1 s: a target is lost after 3 s without a frame, so a stall of main's loop
    // of a few seconds while the file is parsed would show as a lost target.
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "steady.yaml",
            "steady:\n  schedule: '@yearly'\n  targets: [s1]\n  command: 'sleep 8; echo finished'\n",
        ),
    ]);
    let id = d.run_now("steady");
    wait_until("steady running", HANG, || {
        d.runs("steady")
            .into_iter()
            .find(|r| r["id"].as_u64() == Some(id) && target(r, "s1")["state"] == "running")
    });
    let text = big_merge_file();
    assert!(text.len() > 400_000);
    d.write_config("big.yaml", &text);
    picked_up("a 500 KB file with a 10,000-key merge", || {
        job_names(&d).contains(&"big_b".to_string()).then_some(())
    });
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");
    let s1 = target(&run, "s1");
    assert!(s1["state"] == "finished" && s1["exit_code"] == 0, "{run}");
    assert_eq!(d.output(id, "s1"), "finished\n");
}

#[test]
fn a_changed_default_reaches_the_jobs_of_unchanged_files() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-zone.yaml", "saltpeter_config:\n  timezone: UTC\n"),
        (
            "a.yaml",
            "daily:\n  schedule: '0 0 3 * * *'\n  targets: [a1]\n  command: 'true'\n",
        ),
    ]);
    // The next run's time of day in UTC.
    let next = |d: &Daemon| {
        let info = job_info(d, "daily")?;
        let text = info["next_run"].as_str()?;
        let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
        Some(at.with_timezone(&chrono::Utc).format("%H:%M").to_string())
    };
    assert_eq!(next(&d).as_deref(), Some("03:00"));

    // Only the settings file changes; a.yaml is not touched, yet its job must follow.
    d.write_config(
        "02-zone.yaml",
        "saltpeter_config:\n  timezone: Asia/Kolkata\n",
    );
    let moved = picked_up("the new timezone in an unchanged file's job", || {
        next(&d).filter(|n| n != "03:00")
    });
    // 03:00 in Kolkata (UTC+5:30) is 21:30 UTC.
    assert_eq!(moved, "21:30");
    assert!(config_errors(&d).is_empty(), "{:?}", config_errors(&d));
}
