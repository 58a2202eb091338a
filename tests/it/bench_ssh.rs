//! The ssh executor at 20 hosts: a benchmark, not a test (it prints figures and fails
//! only on a hang or a failed run).
//!
//! ```sh
//! cargo test --release --test it bench_ssh -- --ignored --nocapture
//! ```
//!
//! A real sshd serves `SSH_BENCH_HOSTS` loopback hosts (default 20) of this machine.
//! 1. One job on every host, a slot every `SSH_BENCH_EVERY` seconds (default 10, so each
//!    slot is pre-staged `PLUGIN_LEAD` ahead): slot → command running (p50/p99/max; the
//!    first slot after the start apart), and the CPU per target per firing of the daemon
//!    (by process), of the plugin with its ssh clients (reaped by `blocking`), and of
//!    sshd with its sessions; beside it, a bare `ssh HOST true` per host.
//!    The CPU is read over six periods in which nothing polls the daemon.
//! 2. `SSH_BENCH_JOBS` jobs (default 5) on the same hosts in the same second, every
//!    `SSH_BENCH_HERD_EVERY` seconds (default 30: each firing costs the testbed's sshd and
//!    ssh clients seconds of CPU): slot → command running over all of them, and any
//!    target that did not run.
//!
//! Every host is this machine: the sshd and ssh figures are the testbed's, not the
//! daemon's; the commands (`date`) and the wrappers run here too.

use std::time::{Duration, Instant};

use crate::bench_salt::{daemon_cpu, ms, percentile};
use crate::sshd::Sshd;
use crate::util::*;

/// CPU-seconds of a process itself and of its reaped children, apart.
fn cpu_split(pid: u32) -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0.0, 0.0);
    };
    let Some((_, after)) = stat.rsplit_once(')') else {
        return (0.0, 0.0);
    };
    let f: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
    (at(0) + at(1), at(2) + at(3))
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(sshd: &Sshd) -> String {
    format!(
        "saltpeter_config:\n  ping_timeout: 5\n  executors:\n    ssh:\n      config: {}\n",
        sshd.executor_config()
    )
}

fn jobs(names: &[String], hosts: &[String], every: u64) -> String {
    names
        .iter()
        .map(|name| {
            format!(
                "{name}:\n  schedule: '*/{every} * * * * *'\n  executor: ssh\n  \
                 targets: [{}]\n  target_type: list\n  overlap: allow\n  \
                 wrapper_path: {WRAPPER}\n  command: 'date +%s%3N'\n",
                hosts.join(", ")
            )
        })
        .collect()
}

/// Slot → command running (ms) of every target of `runs`, the first run apart.
fn lateness(d: &Daemon, runs: &[serde_json::Value]) -> (Vec<i64>, Vec<i64>) {
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (i, run) in runs.iter().enumerate() {
        let slot = ms(&run["slot"]).expect("slot");
        let id = run["id"].as_u64().expect("id");
        for t in run["targets"].as_array().expect("targets") {
            let m = t["machine"].as_str().expect("machine");
            if t["exit_code"] != 0 {
                eprintln!("run {id}: {m} ended {} ({})", t["exit_code"], t["reason"]);
                continue;
            }
            if let Ok(at) = d.output(id, m).trim().parse::<i64>() {
                if i == 0 { &mut first } else { &mut rest }.push(at - slot);
            }
        }
    }
    first.sort();
    rest.sort();
    (first, rest)
}

fn figures(v: &[i64]) -> String {
    format!(
        "p50 {} ms p99 {} ms max {} ms ({} samples)",
        percentile(v, 0.5),
        percentile(v, 0.99),
        v.last().copied().unwrap_or(0),
        v.len()
    )
}

/// Finished runs of `job`, oldest first, once there are `n`.
fn finished(d: &Daemon, job: &str, n: usize, wait: Duration) -> Vec<serde_json::Value> {
    wait_until(&format!("{n} finished runs of {job}"), wait, || {
        let mut done: Vec<serde_json::Value> = d.runs(job).into_iter().filter(is_final).collect();
        done.reverse();
        (done.len() >= n).then_some(done)
    })
}

/// CPU-seconds of a bare `ssh HOST true` to each host: the client's and sshd's.
fn bare_ssh(sshd: &Sshd) -> (f64, f64) {
    let sshd_pid = sshd.pid().expect("sshd runs");
    let before = cpu_split(sshd_pid);
    let mut client = 0.0;
    for host in sshd.hosts() {
        let (addr, port) = host.rsplit_once(':').expect("host:port");
        let child = std::process::Command::new("ssh")
            .args(["-o", "BatchMode=yes", "-p", port, "-i"])
            .arg(sshd.identity_file())
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                sshd.known_hosts_file().display()
            ))
            .args([addr, "true"])
            .spawn()
            .expect("ssh");
        let usage = wait_rusage(child);
        assert!(usage.0, "bare ssh to {host} failed");
        client += usage.1;
    }
    let after = cpu_split(sshd_pid);
    (client, (after.0 + after.1) - (before.0 + before.1))
}

/// Waits for `child`: whether it succeeded, and its CPU-seconds (this test's reaped
/// children's time before and after; the benchmark runs alone in its process).
fn wait_rusage(mut child: std::process::Child) -> (bool, f64) {
    use nix::sys::resource::{UsageWho, getrusage};
    let secs = || {
        getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
    };
    let before = secs();
    let ok = child.wait().is_ok_and(|s| s.success());
    (ok, secs() - before)
}

#[test]
#[ignore]
fn bench_ssh() {
    let Some(sshd) = Sshd::start_hosts(env_or("SSH_BENCH_HOSTS", 20) as usize) else {
        return;
    };
    let hosts = sshd.hosts();
    let n = hosts.len() as f64;
    let every = env_or("SSH_BENCH_EVERY", 10);
    let wait = Duration::from_secs(every * 12 + 120);
    let (client, server) = bare_ssh(&sshd);
    println!(
        "bare `ssh HOST true`: client {:.1} ms, sshd {:.1} ms CPU per connection",
        client * 1000.0 / n,
        server * 1000.0 / n
    );

    // 1. One job on every host.
    let started = Instant::now();
    let d = Daemon::start(&[
        ("01-ssh.yaml", &config(&sshd)),
        ("jobs.yaml", &jobs(&["stamp".into()], &hosts, every)),
    ]);
    finished(&d, "stamp", 1, wait);
    let first_run = started.elapsed();
    // CPU over six periods with nobody asking the daemon anything (polling it costs more
    // than what is measured): six firings.
    let firings = 6u32;
    let roles0 = daemon_cpu(&d);
    let blocking = d.pid_of("blocking");
    let sshd_pid = sshd.pid().expect("sshd runs");
    let (b0, s0) = (cpu_split(blocking), cpu_split(sshd_pid));
    std::thread::sleep(Duration::from_secs(every * u64::from(firings)));
    let (b1, s1) = (cpu_split(blocking), cpu_split(sshd_pid));
    let roles1 = daemon_cpu(&d);
    let firings = f64::from(firings);
    let per = |s: f64| s * 1000.0 / firings / n;
    let runs = finished(&d, "stamp", 7, wait);
    let (first, rest) = lateness(&d, &runs);
    println!(
        "{n} hosts, a slot every {every} s (daemon up {:.1} s before its first run): \
         slot -> running {} | first slot {}",
        first_run.as_secs_f64(),
        figures(&rest),
        figures(&first)
    );
    // blocking's children (the plugin, which reaps its ssh clients) are not the daemon's.
    let mut daemon_total = 0.0;
    let split: Vec<String> = roles1
        .iter()
        .filter(|(name, _)| !name.starts_with("child"))
        .map(|(name, end)| {
            let mut spent = end - roles0.get(name).copied().unwrap_or(0.0);
            if name == "blocking" {
                spent -= b1.1 - b0.1;
            }
            daemon_total += spent;
            format!("{name} {:.2}", per(spent))
        })
        .collect();
    println!(
        "  daemon CPU {:.2} ms per target per firing ({}); plugin + ssh clients {:.2} ms; \
         sshd {:.2} ms ({firings} firings)",
        per(daemon_total),
        split.join(", "),
        per(b1.1 - b0.1),
        per((s1.0 + s1.1) - (s0.0 + s0.1)),
    );
    let warnings = d
        .log_text()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    println!("  {warnings} WARN/ERROR log lines");
    drop(d);

    // 2. Several jobs on the same hosts in the same second.
    let names: Vec<String> = (0..env_or("SSH_BENCH_JOBS", 5))
        .map(|i| format!("herd{i}"))
        .collect();
    // Each firing costs the testbed about (ssh client + sshd) x jobs x hosts of CPU
    // (a second per 5 targets here): the period leaves it room.
    let herd_every = env_or("SSH_BENCH_HERD_EVERY", 30);
    let d = Daemon::start(&[
        ("01-ssh.yaml", &config(&sshd)),
        ("jobs.yaml", &jobs(&names, &hosts, herd_every)),
    ]);
    let mut all = (Vec::new(), Vec::new());
    for name in &names {
        let runs = finished(&d, name, 4, Duration::from_secs(herd_every * 6 + 120));
        let (first, rest) = lateness(&d, &runs[..4]);
        all.0.extend(first);
        all.1.extend(rest);
    }
    all.1.sort();
    println!(
        "{} jobs x {n} hosts in the same second, every {herd_every} s: slot -> running {}",
        names.len(),
        figures(&all.1)
    );
}
