//! Scenario 5, salt: from the slot to the command running on each of a real Salt
//! testbed's minions, and the CPU spent per firing (the daemon with the `salt` commands it
//! runs, and the master and minions). It measures what the daemon does, whatever its
//! launch path (pre-staging, one publish or one per minion).

use std::time::Duration;

use super::{Env, Scenario};
use crate::BenchError;
use crate::harness::{Daemon, is_final, ms, wait_until};
use crate::procstat;
use crate::results::ScenarioResult;
use crate::stats::{percentile, sorted};

pub const SCENARIO: Scenario = Scenario {
    name: "salt",
    title: "5. Salt: slot to command on real minions",
    about: "A job on `'*'` (or the first `SP_BENCH_MINIONS` minions as a list, when the \
            testbed has more for the original scenario) of a real Salt testbed \
            (`scripts/salt-testbed`, master and minions on this machine) firing every 15 s and printing the time its command \
            started; from the slot to that time on each minion, over 6 firings after the \
            first. CPU-seconds per firing: the daemon's processes with what they ran (the \
            salt bridge, or `salt` commands), and the master and minions. Minions: \
            `SP_BENCH_MINIONS` (3). The 3, 10 and 30-minion figures with the first slot, \
            a manual run against a bare ping and the `sleep 1` fan-out come from \
            `bench_salt_fleet` (tests/it/bench_salt.rs), which also splits the CPU by \
            process.",
    sizes_side_by_side: true,
    table: None,
    run,
};

fn var(name: &str) -> Result<String, BenchError> {
    std::env::var(name).map_err(|_| {
        BenchError::Setup(format!(
            "{name} is not set: run through scripts/bench, which starts a Salt testbed"
        ))
    })
}

/// CPU seconds of the processes whose command line mentions `needle`.
fn cpu_of(needle: &str) -> f64 {
    procstat::pids_with(needle)
        .into_iter()
        .map(procstat::cpu_with_children_secs)
        .sum()
}

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let bin = var("SALT_BIN")?;
    let master = var("SALT_CONFIG_DIR")?;
    let root = var("SALT_TESTBED_ROOT")?;
    let all = var("SALT_MINIONS")?;
    let all: Vec<&str> = all.split(',').filter(|m| !m.is_empty()).collect();
    // The testbed may have more minions (the original scenario's fan-out needs 10):
    // SP_BENCH_MINIONS of them, as a list, else all of them as '*'.
    let n = super::size("MINIONS", 3).clamp(1, all.len().max(1));
    let minions = all[..n.min(all.len())].join(",");
    let targets = if n >= all.len() {
        "'*'".to_string()
    } else {
        format!("'{minions}'\n  target_type: list")
    };
    let every = 15;
    let firings = 6;
    let mut result = env.result("salt");
    result.sizes = format!("{n} minions ({minions}), a firing every {every} s");
    let wrapper_dir = format!("{root}/var/bench-wrapper");
    let config = format!(
        "saltpeter_config:\n  executor: salt\n  salt_bin: {bin}\n  salt_config_dir: {master}\n  \
         ping_timeout: 30\n  default_wrapper_path: {wrapper_dir}/saltpeter-wrapper\n"
    );
    let jobs = format!(
        "stamp:\n  schedule: '*/{every} * * * * *'\n  targets: {targets}\n  overlap: allow\n  \
         command: 'date +%s%3N'\n"
    );
    let d = Daemon::start(
        &env.bins,
        &[("02-salt.yaml", &config), ("jobs.yaml", &jobs)],
    )?;
    let pids: Vec<u32> = d.processes()?.iter().map(|(_, p)| *p).collect();
    let daemon_cpu = || -> f64 {
        pids.iter()
            .map(|p| procstat::cpu_with_children_secs(*p))
            .sum()
    };
    // The first firing deploys the wrapper; count from the end of the first run.
    wait_until("the first run", Duration::from_secs(300), || {
        d.runs("stamp").ok()?.iter().any(is_final).then_some(())
    })?;
    let (d0, s0) = (daemon_cpu(), cpu_of(&root));
    let runs = wait_until(
        &format!("{} finished runs", firings + 1),
        Duration::from_secs(every * (firings as u64 + 2) + 240),
        || {
            let mut done: Vec<serde_json::Value> =
                d.runs("stamp").ok()?.into_iter().filter(is_final).collect();
            done.reverse();
            (done.len() > firings).then_some(done)
        },
    )?;
    let (d1, s1) = (daemon_cpu(), cpu_of(&root));
    let mut late = Vec::new();
    let mut failed = 0;
    for run in runs.iter().skip(1).take(firings) {
        let Some(slot) = ms(&run["slot"]) else {
            continue;
        };
        let Some(id) = run["id"].as_u64() else {
            continue;
        };
        for t in run["targets"].as_array().into_iter().flatten() {
            let Some(m) = t["machine"].as_str() else {
                continue;
            };
            let out = d.ctl(&["output", &id.to_string(), m])?;
            match String::from_utf8_lossy(&out.stdout).trim().parse::<i64>() {
                Ok(at) => late.push((at - slot) as f64),
                Err(_) => failed += 1,
            }
        }
    }
    let late = sorted(late);
    if let (Some(p50), Some(p99)) = (percentile(&late, 0.5), percentile(&late, 0.99)) {
        result.figure(
            &format!("slot_to_command_p50_{n}"),
            &format!("slot → command running on {n} minions, p50"),
            p50,
            "ms",
            None,
        );
        result.figure(
            &format!("slot_to_command_p99_{n}"),
            &format!("slot → command running on {n} minions, p99"),
            p99,
            "ms",
            None,
        );
    }
    result.samples(
        &format!("slot_to_command_{n}"),
        &format!("slot → command, {n} minions"),
        "ms",
        late,
    );
    let fired = firings as f64;
    result.figure(
        &format!("cpu_daemon_per_firing_{n}"),
        &format!("daemon + its salt commands, CPU per firing, {n} minions"),
        (d1 - d0) / fired,
        "CPU-s",
        None,
    );
    result.figure(
        &format!("cpu_salt_per_firing_{n}"),
        &format!("salt master + minions, CPU per firing, {n} minions"),
        (s1 - s0) / fired,
        "CPU-s",
        None,
    );
    if failed > 0 {
        result.note(format!(
            "{n} minions: {failed} targets printed no start time (failed or not run)."
        ));
    }
    Ok(result)
}
