//! Measurements at scale, not tests: 10,000 jobs in 100 files. They print figures and fail
//! only on a hang. Run with
//! `cargo test --release --test it bench_scale -- --ignored --nocapture --test-threads 1`.

use std::time::{Duration, Instant};

use chrono::DateTime;

use crate::scheduling::daemon_cpu_share;
use crate::util::*;

const FILES: usize = 100;
const PER_FILE: usize = 100;

/// A job that fires about once a year, at a time spread over the year.
fn rare_job(file: usize, i: usize) -> String {
    let n = file * PER_FILE + i;
    format!(
        "rare_{file}_{i}:\n  schedule: '{} {} {} {} {} *'\n  targets: [r{}]\n  command: 'true'\n",
        n % 60,
        (n / 60) % 60,
        (n / 3600) % 24,
        1 + n % 28,
        1 + (n / 28) % 12,
        n % 10
    )
}

/// 100 files of 100 jobs; the first `fast` jobs fire every second.
fn write_jobs(d: &Daemon, fast: usize) {
    for file in 0..FILES {
        let mut text = String::new();
        for i in 0..PER_FILE {
            let n = file * PER_FILE + i;
            if n < fast {
                text.push_str(&format!(
                    "tick{n}:\n  schedule: '* * * * * *'\n  overlap: allow\n  targets: [lat{n}]\n  \
                     command: 'true'\n"
                ));
            } else {
                text.push_str(&rare_job(file, i));
            }
        }
        d.write_config(&format!("jobs{file:03}.yaml"), &text);
    }
}

fn start_with_jobs(fast: usize) -> (Daemon, Duration) {
    let mut d = Daemon::prepare(&[("01-fast.yaml", FAST)]);
    write_jobs(&d, fast);
    d.spawn();
    let ready = d.wait_ready();
    (d, ready)
}

fn ms(v: &serde_json::Value) -> Option<i64> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
#[ignore]
fn bench_scale_lateness_with_10000_jobs() {
    let (d, ready) = start_with_jobs(10);
    println!("10,000 jobs: READY=1 after {} ms", ready.as_millis());
    let mut dispatch = Vec::new();
    let mut command = Vec::new();
    for n in 0..10 {
        for run in d
            .wait_final_runs(&format!("tick{n}"), 22)
            .iter()
            .skip(2)
            .take(20)
        {
            let slot = ms(&run["slot"]).expect("slot");
            dispatch.push(ms(&run["started"]).expect("started") - slot);
            if let Some(t) = ms(&target(run, &format!("lat{n}"))["started"]) {
                command.push(t - slot);
            }
        }
    }
    dispatch.sort();
    command.sort();
    println!(
        "10,000 jobs, 10 firing every second: run start after the slot over {} firings: \
         p50 {} ms, p99 {} ms, max {} ms",
        dispatch.len(),
        percentile(&dispatch, 0.5),
        percentile(&dispatch, 0.99),
        dispatch.last().copied().unwrap_or(0)
    );
    println!(
        "  command start after the slot over {} firings: p50 {} ms, p99 {} ms, max {} ms",
        command.len(),
        percentile(&command, 0.5),
        percentile(&command, 0.99),
        command.last().copied().unwrap_or(0)
    );
    let share = daemon_cpu_share(&d, Duration::from_secs(5));
    println!(
        "  daemon CPU while 10 jobs fire every second: {:.1} % of one core",
        share * 100.0
    );
}

#[test]
#[ignore]
fn bench_scale_idle_cpu_and_reload_with_10000_jobs() {
    let (d, ready) = start_with_jobs(0);
    println!(
        "10,000 jobs in 100 files: READY=1 after {} ms",
        ready.as_millis()
    );
    std::thread::sleep(Duration::from_secs(2));
    let share = daemon_cpu_share(&d, Duration::from_secs(5));
    println!(
        "idle daemon with 10,000 jobs: {:.2} % of one core over 5 s",
        share * 100.0
    );
    for (role, pid) in d.processes() {
        println!("  {role:<12} RSS {:>7} KiB", rss_kib(pid).unwrap_or(0));
    }

    let timed_reload = |what: &str| {
        let start = Instant::now();
        let out = d.ctl(&["reload"]);
        let took = start.elapsed();
        assert!(out.status.success());
        println!(
            "reload, {what}: {} ms ({})",
            took.as_millis(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    };
    timed_reload("nothing changed");
    // One file changed.
    let mut text = String::new();
    for i in 0..PER_FILE {
        text.push_str(&rare_job(50, i).replace("command: 'true'", "command: 'echo changed'"));
    }
    d.write_config("jobs050.yaml", &text);
    timed_reload("1 of 100 files changed");
    // Every file changed.
    for file in 0..FILES {
        let path = d.config_dir().join(format!("jobs{file:03}.yaml"));
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, format!("{text}\n")).expect("write");
    }
    timed_reload("all 100 files changed");

    // The same through the library: parse and validate, without the daemon's work.
    let dir = d.config_dir();
    let now = chrono::Utc::now();
    let start = Instant::now();
    let first = saltpeter::config::load_dir(&dir, None, now).expect("load");
    let cold = start.elapsed();
    let start = Instant::now();
    let again = saltpeter::config::load_dir(&dir, Some(&first), now).expect("load");
    let warm = start.elapsed();
    assert_eq!(again.jobs.len(), first.jobs.len());
    let start = Instant::now();
    for _ in 0..100 {
        let _ = again.changed_on_disk();
    }
    let scan = start.elapsed() / 100;
    println!(
        "load_dir of {} jobs: {} ms from scratch, {} ms with nothing changed; \
         the change scan takes {} µs",
        first.jobs.len(),
        cold.as_millis(),
        warm.as_millis(),
        scan.as_micros()
    );
}
