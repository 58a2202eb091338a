//! Measurements, not tests: they print figures and fail only on a hang. Run with
//! `cargo test --release --test it bench -- --ignored --nocapture --test-threads 1`.

use std::time::{Duration, Instant};

use chrono::DateTime;

use crate::util::*;

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
fn bench_ready_time_and_idle_rss() {
    let mut times = Vec::new();
    for _ in 0..10 {
        let mut d = Daemon::prepare(&[]);
        d.spawn();
        times.push(d.wait_ready().as_secs_f64() * 1000.0);
        if times.len() == 10 {
            std::thread::sleep(Duration::from_secs(2));
            println!("idle RSS per process:");
            for (role, pid) in d.processes() {
                println!("  {role:<12} {:>6} KiB", rss_kib(pid).unwrap_or(0));
            }
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "start to READY=1 over 10 starts: min {:.1} ms, median {:.1} ms, max {:.1} ms",
        times[0], times[5], times[9]
    );
}

#[test]
#[ignore]
fn bench_dispatch_lateness() {
    // Five jobs firing every second: 100 firings in about 20 s.
    let mut jobs = String::new();
    for i in 0..5 {
        jobs.push_str(&format!(
            "tick{i}:\n  schedule: '* * * * * *'\n  targets: [lat{i}]\n  overlap: allow\n  command: 'true'\n"
        ));
    }
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    let mut dispatch = Vec::new();
    let mut command = Vec::new();
    for i in 0..5 {
        for run in d
            .wait_final_runs(&format!("tick{i}"), 21)
            .iter()
            .skip(1)
            .take(20)
        {
            let slot = ms(&run["slot"]).expect("slot");
            dispatch.push(ms(&run["started"]).expect("started") - slot);
            if let Some(t) = ms(&target(run, &format!("lat{i}"))["started"]) {
                command.push(t - slot);
            }
        }
    }
    dispatch.sort();
    command.sort();
    println!(
        "dispatch lateness over {} firings: p50 {} ms, p99 {} ms, max {} ms",
        dispatch.len(),
        percentile(&dispatch, 0.5),
        percentile(&dispatch, 0.99),
        dispatch.last().copied().unwrap_or(0)
    );
    println!(
        "command start after the slot over {} firings: p50 {} ms, p99 {} ms, max {} ms",
        command.len(),
        percentile(&command, 0.5),
        percentile(&command, 0.99),
        command.last().copied().unwrap_or(0)
    );
}

#[test]
#[ignore]
fn bench_wrapper_output_throughput_and_rss() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "flood:\n  schedule: '@yearly'\n  targets: [fl]\n  command: 'yes | head -c 200M'\n",
        ),
    ]);
    let id = d.run_now("flood");
    let mut max_rss = 0;
    let begin = Instant::now();
    let run = loop {
        for pid in wrapper_pids(id, "fl") {
            max_rss = max_rss.max(rss_kib(pid).unwrap_or(0));
        }
        let r = d.run_record(id);
        if is_final(&r) {
            break r;
        }
        assert!(begin.elapsed() < Duration::from_secs(600), "flood hung");
        std::thread::sleep(Duration::from_millis(100));
    };
    let t = target(&run, "fl");
    assert_eq!(t["exit_code"], 0, "{run}");
    let secs =
        (ms(&t["ended"]).expect("ended") - ms(&t["started"]).expect("started")) as f64 / 1000.0;
    let mb = 200.0 * 1024.0 * 1024.0 / 1e6;
    println!(
        "200 MiB of output through one wrapper in {secs:.2} s: {:.1} MB/s; wrapper RSS max {max_rss} KiB",
        mb / secs
    );
}
