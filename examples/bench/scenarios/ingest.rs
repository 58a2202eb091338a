//! Scenario 2, ingest: one job's output to storage through a real wrapper (wrapper → hub →
//! main → db → SQLite), and 100 wrappers streaming at once. Beside the throughput, the CPU
//! each process spent per 100 MB says where the time goes.

use std::time::{Duration, Instant};

use super::{Env, Scenario, size, target_list};
use crate::BenchError;
use crate::harness::{Daemon, ms};
use crate::procstat;
use crate::results::{Goal, ScenarioResult};

pub const SCENARIO: Scenario = Scenario {
    name: "ingest",
    title: "2. Ingest: output to storage",
    about: "`yes | head -c 200M` as one job on one local target, timed from the target's \
            start to its end as stored (every byte through wrapper → hub → main → db; db \
            keeps a head and a tail, all of it is committed in order). Then one job over \
            100 local targets each writing 4 MiB at once, aggregate from the first start to \
            the last end. Goals: ≥ 100 MB/s for one job, ≥ 150 MB/s aggregate. Sizes: \
            `SP_BENCH_INGEST_MIB` (200), `SP_BENCH_INGEST_WRAPPERS` (100).",
    sizes_side_by_side: false,
    table: None,
    run,
};

/// The wrapper of `run` on `machine`, found by its environment.
fn wrapper_pid(run: u64, machine: &str) -> Option<u32> {
    procstat::pids_with("saltpeter-wrapper")
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let env = String::from_utf8_lossy(&env);
                env.split('\0').any(|v| v == format!("SP_RUN={run}"))
                    && env
                        .split('\0')
                        .any(|v| v == format!("SP_MACHINE={machine}"))
            })
        })
}

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let mib = size("INGEST_MIB", 200);
    let wrappers = size("INGEST_WRAPPERS", 100).max(1);
    let each_mib = 4;
    let mut result = env.result("ingest");
    result.sizes = format!("{mib} MiB through one wrapper; {wrappers} wrappers × {each_mib} MiB");
    let jobs = format!(
        "saltpeter_config:\n  pickup_timeout: 300\n\
         flood:\n  schedule: '@yearly'\n  targets: [fl]\n  timeout: 0\n  \
         command: 'yes | head -c {mib}M'\n\
         many:\n  schedule: '@yearly'\n  targets: {}\n  timeout: 0\n  \
         command: 'yes | head -c {each_mib}M'\n",
        target_list("st", wrappers)
    );
    let d = Daemon::start(&env.bins, &[("10-ingest.yaml", &jobs)])?;
    let roles = d.processes()?;
    let pid = |name: &str| {
        roles
            .iter()
            .find(|(r, _)| r == name)
            .map(|(_, p)| *p)
            .unwrap_or(0)
    };
    let cpu_before: Vec<(String, u64)> = ["hub", "main", "db"]
        .iter()
        .map(|r| (r.to_string(), procstat::cpu_ns(pid(r))))
        .collect();
    let id = d.run_now("flood")?;
    let (mut wrapper_cpu, mut wrapper_peak) = (0u64, 0u64);
    let begin = Instant::now();
    let record = loop {
        if let Some(w) = wrapper_pid(id, "fl") {
            wrapper_cpu = wrapper_cpu.max(procstat::cpu_ns(w));
            wrapper_peak = wrapper_peak.max(procstat::peak_rss_kib(w));
        }
        let r = d.run_record(id)?;
        if crate::harness::is_final(&r) {
            break r;
        }
        if begin.elapsed() > Duration::from_secs(900) {
            return Err(BenchError::Timeout("the 200 MiB flood".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let target = record["targets"]
        .as_array()
        .and_then(|t| t.first())
        .cloned()
        .unwrap_or_default();
    let secs = match (ms(&target["started"]), ms(&target["ended"])) {
        (Some(a), Some(b)) => (b - a) as f64 / 1000.0,
        _ => {
            return Err(BenchError::Daemon(format!(
                "flood run has no times: {record}"
            )));
        }
    };
    let bytes = mib as f64 * 1024.0 * 1024.0;
    result.figure(
        "one_job_mbps",
        &format!("one job, {mib} MiB to storage"),
        bytes / 1e6 / secs,
        "MB/s",
        Some(Goal::AtLeast(100.0)),
    );
    if target["exit_code"] != 0 {
        result.note(format!(
            "the flood target ended with {}",
            target["exit_code"]
        ));
    }
    let per_100mb = |ns: u64| ns as f64 / 1e9 / (bytes / 1e8);
    result.figure(
        "cpu_wrapper",
        "wrapper CPU per 100 MB (sampled every 50 ms)",
        per_100mb(wrapper_cpu),
        "s",
        None,
    );
    for (role, before) in &cpu_before {
        let used = procstat::cpu_ns(pid(role)).saturating_sub(*before);
        result.figure(
            &format!("cpu_{role}"),
            &format!("{role} CPU per 100 MB"),
            per_100mb(used),
            "s",
            None,
        );
    }
    result.figure(
        "wrapper_peak_rss",
        "wrapper peak RSS during the flood",
        wrapper_peak as f64 / 1024.0,
        "MiB",
        None,
    );

    let id = d.run_now("many")?;
    let record = d.wait_run_final(id, Duration::from_secs(900))?;
    let targets = record["targets"].as_array().cloned().unwrap_or_default();
    let first = targets.iter().filter_map(|t| ms(&t["started"])).min();
    let last = targets.iter().filter_map(|t| ms(&t["ended"])).max();
    let ok = targets.iter().filter(|t| t["exit_code"] == 0).count();
    if let (Some(a), Some(b)) = (first, last) {
        let total = (wrappers * each_mib) as f64 * 1024.0 * 1024.0;
        result.figure(
            "aggregate_mbps",
            &format!("{wrappers} wrappers at once, aggregate"),
            total / 1e6 / ((b - a) as f64 / 1000.0),
            "MB/s",
            Some(Goal::AtLeast(150.0)),
        );
    }
    result.note(format!("{ok} of {wrappers} streaming targets exited 0."));
    super::process_figures(&mut result, &roles, "during ingest");
    Ok(result)
}
