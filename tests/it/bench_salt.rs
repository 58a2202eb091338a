//! The Salt launch path at 3, 10 and 30 real minions: a benchmark, not a test (it prints
//! figures and fails only on a hang).
//!
//! Needs a testbed with at least the largest size, started apart from the suite's:
//!
//! ```sh
//! SALT_PUBLISH_PORT=17505 SALT_RET_PORT=17506 scripts/salt-testbed up /tmp/sp-bench 30
//! SALTPETER_SALT_TESTBED=/tmp/sp-bench SALT_BIN=... \
//!   cargo test --release --test it bench_salt_fleet -- --ignored --nocapture
//! ```
//!
//! For each size N (`SALT_BENCH_SIZES`, default `3,10,30`), over the first N minions:
//! the bare `salt -L ... test.ping` time; a job firing every `SALT_BENCH_EVERY` seconds
//! (default 10), slot → command running on each minion (p50/p99/max; the first slot after
//! the start is reported apart when it was closer than its lead); the daemon's CPU-seconds
//! per firing (every daemon process, the salt bridge and reaped children such as salt
//! processes); a manual run, asked → command running on every minion; and a `sleep 1`
//! fan-out, asked → all results stored.

use std::time::{Duration, Instant};

use crate::util::*;

pub(crate) fn ms(v: &serde_json::Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

pub(crate) fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// CPU-seconds of a process, with its reaped children (utime, stime, cutime, cstime).
pub(crate) fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14 .. cstime 17 (1-based in proc(5)).
    let ticks: f64 = (11..15)
        .filter_map(|i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// CPU-seconds of the daemon's processes and their children (the salt bridge, salt
/// processes alive), by name.
pub(crate) fn daemon_cpu(d: &Daemon) -> std::collections::BTreeMap<String, f64> {
    let roles = d.processes();
    let role_pids: Vec<u32> = roles.iter().map(|(_, pid)| *pid).collect();
    let mut out: std::collections::BTreeMap<String, f64> = roles
        .iter()
        .map(|(role, pid)| (role.clone(), cpu_s(*pid)))
        .collect();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let parent = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
            });
        if parent.is_some_and(|p| role_pids.contains(&p)) && !role_pids.contains(&pid) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| format!("child {}", c.trim()))
                .unwrap_or_else(|_| "child".into());
            *out.entry(name).or_insert(0.0) += cpu_s(pid);
        }
    }
    out
}

fn daemon_cpu_s(d: &Daemon) -> f64 {
    daemon_cpu(d).values().sum()
}

fn bare_ping(bin: &str, master: &str, list: &str) -> Duration {
    let t = Instant::now();
    let out = std::process::Command::new(bin)
        .args([
            "-c",
            master,
            "--out=json",
            "--out-indent=-1",
            "-t",
            "30",
            "-L",
            list,
        ])
        .arg("test.ping")
        .output()
        .expect("salt");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed()
}

#[test]
#[ignore]
fn bench_salt_fleet() {
    let root = std::path::PathBuf::from(std::env::var("SALTPETER_SALT_TESTBED").expect("testbed"));
    let bin = std::env::var("SALT_BIN").expect("SALT_BIN");
    let all: Vec<String> = std::env::var("SALT_MINIONS")
        .expect("SALT_MINIONS")
        .split(',')
        .map(str::to_string)
        .collect();
    let sizes: Vec<usize> = std::env::var("SALT_BENCH_SIZES")
        .unwrap_or_else(|_| "3,10,30".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n <= all.len())
        .collect();
    // On one 2-core host every minion's job process competes for the same cores (a
    // 30-minion launch is ~15 CPU-s of minion-side Python): the period grows with N so
    // the lead (at most the period) can cover the launch, as separate machines would.
    let every_of = |n: usize| -> u64 {
        std::env::var("SALT_BENCH_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or((n as u64).clamp(10, 60))
    };
    let bridge = std::env::var("SALT_BENCH_BRIDGE").map_or(true, |v| v != "0");
    let master = root.join("master");
    println!("salt bridge: {bridge}");
    for n in sizes {
        let every = every_of(n);
        let list = all[..n].join(",");
        let ping = bare_ping(&bin, path_str(&master), &list);
        let wrapper_dir = root.join("var/bench-wrapper");
        let config = format!(
            "saltpeter_config:\n  executor: salt\n  salt_bin: {bin}\n  salt_config_dir: {}\n  \
             ping_timeout: 30\n  pickup_timeout: 60\n  salt_bridge: {bridge}\n  \
             default_wrapper_path: {}/saltpeter-wrapper\n",
            master.display(),
            wrapper_dir.display()
        );
        let targets = format!("[{}]", all[..n].join(", "));
        let jobs = format!(
            "stamp:\n  schedule: '*/{every} * * * * *'\n  targets: {targets}\n  target_type: list\n  \
             overlap: allow\n  command: 'date +%s%3N'\n\
             stamp_manual:\n  schedule: '@yearly'\n  targets: {targets}\n  target_type: list\n  \
             command: 'date +%s%3N'\n\
             nap:\n  schedule: '@yearly'\n  targets: {targets}\n  target_type: list\n  \
             command: 'sleep 1'\n"
        );
        let started = chrono::Utc::now().timestamp_millis();
        let d = Daemon::start(&[("02-salt.yaml", &config), ("jobs.yaml", &jobs)]);
        let wait = Duration::from_secs(every * 10 + 120);
        // The first finished run; CPU is counted from then on.
        wait_until("a first run", wait, || {
            (!d.runs("stamp")
                .into_iter()
                .filter(is_final)
                .collect::<Vec<_>>()
                .is_empty())
            .then_some(())
        });
        let split0 = daemon_cpu(&d);
        let cpu0 = daemon_cpu_s(&d);
        let runs0 = d.runs("stamp").into_iter().filter(is_final).count();
        let runs = wait_until("7 finished runs", wait, || {
            let mut done: Vec<serde_json::Value> =
                d.runs("stamp").into_iter().filter(is_final).collect();
            done.reverse();
            (done.len() >= 7).then_some(done)
        });
        let cpu1 = daemon_cpu_s(&d);
        let split1 = daemon_cpu(&d);
        let firings = runs.len() - runs0;
        let mut late = Vec::new();
        let mut first = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            let slot = ms(&run["slot"]).expect("slot");
            let id = run["id"].as_u64().expect("id");
            for t in run["targets"].as_array().expect("targets") {
                let m = t["machine"].as_str().expect("machine");
                if let Ok(at) = d.output(id, m).trim().parse::<i64>() {
                    if i == 0 {
                        first.push(at - slot);
                    } else {
                        late.push(at - slot);
                    }
                }
            }
        }
        late.sort();
        first.sort();
        let first_slot = ms(&runs[0]["slot"]).unwrap_or(0);
        // Manual: asked -> command running everywhere.
        let asked = chrono::Utc::now().timestamp_millis();
        let (run, _) = d.run_wait("stamp_manual");
        let id = run["id"].as_u64().expect("id");
        let manual = run["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter_map(|t| {
                d.output(id, t["machine"].as_str()?)
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
            .map(|at| at - asked)
            .max()
            .unwrap_or(-1);
        // Fan-out: asked -> every result stored (the run's end).
        let asked = chrono::Utc::now().timestamp_millis();
        let (nap, _) = d.run_wait("nap");
        let stored = ms(&nap["ended"]).map_or(-1, |end| end - asked);
        println!(
            "{n:>3} minions (a slot every {every} s): bare ping {:>5} ms | slot -> running p50 {:>4} ms p99 {:>4} ms max {:>4} ms \
             ({} samples) | first slot ({} ms after start) p50 {} max {} ms | CPU {:.3} s/firing \
             ({firings} firings) | manual run -> all running {manual} ms | sleep 1 fan-out -> \
             stored {stored} ms ({})",
            ping.as_millis(),
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(0),
            late.len(),
            first_slot - started,
            percentile(&first, 0.5),
            first.last().copied().unwrap_or(0),
            (cpu1 - cpu0) / firings.max(1) as f64,
            nap["state"],
        );
        let split: Vec<String> = split1
            .iter()
            .map(|(name, end)| {
                let per = (end - split0.get(name).copied().unwrap_or(0.0)) / firings.max(1) as f64;
                format!("{name} {per:.3}")
            })
            .collect();
        println!("      CPU-s per firing by process: {}", split.join(", "));
    }
}
