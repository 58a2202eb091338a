//! A herd on the real testbed, as fleets run: several salt jobs firing in the same second
//! on the same minions, from a fleet that never had the wrapper, then an ordered restart
//! on the same state. What the fleet needs from it: no target ends 254 or 255 (every
//! testbed minion is alive, so those are the launch path's own failures), no slot is
//! skipped, and the wrapper is deployed at most once per minion, and not again after the
//! restart (counted in the master's job cache: publishes of `state.single` or
//! `file.manage_file` naming this test's wrapper path).
//!
//! It targets all the testbed's minions (`'*'`), so it holds minion-04's lock
//! (`salt::lock_minion`) meanwhile: the destructive tests do not stop it under the herd.
//! Its wrapper path is a directory of its own, so other tests' deployments do not count.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::salt::{lock_minion, testbed};
use crate::util::*;

const JOBS: usize = 6;
const PERIOD_MS: i64 = 10_000;
const FRESH_SLOTS: usize = 3;
const RESTART_SLOTS: usize = 2;
/// How long after its slot a run may take before it counts as hung (a deadline for the
/// test, not a timing goal: a herd this size ends within seconds).
const RUN_DEADLINE_MS: i64 = 40_000;
/// The functions that put the wrapper on a minion.
const DEPLOYING: [&str; 2] = ["state.single", "file.manage_file"];

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn ms_of(v: &Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// The first `n` slots of the herd's schedule after `after_ms`.
fn slots_after(after_ms: i64, n: usize) -> Vec<i64> {
    let first = after_ms - after_ms.rem_euclid(PERIOD_MS) + PERIOD_MS;
    (0..n as i64).map(|i| first + i * PERIOD_MS).collect()
}

fn job_names() -> Vec<String> {
    (0..JOBS).map(|i| format!("herd_{i}")).collect()
}

/// Every run of the daemon (all jobs), newest first.
fn all_runs(d: &Daemon) -> Vec<Value> {
    d.ctl_json(&["runs", "--limit", "5000"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn run_of<'a>(runs: &'a [Value], job: &str, slot: i64) -> Option<&'a Value> {
    runs.iter()
        .find(|r| r["job"] == job && ms_of(&r["slot"]) == Some(slot))
}

/// Wait until every job has a final run for each of `slots`, or the last one's deadline
/// has passed (what is missing then is reported by the checks, not here).
fn wait_slots(d: &Daemon, slots: &[i64]) {
    let last = *slots.last().expect("slots");
    loop {
        let runs = all_runs(d);
        let done = job_names().iter().all(|job| {
            slots
                .iter()
                .all(|s| run_of(&runs, job, *s).is_some_and(is_final))
        });
        if (done && now_ms() > last) || now_ms() > last + RUN_DEADLINE_MS {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Each job has a final run for each of `slots`.
fn missing_runs(runs: &[Value], phase: &str, slots: &[i64]) -> Vec<String> {
    let mut out = Vec::new();
    for job in job_names() {
        for slot in slots {
            match run_of(runs, &job, *slot) {
                None => out.push(format!("{phase}: {job} has no run for slot {slot}")),
                Some(r) if !is_final(r) => out.push(format!(
                    "{phase}: {job} slot {slot} not finished {} s after its slot: {r}",
                    RUN_DEADLINE_MS / 1000
                )),
                Some(_) => {}
            }
        }
    }
    out
}

/// Targets that ended 254 or 255, and runs skipped, except a slot missed during
/// `downtime` (no daemon ran then: not the herd's fault): per phase (told apart by the
/// slot: up to the stop, `fresh`), how many, with the first few.
fn failed_or_skipped(runs: &[Value], downtime: (i64, i64)) -> Vec<String> {
    let mut found: Vec<(&str, &str, String)> = Vec::new();
    for r in runs.iter().rev() {
        let slot = ms_of(&r["slot"]).unwrap_or_default();
        let phase = if slot <= downtime.0 {
            "fresh"
        } else {
            "restart"
        };
        if r["state"] == "skipped" && !(downtime.0 < slot && slot <= downtime.1) {
            found.push((
                phase,
                "runs skipped",
                format!("{} slot {slot}: {}", r["job"], r["reason"]),
            ));
        }
        for t in r["targets"].as_array().into_iter().flatten() {
            if let Some(code @ (254 | 255)) = t["exit_code"].as_i64() {
                found.push((
                    phase,
                    "targets ended 254 or 255",
                    format!(
                        "{} run {} slot {slot}: {} ended {code} ({})",
                        r["job"], r["id"], t["machine"], t["reason"]
                    ),
                ));
            }
        }
    }
    let mut out = Vec::new();
    for phase in ["fresh", "restart"] {
        for what in ["runs skipped", "targets ended 254 or 255"] {
            let all: Vec<&String> = found
                .iter()
                .filter(|(p, w, _)| *p == phase && *w == what)
                .map(|(_, _, e)| e)
                .collect();
            if let Some(first) = all.first() {
                let more = if all.len() > 1 {
                    format!(
                        ", then {}",
                        all[1..]
                            .iter()
                            .take(2)
                            .map(|e| e.as_str())
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                } else {
                    String::new()
                };
                out.push(format!(
                    "{phase}: {} {what}; first {first}{more}",
                    all.len()
                ));
            }
        }
    }
    out
}

/// A Salt glob (`*`, `?`, `[...]`) against a minion id.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_matches(&pattern[1..], name)
                || (!name.is_empty() && glob_matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_matches(&pattern[1..], &name[1..]),
        (Some(b'['), Some(c)) => match pattern.iter().position(|b| *b == b']') {
            Some(end) => {
                let class = &pattern[1..end];
                let hit = class
                    .windows(3)
                    .any(|w| w[1] == b'-' && w[0] <= *c && *c <= w[2])
                    || class.contains(c);
                hit && glob_matches(&pattern[end + 1..], &name[1..])
            }
            None => false,
        },
        (Some(p), Some(c)) => p == c && glob_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// The minions a published job was sent to, from its job cache entry: a list is taken as
/// given, a glob is matched against `minions`, any other target type counts for all of
/// them (an over-count can only make this test stricter).
fn published_to(job: &Value, minions: &[String]) -> Vec<String> {
    let target = &job["Target"];
    let named: Vec<String> = match target {
        Value::Array(items) => items
            .iter()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect(),
        Value::String(s) if job["Target-type"] == "list" => {
            s.split(',').map(|m| m.trim().to_string()).collect()
        }
        Value::String(s) if job["Target-type"] == "glob" => minions
            .iter()
            .filter(|m| glob_matches(s.as_bytes(), m.as_bytes()))
            .cloned()
            .collect(),
        _ => minions.to_vec(),
    };
    minions
        .iter()
        .filter(|m| named.contains(m))
        .cloned()
        .collect()
}

/// Unix ms of a Salt job id (`YYYYMMDDhhmmssffffff`, the master's local time).
fn jid_ms(jid: &str) -> Option<i64> {
    use chrono::TimeZone;
    let at = chrono::NaiveDateTime::parse_from_str(jid.get(..14)?, "%Y%m%d%H%M%S").ok()?;
    let micros: i64 = jid.get(14..20)?.parse().ok()?;
    let local = chrono::Local.from_local_datetime(&at).earliest()?;
    Some(local.timestamp_millis() + micros / 1000)
}

/// Deployment publishes naming `wrapper_path`, from the master's job cache: (jid time in
/// ms, minions it was sent to).
fn deployments(
    root: &Path,
    salt_bin: &str,
    wrapper_path: &str,
    minions: &[String],
) -> Vec<(i64, Vec<String>)> {
    let salt_run = Path::new(salt_bin).with_file_name("salt-run");
    let out = std::process::Command::new(&salt_run)
        .arg("-c")
        .arg(root.join("master"))
        .args(["jobs.list_jobs", "--out=json", "--out-indent=-1"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", salt_run.display()));
    assert!(
        out.status.success(),
        "salt-run jobs.list_jobs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "salt-run jobs.list_jobs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let mut found = Vec::new();
    for (jid, job) in jobs.as_object().into_iter().flatten() {
        let function = job["Function"].as_str().unwrap_or_default();
        if !DEPLOYING.contains(&function) || !job["Arguments"].to_string().contains(wrapper_path) {
            continue;
        }
        if let Some(at) = jid_ms(jid) {
            found.push((at, published_to(job, minions)));
        }
    }
    found
}

/// Ends the wrappers this test launched through Salt (a staged one outlives the daemon,
/// waiting for its slot) and removes their directory, however the test ends.
struct HerdWrappers(PathBuf);

impl Drop for HerdWrappers {
    fn drop(&mut self) {
        for pid in pids_with(path_str(&self.0)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_herd_of_jobs_deploys_once_per_minion_and_survives_a_restart() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let minions: Vec<String> = std::env::var("SALT_MINIONS")
        .expect("SALT_MINIONS from the testbed")
        .split(',')
        .map(str::to_string)
        .collect();
    let _minion_04 = lock_minion(&root, "minion-04");
    let wrappers = HerdWrappers(
        tempfile::Builder::new()
            .prefix("herd-wrapper-")
            .tempdir_in(root.join("var"))
            .expect("wrapper dir")
            .keep(),
    );
    // A fleet that never had the wrapper.
    let wrapper_path = wrappers.0.join("saltpeter-wrapper");
    let _ = std::fs::remove_file(&wrapper_path);
    let wrapper_path = path_str(&wrapper_path).to_string();
    // The wrapper port stays the same across the restart, as in production: the staged
    // wrappers reconnect to it.
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {bin}\n  salt_config_dir: {}\n  \
         machines_ws_port: {}\n  ping_timeout: 10\n  pickup_timeout: 20\n",
        root.join("master").display(),
        free_port()
    );
    let jobs: String = job_names()
        .iter()
        .map(|name| {
            format!(
                "{name}:\n  sec: '*/10'\n  min: '*'\n  hour: '*'\n  dom: '*'\n  mon: '*'\n  \
                 dow: '*'\n  targets: '*'\n  wrapper_path: {wrapper_path}\n  command: 'echo herd'\n"
            )
        })
        .collect();

    let started = now_ms();
    let mut d = Daemon::start(&[("02-salt.yaml", &config), ("jobs.yaml", &jobs)]);
    let fresh = slots_after(started, FRESH_SLOTS);
    wait_slots(&d, &fresh);
    // Stop between two slots, so that no slot passes while no daemon runs.
    let next = slots_after(now_ms(), 1)[0];
    if next - now_ms() < 4_000 {
        std::thread::sleep(Duration::from_millis((next - now_ms() + 500).max(0) as u64));
    }
    let stopped = now_ms();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d.wait_exit();
    assert!(status.success(), "ordered stop: {status}\n{}", d.log_text());
    d.spawn();
    d.wait_ready();
    let up = now_ms();
    let restart = slots_after(up, RESTART_SLOTS);
    wait_slots(&d, &restart);

    let runs = all_runs(&d);
    let mut problems = missing_runs(&runs, "fresh", &fresh);
    problems.extend(missing_runs(&runs, "restart", &restart));
    problems.extend(failed_or_skipped(&runs, (stopped, up)));
    let deployed = deployments(&root, &bin, &wrapper_path, &minions);
    for m in &minions {
        let count = |from: i64, to: i64| {
            deployed
                .iter()
                .filter(|(at, to_minions)| from <= *at && *at < to && to_minions.contains(m))
                .count()
        };
        let (before, after) = (count(started - 1_000, stopped), count(stopped, i64::MAX));
        if before > 1 {
            problems.push(format!(
                "fresh: the wrapper was deployed to {m} {before} times (at most once)"
            ));
        }
        if after > 0 {
            problems.push(format!(
                "restart: the wrapper was deployed to {m} {after} times after the restart (it was there)"
            ));
        }
    }
    let log = d.log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| (l.contains("WARN") || l.contains("ERROR")) && !l.contains("is also set"))
        .take(20)
        .collect();
    assert!(
        problems.is_empty(),
        "{JOBS} jobs every {} s on {}:\n{}\n\nthe daemon's first warnings:\n{}",
        PERIOD_MS / 1000,
        minions.join(","),
        problems.join("\n"),
        warnings.join("\n")
    );
}

#[test]
fn salt_globs_match_minion_ids() {
    let m = |p: &str, n: &str| glob_matches(p.as_bytes(), n.as_bytes());
    assert!(m("*", "minion-01"));
    assert!(m("minion-0[1-3]", "minion-02"));
    assert!(!m("minion-0[1-3]", "minion-04"));
    assert!(m("minion-?1", "minion-01"));
    assert!(!m("minion-01", "minion-010"));
}

#[test]
fn job_ids_are_the_masters_local_time() {
    use chrono::TimeZone;
    let at = chrono::Local
        .with_ymd_and_hms(2026, 11, 27, 14, 52, 12)
        .earliest()
        .expect("a local time");
    assert_eq!(
        jid_ms("20261127145212641501"),
        Some(at.timestamp_millis() + 641)
    );
    assert_eq!(jid_ms("2026"), None);
}
