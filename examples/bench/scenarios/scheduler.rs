//! Scenario 4, scheduler: 10,000 jobs; dispatch lateness while ten of them fire every
//! second; idle CPU; main's memory with 10,000 distinct schedules.

use std::time::Duration;

use super::{Env, Scenario, size};
use crate::BenchError;
use crate::harness::{Daemon, is_final, ms, wait_until};
use crate::procstat;
use crate::results::{Goal, ScenarioResult};
use crate::stats::{percentile, sorted};

pub const SCENARIO: Scenario = Scenario {
    name: "scheduler",
    title: "4. Scheduler: 10,000 jobs",
    about: "10,000 jobs in 100 files, each with its own schedule (a different second, \
            minute, hour, day and month: 10,000 distinct schedules). First idle: CPU of all \
            five processes over 30 s (goal ≤ 0.1 % of a core) and main's resident memory \
            (goal ≤ 30 MB). Then ten of the jobs are changed to fire every second: dispatch \
            lateness (slot → run record) and command lateness (slot → command started) over \
            20 firings each. Size: `SP_BENCH_JOBS` (10,000).",
    sizes_side_by_side: false,
    table: None,
    run,
};

const PER_FILE: usize = 100;
const FAST: usize = 10;

/// A job that fires about once a year, on a schedule no other job has.
fn rare_job(n: usize) -> String {
    format!(
        "rare_{n}:\n  schedule: '{} {} {} {} {} *'\n  targets: [r{}]\n  command: 'true'\n",
        n % 60,
        (n / 60) % 60,
        (n / 3600) % 24,
        1 + n % 28,
        1 + (n / 28) % 12,
        n % 10
    )
}

fn fast_job(n: usize) -> String {
    format!(
        "tick{n}:\n  schedule: '* * * * * *'\n  overlap: allow\n  targets: [lat{n}]\n  \
         command: 'true'\n"
    )
}

fn file_text(file: usize, jobs: usize, fast: usize) -> String {
    let mut text = String::new();
    for i in 0..PER_FILE {
        let n = file * PER_FILE + i;
        if n >= jobs {
            break;
        }
        text.push_str(&if n < fast { fast_job(n) } else { rare_job(n) });
    }
    text
}

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let jobs = size("JOBS", 10_000).max(FAST);
    let files = jobs.div_ceil(PER_FILE);
    let count = crate::results::number(jobs as f64);
    let mut result = env.result("scheduler");
    result.sizes = format!("{count} jobs in {files} files");
    let mut d = Daemon::prepare(
        &env.bins,
        &[("01-fast.yaml", "saltpeter_config:\n  heartbeat: 1\n")],
    )?;
    for f in 0..files {
        d.write_config(&format!("jobs{f:03}.yaml"), &file_text(f, jobs, 0))?;
    }
    d.spawn()?;
    let ready = d.wait_ready()?;
    result.figure(
        "ready",
        &format!("start → READY=1 with {count} jobs"),
        ready.as_secs_f64() * 1000.0,
        "ms",
        None,
    );
    let processes = d.processes()?;
    let pids: Vec<u32> = processes.iter().map(|(_, p)| *p).collect();
    std::thread::sleep(Duration::from_secs(3));
    let before: Vec<u64> = pids.iter().map(|p| procstat::cpu_ns(*p)).collect();
    let begin = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(30));
    let secs = begin.elapsed().as_secs_f64();
    let used: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(p, b)| procstat::cpu_ns(*p).saturating_sub(*b) as f64 / 1e9 / secs * 100.0)
        .collect();
    result.figure(
        "idle_cpu",
        &format!("idle CPU, all processes, {count} jobs"),
        used.iter().sum(),
        "% of a core",
        Some(Goal::AtMost(0.1)),
    );
    for ((role, _), share) in processes.iter().zip(&used) {
        result.figure(
            &format!("idle_cpu_{role}"),
            &format!("idle CPU, {role}"),
            *share,
            "% of a core",
            None,
        );
    }
    let main = d.pid_of("main")?;
    result.figure(
        "main_rss",
        &format!("main RSS with {count} distinct schedules"),
        procstat::rss_kib(main) as f64 * 1024.0 / 1e6,
        "MB",
        Some(Goal::AtMost(30.0)),
    );

    // Ten jobs fire every second from now on (a reload of the first file).
    d.write_config("jobs000.yaml", &file_text(0, jobs, FAST))?;
    let mut dispatch = Vec::new();
    let mut command = Vec::new();
    for n in 0..FAST {
        let name = format!("tick{n}");
        let runs = wait_until(
            &format!("22 runs of {name}"),
            Duration::from_secs(180),
            || {
                let mut done: Vec<serde_json::Value> =
                    d.runs(&name).ok()?.into_iter().filter(is_final).collect();
                done.reverse();
                (done.len() >= 22).then_some(done)
            },
        )?;
        for run in runs.iter().skip(2).take(20) {
            let Some(slot) = ms(&run["slot"]) else {
                continue;
            };
            if let Some(s) = ms(&run["started"]) {
                dispatch.push((s - slot) as f64);
            }
            let started = run["targets"]
                .as_array()
                .and_then(|t| t.first())
                .and_then(|t| ms(&t["started"]));
            if let Some(t) = started {
                command.push((t - slot) as f64);
            }
        }
    }
    let dispatch = sorted(dispatch);
    let command = sorted(command);
    for (key, what, v) in [
        ("dispatch", "slot → run started", &dispatch),
        ("command", "slot → command running", &command),
    ] {
        if let (Some(p50), Some(p99)) = (percentile(v, 0.5), percentile(v, 0.99)) {
            result.figure(
                &format!("{key}_p50"),
                &format!("{what}, p50"),
                p50,
                "ms",
                None,
            );
            result.figure(
                &format!("{key}_p99"),
                &format!("{what}, p99"),
                p99,
                "ms",
                None,
            );
        }
    }
    result.samples("dispatch", "slot → run started", "ms", dispatch);
    result.samples("command", "slot → command running", "ms", command);
    super::process_figures(&mut result, &processes, "with 10 jobs firing every second");
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rare_schedules_are_all_distinct() {
        let schedules: std::collections::HashSet<String> = (0..10_000)
            .map(|n| rare_job(n).lines().nth(1).unwrap_or_default().to_string())
            .collect();
        assert_eq!(schedules.len(), 10_000);
    }

    #[test]
    fn the_first_file_holds_the_fast_jobs() {
        let text = file_text(0, 10_000, 10);
        assert_eq!(text.matches("'* * * * * *'").count(), 10);
        assert_eq!(text.matches("rare_").count(), 90);
        assert_eq!(file_text(1, 150, 10).matches("rare_").count(), 50);
    }
}
