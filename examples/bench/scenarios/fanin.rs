//! Scenario 1, fan-in: N simulated wrappers (the load generator) connected and heartbeating
//! every 5 s; the hub's CPU and memory while they do, and the message latency.
//!
//! The daemon launches its targets for real; the launch command is a recorder script in
//! place of the wrapper (`loadgen::recorder_script`), so each simulated wrapper presents
//! the token the daemon itself handed out. Targets are launched 500 per run, one run after
//! another, so the blocking process never has thousands of launch children at once.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Env, Scenario, size, target_list};
use crate::BenchError;
use crate::harness::{Daemon, wait_until};
use crate::results::{Goal, ScenarioResult};
use crate::stats::{percentile, sorted};
use crate::{loadgen, procstat};

pub const SCENARIO: Scenario = Scenario {
    name: "fanin",
    title: "1. Fan-in: simulated wrappers heartbeating",
    about: "N simulated wrappers (a load generator speaking the wrapper protocol over real \
            WebSocket connections, with the launch tokens the daemon handed out) connected \
            and sending a heartbeat every 5 s, spread evenly. Measured over 30 s: the hub's \
            CPU and resident memory, main's and db's CPU, and the message latency (an \
            output frame from a simulated wrapper to its `ack`, i.e. committed in SQLite; \
            5 probes a second). Goal at 10,000: hub under 5 % of a core and 150 MB. \
            Size: `SP_BENCH_FANIN_N` (default 10,000).",
    sizes_side_by_side: false,
    table: None,
    run,
};

const PER_RUN: usize = 500;
const WINDOW: Duration = Duration::from_secs(30);

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let n = size("FANIN_N", 10_000).max(1);
    let runs = n.div_ceil(PER_RUN);
    let count = crate::results::number(n as f64);
    let mut result = env.result("fanin");
    result.sizes = format!("{count} simulated wrappers in {runs} runs of up to {PER_RUN} targets");
    let mut d = Daemon::prepare(&env.bins, &[])?;
    let record = d.dir().join("launched");
    let script = d.dir().join("record-launch");
    std::fs::write(&script, loadgen::recorder_script(&record)).map_err(BenchError::io("script"))?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .map_err(BenchError::io("script"))?;
    let mut jobs = String::from(
        "saltpeter_config:\n  heartbeat: 5\n  pickup_timeout: 1800\n  \
         max_connections_per_addr: 20000\n",
    );
    for r in 0..runs {
        let count = PER_RUN.min(n - r * PER_RUN);
        jobs.push_str(&format!(
            "fanin{r}:\n  schedule: '@yearly'\n  targets: {}\n  command: 'true'\n  \
             timeout: 0\n  wrapper_path: {}\n",
            target_list(&format!("f{r}x"), count),
            script.display()
        ));
    }
    d.write_config("10-fanin.yaml", &jobs)?;
    d.spawn()?;
    d.wait_ready()?;
    let launch_start = std::time::Instant::now();
    for r in 0..runs {
        d.run_now(&format!("fanin{r}"))?;
        let want = (r * PER_RUN + PER_RUN).min(n);
        wait_until("launches recorded", Duration::from_secs(300), || {
            let text = std::fs::read_to_string(&record).unwrap_or_default();
            (text.lines().count() >= want).then_some(())
        })?;
    }
    result.figure(
        "launch_secs",
        "all launches recorded (local executor, recorder script)",
        launch_start.elapsed().as_secs_f64(),
        "s",
        None,
    );
    let launches = loadgen::parse_launches(
        &std::fs::read_to_string(&record).map_err(BenchError::io("launch record"))?,
    )
    .map_err(BenchError::Setup)?;
    let addr = format!("127.0.0.1:{}", d.wrapper_port()?)
        .parse()
        .map_err(|e| BenchError::Setup(format!("wrapper address: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (stop2, progress2) = (Arc::clone(&stop), Arc::clone(&progress));
    let generator = std::thread::spawn(move || {
        loadgen::run(addr, launches, stop2, progress2, Duration::from_secs(1800))
    });
    let welcomed = wait_until(
        "simulated wrappers welcomed",
        Duration::from_secs(600),
        || {
            let w = progress.load(Ordering::Relaxed);
            (w >= n || generator.is_finished()).then_some(w)
        },
    );
    let hub = d.pid_of("hub")?;
    let main = d.pid_of("main")?;
    let db = d.pid_of("db")?;
    if welcomed.is_ok() {
        // Let the connection burst settle into the heartbeat rhythm.
        std::thread::sleep(Duration::from_secs(10));
        let before: Vec<u64> = [hub, main, db]
            .iter()
            .map(|p| procstat::cpu_ns(*p))
            .collect();
        let begin = std::time::Instant::now();
        std::thread::sleep(WINDOW);
        let secs = begin.elapsed().as_secs_f64();
        let share = |i: usize, pid: u32| {
            procstat::cpu_ns(pid).saturating_sub(before[i]) as f64 / 1e9 / secs * 100.0
        };
        let goal_cpu = (n >= 10_000).then_some(Goal::AtMost(5.0));
        let goal_rss = (n >= 10_000).then_some(Goal::AtMost(150.0));
        result.figure(
            "hub_cpu",
            &format!("hub CPU with {count} heartbeating"),
            share(0, hub),
            "% of a core",
            goal_cpu,
        );
        result.figure(
            "hub_rss",
            &format!("hub RSS with {count} connected"),
            procstat::rss_kib(hub) as f64 * 1024.0 / 1e6,
            "MB",
            goal_rss,
        );
        result.figure(
            "main_cpu",
            "main CPU meanwhile",
            share(1, main),
            "% of a core",
            None,
        );
        result.figure(
            "db_cpu",
            "db CPU meanwhile",
            share(2, db),
            "% of a core",
            None,
        );
        result.figure(
            "main_rss",
            &format!("main RSS with {count} targets in flight"),
            procstat::rss_kib(main) as f64 * 1024.0 / 1e6,
            "MB",
            None,
        );
    }
    stop.store(true, Ordering::Relaxed);
    let outcome = generator
        .join()
        .map_err(|_| BenchError::Setup("the load generator panicked".into()))?
        .map_err(BenchError::io("load generator"))?;
    welcomed?;
    result.figure(
        "connected",
        "simulated wrappers connected",
        outcome.connected as f64,
        "",
        None,
    );
    result.figure(
        "welcomed",
        "simulated wrappers welcomed",
        outcome.welcomed as f64,
        "",
        None,
    );
    result.figure(
        "connect_secs",
        "connecting and saying hello, all of them",
        outcome.connect_secs,
        "s",
        None,
    );
    let lat = sorted(outcome.latencies_ms.clone());
    if let (Some(p50), Some(p99)) = (percentile(&lat, 0.5), percentile(&lat, 0.99)) {
        result.figure(
            "latency_p50",
            "message latency (output → ack) p50",
            p50,
            "ms",
            None,
        );
        result.figure(
            "latency_p99",
            "message latency (output → ack) p99",
            p99,
            "ms",
            None,
        );
    }
    result.samples(
        "latency",
        "output frame → ack",
        "ms",
        outcome.latencies_ms.clone(),
    );
    result.note(format!(
        "{} heartbeats sent, {} rejected, {} connections failed, {} sessions ended with `done`.",
        outcome.heartbeats, outcome.rejected, outcome.failed, outcome.done
    ));
    super::process_figures(&mut result, &d.processes()?, "during fan-in");
    d.stop();
    Ok(result)
}
