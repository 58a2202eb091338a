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

/// Salt dispatch: from the slot to the command running on each minion, with pre-staging,
/// and for a manual run; next to a bare `salt '*' test.ping`. Needs a testbed: set
/// SALTPETER_SALT_TESTBED, SALT_BIN and SALT_MINIONS as `scripts/salt-testbed up` prints.
#[test]
#[ignore]
fn bench_salt_dispatch() {
    let root = std::path::PathBuf::from(std::env::var("SALTPETER_SALT_TESTBED").expect("testbed"));
    let bin = std::env::var("SALT_BIN").expect("SALT_BIN");
    let minions = std::env::var("SALT_MINIONS").expect("SALT_MINIONS");
    let n = minions.split(',').count();
    let master = root.join("master");
    let ping = Instant::now();
    let out = std::process::Command::new(&bin)
        .args([
            "-c",
            path_str(&master),
            "--out=json",
            "--out-indent=-1",
            "-t",
            "30",
            "*",
            "test.ping",
        ])
        .output()
        .expect("salt");
    let ping_ms = ping.elapsed().as_millis();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrapper_dir = root.join("var/bench-wrapper");
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {bin}\n  salt_config_dir: {}\n  \
         ping_timeout: 30\n  default_wrapper_path: {}/saltpeter-wrapper\n",
        master.display(),
        wrapper_dir.display()
    );
    // The period leaves room for the launch lead to adapt (SALT_BENCH_EVERY seconds).
    let every: u32 = std::env::var("SALT_BENCH_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let jobs = format!(
        "stamp:\n  schedule: '*/{every} * * * * *'\n  targets: '*'\n  overlap: allow\n  command: 'date +%s%3N'\n"
    );
    let d = Daemon::start(&[("02-salt.yaml", &config), ("jobs.yaml", &jobs)]);
    let runs = wait_until(
        "5 finished runs",
        Duration::from_secs(u64::from(every) * 8 + 60),
        || {
            let mut done: Vec<serde_json::Value> =
                d.runs("stamp").into_iter().filter(is_final).collect();
            done.reverse();
            (done.len() >= 5).then_some(done)
        },
    );
    let mut late = Vec::new();
    for run in runs.iter().skip(1) {
        let slot = ms(&run["slot"]).expect("slot");
        let id = run["id"].as_u64().expect("id");
        for t in run["targets"].as_array().expect("targets") {
            let m = t["machine"].as_str().expect("machine");
            if let Ok(at) = d.output(id, m).trim().parse::<i64>() {
                late.push(at - slot);
            }
        }
    }
    late.sort();
    let asked = chrono::Utc::now().timestamp_millis();
    let (run, _) = d.run_wait("stamp");
    let id = run["id"].as_u64().expect("id");
    let mut manual: Vec<i64> = run["targets"]
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
        .collect();
    manual.sort();
    println!(
        "{n} minions: bare `salt '*' test.ping` {ping_ms} ms; pre-staged slot to command over {} starts: p50 {} ms, p99 {} ms, max {} ms; manual run request to command: p50 {} ms, max {} ms",
        late.len(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0),
        percentile(&manual, 0.5),
        manual.last().copied().unwrap_or(0)
    );
}

fn restart_after_kill_9(d: &mut Daemon) {
    let pids: Vec<u32> = d.processes().into_iter().map(|(_, p)| p).collect();
    for pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = d.wait_exit();
    for pid in pids {
        wait_until("process gone", HANG, || (!alive(pid)).then_some(()));
    }
    let out = d.cleanup();
    assert!(out.status.success());
    d.spawn();
    d.wait_ready();
}

/// Output bytes lost and duplicated over crash-restart cycles of a long-running job
/// (SALTPETER_BENCH_CYCLES, default 100).
#[test]
#[ignore]
fn bench_crash_restart_cycles() {
    let cycles: usize = std::env::var("SALTPETER_BENCH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let lines = 20_000;
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-port.yaml", &fixed_port_config()),
        (
            "jobs.yaml",
            &format!(
                "long:\n  schedule: '@yearly'\n  targets: [cycle1]\n  timeout: 0\n  \
                 command: 'i=1; while [ $i -le {lines} ]; do echo line-$i; i=$((i+1)); sleep 0.01; done'\n"
            ),
        ),
    ]);
    let id = d.run_now("long");
    let begin = Instant::now();
    for _ in 0..cycles {
        std::thread::sleep(Duration::from_millis(300));
        restart_after_kill_9(&mut d);
    }
    let crashes_took = begin.elapsed();
    let run = wait_until("the long run finished", Duration::from_secs(1800), || {
        let r = d.run_record(id);
        is_final(&r).then_some(r)
    });
    let out = d.output(id, "cycle1");
    let mut seen = std::collections::HashMap::new();
    for line in out.lines() {
        *seen.entry(line.to_string()).or_insert(0u32) += 1;
    }
    let lost = (1..=lines)
        .filter(|i| !seen.contains_key(&format!("line-{i}")))
        .count();
    let duplicated: u32 = seen.values().map(|n| n.saturating_sub(1)).sum();
    println!(
        "{cycles} kill -9 + restart cycles in {:.1} s during one run: {} lines lost, {} duplicated, exit {} ({})",
        crashes_took.as_secs_f64(),
        lost,
        duplicated,
        target(&run, "cycle1")["exit_code"],
        target(&run, "cycle1")["reason"]
    );
}

/// Start-up and recovery time with 1,000 runs in history.
#[test]
#[ignore]
fn bench_recovery_with_history() {
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "quick:\n  schedule: '@yearly'\n  targets: [hist1]\n  overlap: allow\n  command: 'echo x'\n",
        ),
    ]);
    for _ in 0..1000 {
        d.run_now("quick");
    }
    d.wait_final_runs("quick", 1000);
    let start = Instant::now();
    restart_after_kill_9(&mut d);
    let ready = start.elapsed();
    let _ = d.ctl_json(&["jobs"]);
    let answering = start.elapsed();
    println!(
        "1000 runs in history: kill -9 to READY=1 {} ms, to answering `jobs` {} ms",
        ready.as_millis(),
        answering.as_millis()
    );
}
