//! Scenario 3, fan-out: one job over many local targets running `true`, from the slot to
//! the last target's result stored.

use std::time::Duration;

use super::{Env, Scenario, size, target_list};
use crate::BenchError;
use crate::harness::{Daemon, ms};
use crate::results::{Goal, ScenarioResult};
use crate::stats::{percentile, sorted};

pub const SCENARIO: Scenario = Scenario {
    name: "fanout",
    title: "3. Fan-out: one job over 1,000 local targets",
    about: "One job over 1,000 local targets running `true`, started with `saltpeterctl \
            run` (a manual run: its slot is the run's start): from there to the last \
            target's result stored, with 1,000 real \
            wrappers launched, connected, run and reported. Goal ≤ 3 s. Size: \
            `SP_BENCH_FANOUT_TARGETS` (1,000).",
    sizes_side_by_side: false,
    table: None,
    run,
};

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let n = size("FANOUT_TARGETS", 1000).max(1);
    let mut result = env.result("fanout");
    let count = crate::results::number(n as f64);
    result.sizes = format!("{count} local targets");
    let jobs = format!(
        "saltpeter_config:\n  pickup_timeout: 300\n\
         wide:\n  schedule: '@yearly'\n  targets: {}\n  command: 'true'\n",
        target_list("w", n)
    );
    let d = Daemon::start(&env.bins, &[("10-fanout.yaml", &jobs)])?;
    let id = d.run_now("wide")?;
    let record = d.wait_run_final(id, Duration::from_secs(600))?;
    // A manual run has no slot: it counts from the run's start (the request).
    let slot = ms(&record["slot"])
        .or_else(|| ms(&record["started"]))
        .ok_or_else(|| BenchError::Daemon(format!("run {id} has neither a slot nor a start")))?;
    let targets = record["targets"].as_array().cloned().unwrap_or_default();
    let ended: Vec<i64> = targets.iter().filter_map(|t| ms(&t["ended"])).collect();
    let started = sorted(
        targets
            .iter()
            .filter_map(|t| ms(&t["started"]))
            .map(|t| (t - slot) as f64)
            .collect(),
    );
    let ok = targets.iter().filter(|t| t["exit_code"] == 0).count();
    if let Some(last) = ended.iter().max() {
        result.figure(
            "slot_to_last_result",
            &format!("slot → last of {count} results stored"),
            (last - slot) as f64 / 1000.0,
            "s",
            Some(Goal::AtMost(3.0)),
        );
    }
    if let (Some(p50), Some(max)) = (percentile(&started, 0.5), started.last()) {
        result.figure("start_p50", "slot → command started, p50", p50, "ms", None);
        result.figure(
            "start_max",
            "slot → command started, last",
            *max,
            "ms",
            None,
        );
    }
    result.samples("start", "slot → command started", "ms", started);
    result.note(format!(
        "{ok} of {n} targets exited 0; run state {}.",
        record["state"]
    ));
    super::process_figures(&mut result, &d.processes()?, "during fan-out");
    Ok(result)
}
