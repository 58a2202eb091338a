//! The fault suite (issue 38's table), with real processes: a load of jobs whose commands
//! write a ledger outside the daemon, a fault (a role or the whole daemon stopped with
//! SIGSTOP, the state directory's disk full, PostgreSQL stopped or restarted, with one
//! and two servers), then the ledger compared with the records: no outcome lost or
//! wrong, no command killed, no slot run twice, nothing recorded that did not run, and
//! the schedule back to normal within 10 s of the fault's end, without a restart.
//!
//! The faults here last 10–20 s to keep the suite short; `SP_FAULT_FULL=1` gives them
//! the durations of the table:
//! `SP_FAULT_FULL=1 cargo nextest run --test it faults --no-capture` prints its lines.

mod cases;
mod pg;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

/// The load: `short` every second on two targets (exit: run id mod 3), `long` every 20 s
/// (15 s of sleep) on two, `talker` every 30 s (200 numbered lines over ~10 s) on one.
/// The targets' names end in a tag of the ledger's own, so the wrappers' overlap locks
/// (one per job and machine on this host) are not shared with another test's.
pub fn jobs(ledger: &Path) -> String {
    let l = ledger.display();
    let tag: String = ledger
        .parent()
        .and_then(|dir| dir.file_name())
        .map(|name| {
            name.to_string_lossy()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect()
        })
        .unwrap_or_default();
    let start = format!("echo \"S $SP_RUN $SP_MACHINE $(date +%s%3N)\" >> {l}");
    let end = |code: &str| format!("echo \"E $SP_RUN $SP_MACHINE {code}\" >> {l}");
    format!(
        "short:\n  schedule: '* * * * * *'\n  targets: [fs1-{tag}, fs2-{tag}]\n  \
         command: '{start}; e=$((SP_RUN % 3)); {}; exit $e'\n\
         long:\n  schedule: '*/20 * * * * *'\n  targets: [fl1-{tag}, fl2-{tag}]\n  \
         command: '{start}; sleep 15; {}'\n\
         talker:\n  schedule: '*/30 * * * * *'\n  targets: [ft1-{tag}]\n  \
         command: '{start}; for i in $(seq 1 200); do echo line-$i; sleep 0.05; done; {}'\n",
        end("$e"),
        end("0"),
        end("0"),
    )
}

pub const JOBS: [&str; 3] = ["short", "long", "talker"];

/// Seconds a fault lasts: `short` here, `full` (the issue's) with `SP_FAULT_FULL=1`.
pub fn lasting(short: u64, full: u64) -> Duration {
    let full_table = std::env::var("SP_FAULT_FULL").is_ok_and(|v| v == "1");
    Duration::from_secs(if full_table { full } else { short })
}

/// A ledger outside the daemon's directories (another disk than a state dir that fills).
pub struct Ledger {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Ledger {
    pub fn new() -> Ledger {
        let dir = tempfile::tempdir().expect("ledger dir");
        let path = dir.path().join("ledger");
        Ledger { _dir: dir, path }
    }
}

/// What the comparison found.
#[derive(Debug, Default)]
pub struct Tally {
    pub outcomes: usize,
    pub lost: Vec<String>,
    pub wrong: Vec<String>,
    pub killed: Vec<String>,
    pub twice: Vec<String>,
    pub invented: Vec<String>,
    pub stuck: Vec<String>,
    /// Targets whose wrapper could not start the command (`wrapper_failed`), with why.
    pub not_started: Vec<String>,
    /// Seconds from the fault's end to the first command started after it.
    pub back_within_s: Option<f64>,
    /// `short` slots from 10 s to 20 s after the fault's end that did not run.
    pub missed_after: Vec<String>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.wrong.is_empty()
            && self.killed.is_empty()
            && self.twice.is_empty()
            && self.invented.is_empty()
            && self.stuck.is_empty()
            && self.not_started.is_empty()
            && self.missed_after.is_empty()
            && self.back_within_s.is_some_and(|s| s <= 10.0)
    }

    /// One line for the table.
    pub fn summary(&self, fault: &str) -> String {
        format!(
            "FAULT {fault}: {} outcomes checked, {} lost, {} wrong, {} killed, {} run twice, \
             {} invented, {} stuck, {} not started, {} slots missed after +10 s, back within {}",
            self.outcomes,
            self.lost.len(),
            self.wrong.len(),
            self.killed.len(),
            self.twice.len(),
            self.invented.len(),
            self.stuck.len(),
            self.not_started.len(),
            self.missed_after.len(),
            self.back_within_s
                .map_or("never".to_string(), |s| format!("{s:.1} s"))
        )
    }
}

fn unix_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// When the fault ended, as the ledger's clock (unix ms).
pub struct FaultEnd(pub i64);

impl FaultEnd {
    pub fn now() -> FaultEnd {
        FaultEnd(unix_ms())
    }
}

/// Wait for 20 s of normal schedule after the fault, then for every run to settle, and
/// compare the ledger with the records of every server in `servers`.
pub fn check(servers: &[&Daemon], ledger: &Ledger, end: &FaultEnd) -> Tally {
    let settle_from = Instant::now();
    let quiet_until = Duration::from_secs(22);
    std::thread::sleep(quiet_until.saturating_sub(settle_from.elapsed()));
    let cut = unix_ms();
    let reader = servers[0];
    // Runs created before the cut, all final (a `long` run takes 15 s).
    let records = wait_until_settled(servers, cut);
    let text = std::fs::read_to_string(&ledger.path).unwrap_or_default();
    let mut tally = Tally::default();
    let mut started: HashMap<(u64, String), usize> = HashMap::new();
    let mut ended: HashMap<(u64, String), i64> = HashMap::new();
    let mut first_after: Option<i64> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(run), Some(machine)) = (f.get(1).and_then(|r| r.parse().ok()), f.get(2)) else {
            continue;
        };
        let key = (run, machine.to_string());
        match (f.first(), f.get(3).and_then(|v| v.parse::<i64>().ok())) {
            (Some(&"S"), Some(at)) => {
                *started.entry(key).or_default() += 1;
                if at >= end.0 {
                    first_after = Some(first_after.map_or(at, |f| f.min(at)));
                }
            }
            (Some(&"E"), Some(code)) => {
                ended.insert(key, code);
            }
            _ => {}
        }
    }
    tally.back_within_s = first_after.map(|at| (at - end.0) as f64 / 1000.0);
    let mut slots: HashSet<(String, i64)> = HashSet::new();
    let mut recorded: HashSet<(u64, String)> = HashSet::new();
    let mut short_ran: HashSet<i64> = HashSet::new();
    for run in &records {
        let id = run["id"].as_u64().unwrap_or(0);
        let job = run["job"].as_str().unwrap_or("").to_string();
        let state = run["state"].as_str().unwrap_or("");
        if let Some(slot) = run["slot"].as_i64().or_else(|| slot_ms(run))
            && state != "skipped"
            && !slots.insert((job.clone(), slot))
        {
            tally
                .twice
                .push(format!("{job} slot {slot} recorded twice (run {id})"));
        }
        for t in run["targets"].as_array().into_iter().flatten() {
            let machine = t["machine"].as_str().unwrap_or("").to_string();
            let key = (id, machine.clone());
            recorded.insert(key.clone());
            let what = format!("{job} run {id} on {machine}: {t}");
            let reason = t["reason"].as_str().unwrap_or("");
            match (started.get(&key), ended.get(&key)) {
                (Some(&n), _) if n > 1 => tally.twice.push(what.clone()),
                (Some(_), Some(&code)) => {
                    tally.outcomes += 1;
                    if t["exit_code"].as_i64() == Some(code) && reason == "exit" {
                        if job == "talker"
                            && let Err(got) = talked_in_full(servers, id, &machine)
                        {
                            tally
                                .wrong
                                .push(format!("{what}: output not the 200 lines: {got}"));
                        }
                    } else if matches!(reason, "lost" | "pickup_timeout" | "unreachable") {
                        tally.lost.push(format!("{what}: ran to exit {code}"));
                    } else {
                        tally.wrong.push(format!("{what}: ran to exit {code}"));
                    }
                }
                (Some(_), None) => tally.killed.push(format!("{what}: never reached its end")),
                (None, _) if reason == "exit" => tally.invented.push(what.clone()),
                (None, _) if reason == "wrapper_failed" => {
                    let out = reader.ctl(&["output", &id.to_string(), &machine]);
                    tally.not_started.push(format!(
                        "{what}: {}",
                        String::from_utf8_lossy(&out.stdout).trim()
                    ));
                }
                (None, _) => {}
            }
            if !matches!(
                t["state"].as_str(),
                Some("finished" | "canceled" | "skipped_maintenance" | "skipped")
            ) {
                tally.stuck.push(format!("{what}: not final"));
            }
        }
        if job == "short"
            && let Some(slot) = slot_ms(run)
            && run["targets"]
                .as_array()
                .is_some_and(|ts| ts.iter().all(|t| t["reason"] == "exit"))
        {
            short_ran.insert(slot / 1000);
        }
    }
    // Runs created after the cut are not in `records`: the ledger's lines of ids above
    // the last one read are theirs (ids grow with creation, on one database).
    let last_read = records
        .iter()
        .filter_map(|r| r["id"].as_u64())
        .max()
        .unwrap_or(0);
    for key in started.keys() {
        if key.0 <= last_read && !recorded.contains(key) {
            tally
                .lost
                .push(format!("run {} on {}: ran, no record", key.0, key.1));
        }
    }
    let from = end.0 / 1000 + 10;
    for second in from..from + 10 {
        if !short_ran.contains(&second) {
            tally
                .missed_after
                .push(format!("short slot at unix {second}"));
        }
    }
    tally
}

/// A run's slot as unix ms (runs print it as RFC 3339).
fn slot_ms(run: &Value) -> Option<i64> {
    let text = run["slot"].as_str()?;
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn created_before(run: &Value, cut: i64) -> bool {
    slot_ms(run).is_none_or(|slot| slot < cut)
}

/// Every run of the load created before `cut`, once all are final (or after 60 s, as
/// they are: what is not final then is counted as stuck).
fn wait_until_settled(servers: &[&Daemon], cut: i64) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let mut all: HashMap<u64, Value> = HashMap::new();
        for d in servers {
            for job in JOBS {
                let out = d.ctl(&["--json", "runs", job, "--limit", "5000"]);
                let Ok(Value::Array(runs)) = serde_json::from_slice::<Value>(&out.stdout) else {
                    continue;
                };
                for r in runs.into_iter().filter(|r| created_before(r, cut)) {
                    all.insert(r["id"].as_u64().unwrap_or(0), r);
                }
            }
        }
        let runs: Vec<Value> = all.into_values().collect();
        if (!runs.is_empty() && runs.iter().all(is_final)) || start.elapsed() > HANG {
            return runs;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether the talker's 200 lines are stored whole; if not, what each server read. A
/// server that cannot be reached is not asked (the old leader exits after a takeover: in
/// production systemd starts it again as a standby, here nobody does); every server that
/// answers must read the 200 lines, and at least one must answer.
fn talked_in_full(servers: &[&Daemon], run: u64, machine: &str) -> Result<(), String> {
    let want: String = (1..=200).map(|i| format!("line-{i}\n")).collect();
    let mut wrong = Vec::new();
    let mut answered = 0;
    for d in servers {
        let out = d.ctl(&["output", &run.to_string(), machine]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.contains("cannot reach the daemon") {
            continue;
        }
        answered += 1;
        let text = String::from_utf8_lossy(&out.stdout);
        if text != want {
            let lines: Vec<&str> = text.lines().collect();
            wrong.push(format!(
                "{} lines (first {:?}, last {:?}), stderr {:?}",
                lines.len(),
                lines.first(),
                lines.last(),
                stderr.trim()
            ));
        }
    }
    match (answered, wrong.is_empty()) {
        (0, _) => Err("no server answered".to_string()),
        (_, true) => Ok(()),
        (_, false) => Err(wrong.join("; ")),
    }
}

/// Assert the tally is clean; print it either way (the table's line).
pub fn assert_clean(fault: &str, tally: &Tally, servers: &[&Daemon]) {
    let line = tally.summary(fault);
    println!("{line}");
    if !tally.clean() {
        // The whole logs, kept past the test's temporary directories.
        let kept: Vec<String> = servers
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let to = std::env::temp_dir().join(format!(
                    "saltpeter-fault-{}-{i}.log",
                    fault.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
                ));
                let _ = std::fs::copy(&d.log, &to);
                to.display().to_string()
            })
            .collect();
        let logs: Vec<String> = servers.iter().map(|d| d.log_tail(80)).collect();
        panic!(
            "{line}\n{tally:#?}\nlogs kept in {}\n{}",
            kept.join(", "),
            logs.join("\n-----\n")
        );
    }
}

pub fn signal(pids: &[u32], sig: nix::sys::signal::Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), sig);
    }
}

/// Let the load run for a while before the fault (a `long` and a `talker` in flight).
pub fn warm_up(d: &Daemon) {
    wait_until("the load to run", HANG, || {
        let ran = d.runs("short").iter().filter(|r| is_final(r)).count();
        (ran >= 3).then_some(())
    });
    // The next `*/20` or `*/30` slot has begun: a long command runs through the fault.
    let now = chrono::Utc::now().timestamp() % 60;
    let to_next = (20 - now % 20) % 20 + 2;
    std::thread::sleep(Duration::from_secs(to_next as u64));
}
