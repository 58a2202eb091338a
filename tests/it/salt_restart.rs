//! A daemon stopped in the middle of a launch round of many jobs, on the real Salt testbed:
//! an ordered stop (SIGTERM) and a dead machine (SIGKILL of every process), each started
//! again on the same state. No wrapper may be left asleep with no link and no attempt,
//! and no target may be failed while its wrapper is connected.

use std::time::Duration;

use crate::ha::kill_9;
use crate::salt::{salt_daemon, testbed};

use crate::util::*;

const JOBS: usize = 8;
const SALT_HANG: Duration = Duration::from_secs(180);

/// `f` until it gives `Some`, or `None` after `deadline`.
fn wait_until_or<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `JOBS` jobs every 10 s on every minion of the testbed.
fn herd() -> String {
    (1..=JOBS)
        .map(|i| {
            format!(
                "herd{i:02}:\n  schedule: '*/10 * * * * *'\n  targets: 'minion-0*'\n  \
                 command: 'echo herd {i}'\n"
            )
        })
        .collect()
}

/// Wrapper processes started from `dir` (the test's own wrapper path), still alive.
fn wrappers_from(dir: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, r)| r.starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmd).contains(dir) {
            pids.push(pid);
        }
    }
    pids
}

/// The directory of the daemon's wrapper path (unique to the test).
fn wrapper_dir(d: &Daemon) -> String {
    let text = std::fs::read_to_string(d.config_dir().join("02-salt.yaml")).expect("config");
    let path = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("default_wrapper_path: "))
        .expect("default_wrapper_path");
    path.trim_end_matches("/saltpeter-wrapper").to_string()
}

/// Stop the daemon `how` right after a launch round went out, start it again, and check
/// the runs of that slot and the wrappers.
fn stop_mid_launch(how: &str) {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = root.join("master");
    // Every minion is targeted: no other test may stop one meanwhile, and the two herds
    // take turns (the minions share two cores).
    let _locks: Vec<_> = crate::salt::minion_names()
        .iter()
        .map(|m| crate::salt::lock_minion(&root, m))
        .collect();
    let mut d = salt_daemon(&root, &bin, path_str(&config_dir), 10, &herd());
    let dir = wrapper_dir(&d);
    // The wrapper port stays the same across the restart, as a real server's does: the
    // wrappers launched before it reconnect to the new daemon.
    let port = d.wrapper_port();
    d.write_config(
        "03-port.yaml",
        &format!("saltpeter_config:\n  machines_ws_port: {port}\n"),
    );
    // The first round after the start deploys; stop during a later one.
    wait_until("a first run succeeded", SALT_HANG, || {
        d.runs("herd01")
            .into_iter()
            .find(|r| r["state"] == "succeeded")
    });
    let rounds = d.log_text().matches("in one publish").count();
    wait_until("the next launch round", SALT_HANG, || {
        (d.log_text().matches("in one publish").count() > rounds).then_some(())
    });
    match how {
        "kill" => kill_9(&mut d),
        _ => {
            d.signal(nix::sys::signal::Signal::SIGTERM);
            assert!(d.wait_exit().success(), "{}", d.log_text());
        }
    }
    d.spawn();
    d.wait_ready();
    // Two more slots run on the same state; then everything is paused and settles.
    let before: usize = d.runs("herd01").len();
    wait_until("two more slots", SALT_HANG, || {
        (d.runs("herd01").iter().filter(|r| is_final(r)).count() >= before + 2).then_some(())
    });
    for i in 1..=JOBS {
        let out = d.ctl(&["pause", &format!("herd{i:02}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for i in 1..=JOBS {
        let job = format!("herd{i:02}");
        wait_until(&format!("{job} settled"), SALT_HANG, || {
            d.runs(&job).iter().all(is_final).then_some(())
        });
    }
    // Every wrapper is gone once nothing is left to run: none sleeps without a link.
    let left = wait_until_or(Duration::from_secs(60), || {
        wrappers_from(&dir).is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "wrappers still alive with nothing to run: {:?}\n{}",
        wrappers_from(&dir),
        d.log_text()
    );
    // No target of any run was failed while its wrapper was there: after an ordered stop
    // nothing fails at all; after a kill only a launch that never left may.
    let mut failed = Vec::new();
    for i in 1..=JOBS {
        for r in d.runs(&format!("herd{i:02}")) {
            for t in r["targets"].as_array().into_iter().flatten() {
                if matches!(t["exit_code"].as_i64(), Some(254 | 255)) {
                    failed.push(format!("run {} {}: {}", r["id"], t["machine"], t["reason"]));
                }
            }
        }
    }
    let skipped: Vec<String> = (1..=JOBS)
        .flat_map(|i| d.runs(&format!("herd{i:02}")))
        .filter(|r| {
            r["state"] == "skipped"
                && r["reason"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("launch"))
        })
        .map(|r| r.to_string())
        .collect();
    assert!(
        skipped.is_empty(),
        "slots skipped for launches: {skipped:?}\n{}",
        d.log_text()
    );
    let log = d.log_text();
    if how == "term" {
        assert!(failed.is_empty(), "false failures: {failed:?}\n{log}");
    } else {
        // A target failed after a kill must say its wrapper never called back: it was
        // never recorded as connected.
        for f in &failed {
            assert!(
                f.contains("wrapper_failed") || f.contains("unreachable"),
                "{f}"
            );
        }
        assert!(
            !log.contains("recorded 254 while"),
            "a connected wrapper's target was failed\n{log}"
        );
    }
}

#[test]
fn an_ordered_stop_in_the_middle_of_a_launch_round_loses_nothing() {
    stop_mid_launch("term");
}

#[test]
fn a_kill_9_in_the_middle_of_a_launch_round_leaves_no_orphan_wrapper() {
    stop_mid_launch("kill");
}
