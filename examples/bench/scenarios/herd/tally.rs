//! What one phase of a herd came to: from the runs of its slots (as `saltpeterctl runs
//! --json` shows them), the master's publishes while the daemon ran and the CPU used, the
//! figures keyed `herd_j{J}_{phase}_{metric}` with the goals beside those of 20
//! jobs, and a note of what went wrong. Pure: the scenario observes, this counts.

use std::collections::BTreeMap;

use serde_json::Value;

use super::testbed::{Publish, SaltCpu, herd_minions_count};
use crate::harness::ms;
use crate::results::{Goal, ScenarioResult};
use crate::stats::{percentile, sorted};

/// The size the goals are set for: 20 jobs × 10 minions every 20 s.
pub const GOAL_JOBS: usize = 20;
/// Functions that put the wrapper on a minion (this build; the next one).
pub const DEPLOYING: [&str; 2] = ["state.single", "file.manage_file"];
/// Functions that launch wrappers.
pub const LAUNCHING: [&str; 2] = ["cmd.run_all", "cmd.run_bg"];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// A fleet that never had the wrapper, a fresh state directory.
    Fresh,
    /// An ordered stop and a start on the same state, the wrapper deployed.
    Restart,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Fresh => "fresh",
            Phase::Restart => "restart",
        }
    }

    /// Slots at least this long after the daemon's start count for the lateness goal.
    pub fn settle_ms(self) -> i64 {
        match self {
            Phase::Fresh => 30_000,
            Phase::Restart => 15_000,
        }
    }
}

/// One phase as observed.
pub struct Observed {
    pub jobs: usize,
    pub phase: Phase,
    /// The minions every job targets.
    pub minions: Vec<String>,
    /// When the daemon was started, Unix ms.
    pub started_ms: i64,
    /// The runs whose slot lies in (started, stopped].
    pub runs: Vec<Value>,
    /// Distinct slots whose runs this daemon created (fired or staged): what per-slot
    /// figures are divided by.
    pub slots_handled: usize,
    /// The master's publishes while the daemon ran.
    pub publishes: Vec<Publish>,
    /// CPU-s of the daemon's processes (the salt bridge included) and of the bridge.
    pub daemon_cpu: f64,
    pub bridge_cpu: Option<f64>,
    /// CPU-s of the testbed's master and minions while the daemon ran.
    pub salt_cpu: SaltCpu,
}

/// The counts behind the figures.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    /// Lateness (ms) of every target that started, in slots from `settle_ms` after the
    /// start; sorted.
    pub lateness: Vec<f64>,
    /// The largest lateness of any slot of the phase.
    pub lateness_all_max: Option<f64>,
    pub runs: usize,
    pub targets: usize,
    pub succeeded: usize,
    /// Targets that ended 254 or 255.
    pub false_failures: usize,
    pub skipped: usize,
    /// Skip reasons, numbers (job names, run ids) replaced by `N`.
    pub skip_reasons: BTreeMap<String, usize>,
    /// Targets that did not succeed, by `exit code reason`.
    pub not_succeeded: BTreeMap<String, usize>,
    pub publishes: BTreeMap<String, usize>,
    /// Deploying publishes received, per minion of the herd.
    pub deployments: BTreeMap<String, usize>,
}

/// `text` with every run of digits replaced by `N`.
fn without_numbers(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('N') {
                out.push('N');
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn tally(o: &Observed) -> Tally {
    let mut t = Tally::default();
    let goal_from = o.started_ms + o.phase.settle_ms();
    let mut late = Vec::new();
    for run in &o.runs {
        let Some(slot) = ms(&run["slot"]) else {
            continue;
        };
        t.runs += 1;
        if run["state"] == "skipped" {
            t.skipped += 1;
            let why = run["reason"].as_str().unwrap_or("(no reason recorded)");
            *t.skip_reasons.entry(without_numbers(why)).or_default() += 1;
        }
        for target in run["targets"].as_array().into_iter().flatten() {
            t.targets += 1;
            let code = target["exit_code"].as_i64();
            if code == Some(0) && target["state"] == "finished" {
                t.succeeded += 1;
            } else {
                let what = format!(
                    "{} {}",
                    code.map_or("no exit code".to_string(), |c| c.to_string()),
                    target["reason"]
                        .as_str()
                        .unwrap_or(target["state"].as_str().unwrap_or("?"))
                );
                *t.not_succeeded.entry(what).or_default() += 1;
            }
            if matches!(code, Some(254 | 255)) {
                t.false_failures += 1;
            }
            if let Some(started) = ms(&target["started"]) {
                let l = (started - slot) as f64;
                t.lateness_all_max = Some(t.lateness_all_max.map_or(l, |m: f64| m.max(l)));
                if slot >= goal_from {
                    late.push(l);
                }
            }
        }
    }
    t.lateness = sorted(late);
    for p in &o.publishes {
        *t.publishes.entry(p.function.clone()).or_default() += 1;
    }
    for m in &o.minions {
        let n = o
            .publishes
            .iter()
            .filter(|p| DEPLOYING.contains(&p.function.as_str()) && p.minions.contains(m))
            .count();
        t.deployments.insert(m.clone(), n);
    }
    t
}

/// The key of a per-function figure (`cmd.run_all` → `publishes_per_slot_cmd_run_all`).
fn function_key(function: &str) -> String {
    let safe: String = function
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("publishes_per_slot_{safe}")
}

/// The goal for `metric` in `phase` (set for `GOAL_JOBS` jobs).
pub fn goal(metric: &str, phase: &str) -> Option<Goal> {
    match (metric, phase) {
        ("false_failures" | "skipped_slots", _) => Some(Goal::AtMost(0.0)),
        ("lateness_p99_ms", _) => Some(Goal::AtMost(50.0)),
        ("deployments_per_minion", "fresh") => Some(Goal::AtMost(1.0)),
        ("deployments_per_minion", _) => Some(Goal::AtMost(0.0)),
        ("launch_publishes_per_slot", _) => Some(Goal::AtMost(2.0)),
        _ => None,
    }
}

/// `1 job`, `20 jobs`.
pub fn jobs_text(jobs: usize) -> String {
    match jobs {
        1 => "1 job".into(),
        n => format!("{n} jobs"),
    }
}

/// Adds the phase's figures and its note to `result`. Each figure's text is `{J jobs},
/// {phase}: {what}`, the `what` the same in every phase and size (the report's table
/// has one row per `what`).
pub fn add_figures(result: &mut ScenarioResult, o: &Observed) {
    let t = tally(o);
    let (j, phase) = (o.jobs, o.phase.name());
    let prefix = format!("herd_j{j}_{phase}");
    let slots = o.slots_handled.max(1) as f64;
    let mut add = |metric: &str, what: &str, value: f64, unit: &str| {
        result.figure(
            &format!("{prefix}_{metric}"),
            &format!("{}, {phase}: {what}", jobs_text(j)),
            value,
            unit,
            goal(metric, phase).filter(|_| j == GOAL_JOBS),
        );
    };
    let count = |n: usize| n as f64;
    add(
        "slots",
        "slots served (distinct slots whose runs the daemon started or staged)",
        count(o.slots_handled),
        "",
    );
    add("runs", "runs recorded", count(t.runs), "");
    add("targets", "targets recorded", count(t.targets), "");
    add(
        "targets_succeeded",
        "targets succeeded",
        count(t.succeeded),
        "",
    );
    add(
        "false_failures",
        "false failures (targets ended 254 or 255; every minion is alive)",
        count(t.false_failures),
        "",
    );
    add(
        "skipped_slots",
        "skipped slots (runs recorded skipped)",
        count(t.skipped),
        "",
    );
    add(
        "lateness_samples",
        "targets started in slots from 30 s after a fresh start, 15 s after a restart (the \
         lateness samples)",
        count(t.lateness.len()),
        "",
    );
    for (metric, what, q) in [
        (
            "lateness_p50_ms",
            "command lateness p50 (those targets)",
            0.5,
        ),
        (
            "lateness_p99_ms",
            "command lateness p99 (those targets)",
            0.99,
        ),
        (
            "lateness_max_ms",
            "command lateness max (those targets)",
            1.0,
        ),
    ] {
        if let Some(v) = percentile(&t.lateness, q) {
            add(metric, what, v, "ms");
        }
    }
    if let Some(v) = t.lateness_all_max {
        add(
            "lateness_full_max_ms",
            "command lateness max (every slot)",
            v,
            "ms",
        );
    }
    let most = t.deployments.values().copied().max().unwrap_or(0);
    add(
        "deployments_per_minion",
        "deployments per minion (the most any minion received)",
        count(most),
        "",
    );
    let launches: usize = LAUNCHING.iter().filter_map(|f| t.publishes.get(*f)).sum();
    add(
        "launch_publishes_per_slot",
        &format!("launch publishes per slot ({})", LAUNCHING.join(", ")),
        count(launches) / slots,
        "",
    );
    let total: usize = t.publishes.values().sum();
    add(
        "publishes_per_slot",
        "Salt publishes per slot, every function",
        count(total) / slots,
        "",
    );
    for (function, n) in &t.publishes {
        add(
            &function_key(function),
            &format!("publishes per slot: {function}"),
            count(*n) / slots,
            "",
        );
    }
    add(
        "daemon_cpu_per_slot",
        "daemon CPU per slot (all its processes, the salt bridge included)",
        o.daemon_cpu / slots,
        "CPU-s",
    );
    if let Some(bridge) = o.bridge_cpu {
        add(
            "bridge_cpu_per_slot",
            "of which the salt bridge",
            bridge / slots,
            "CPU-s",
        );
    }
    add(
        "master_cpu_per_slot",
        "salt-master CPU per slot (testbed)",
        o.salt_cpu.master / slots,
        "CPU-s",
    );
    add(
        "minions_cpu_per_slot",
        &format!(
            "salt-minions CPU per slot (testbed: all {} minions on this one host)",
            herd_minions_count()
        ),
        o.salt_cpu.minions / slots,
        "CPU-s",
    );
    if let Some(note) = note(o, &t) {
        result.note(note);
    }
}

fn counted(map: &BTreeMap<String, usize>) -> String {
    map.iter()
        .map(|(what, n)| format!("{n}× {what}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What went wrong in the phase, in words (`None` when nothing did).
fn note(o: &Observed, t: &Tally) -> Option<String> {
    let mut parts = Vec::new();
    if !t.not_succeeded.is_empty() {
        parts.push(format!(
            "targets not succeeded: {}",
            counted(&t.not_succeeded)
        ));
    }
    if !t.skip_reasons.is_empty() {
        parts.push(format!("skipped: {}", counted(&t.skip_reasons)));
    }
    if t.lateness.is_empty() {
        parts.push(format!(
            "no target started in a slot from {} s after the start, so no lateness figures",
            o.phase.settle_ms() / 1000
        ));
    }
    let deployed: Vec<usize> = t.deployments.values().copied().collect();
    if deployed.iter().any(|n| *n > 0) {
        let least = deployed.iter().min().copied().unwrap_or(0);
        let most = deployed.iter().max().copied().unwrap_or(0);
        parts.push(format!("deployments per minion {least} to {most}"));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "{}, {}: {}",
            jobs_text(o.jobs),
            o.phase.name(),
            parts.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: i64 = 1_800_000_000_000;

    fn at(ms: i64) -> String {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("time")
            .to_rfc3339()
    }

    fn target(m: &str, code: Option<i64>, reason: &str, started: Option<i64>) -> Value {
        json!({"machine": m, "state": "finished", "reason": reason, "exit_code": code,
               "started": started.map(at), "ended": null})
    }

    fn observed(runs: Vec<Value>, publishes: Vec<Publish>) -> Observed {
        Observed {
            jobs: 20,
            phase: Phase::Fresh,
            minions: vec!["m1".into(), "m2".into()],
            started_ms: T0,
            runs,
            slots_handled: 2,
            publishes,
            daemon_cpu: 4.0,
            bridge_cpu: Some(1.0),
            salt_cpu: SaltCpu {
                master: 2.0,
                minions: 6.0,
            },
        }
    }

    fn publish(function: &str, minions: &[&str]) -> Publish {
        Publish {
            at_ms: T0 + 1,
            function: function.into(),
            minions: minions.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn runs() -> Vec<Value> {
        let early = T0 + 20_000;
        let late = T0 + 40_000;
        vec![
            json!({"slot": at(early), "state": "partial", "reason": null, "targets": [
                target("m1", Some(0), "exit", Some(early + 900)),
                target("m2", Some(255), "unreachable", None)]}),
            json!({"slot": at(late), "state": "succeeded", "reason": null, "targets": [
                target("m1", Some(0), "exit", Some(late + 10)),
                target("m2", Some(0), "exit", Some(late + 30))]}),
            json!({"slot": at(late), "state": "skipped", "targets": [],
                "reason": "launch: the launch of the previous slot of herd_12 is still going"}),
        ]
    }

    #[test]
    fn lateness_counts_only_settled_slots_and_failures_are_counted() {
        let t = tally(&observed(runs(), Vec::new()));
        assert_eq!(t.lateness, vec![10.0, 30.0]);
        assert_eq!(t.lateness_all_max, Some(900.0));
        assert_eq!((t.runs, t.targets, t.succeeded), (3, 4, 3));
        assert_eq!(t.false_failures, 1);
        assert_eq!(t.skipped, 1);
        assert_eq!(
            t.skip_reasons.keys().next().map(String::as_str),
            Some("launch: the launch of the previous slot of herd_N is still going")
        );
        assert_eq!(t.not_succeeded.get("255 unreachable"), Some(&1));
    }

    #[test]
    fn publishes_are_counted_by_function_and_deployments_by_minion() {
        let t = tally(&observed(
            Vec::new(),
            vec![
                publish("state.single", &["m1", "m2"]),
                publish("state.single", &["m1"]),
                publish("file.manage_file", &["m2"]),
                publish("cmd.run_all", &["m1", "m2"]),
            ],
        ));
        assert_eq!(t.publishes.get("state.single"), Some(&2));
        assert_eq!(t.deployments.get("m1"), Some(&2));
        assert_eq!(t.deployments.get("m2"), Some(&2));
    }

    #[test]
    fn figures_are_per_slot_with_goals_for_twenty_jobs_only() {
        let mut r = ScenarioResult::new("herd", "current", "test");
        let o = observed(runs(), vec![publish("cmd.run_all", &["m1", "m2"]); 6]);
        add_figures(&mut r, &o);
        let f = |k: &str| r.get(k).unwrap_or_else(|| panic!("no {k}"));
        assert_eq!(f("herd_j20_fresh_launch_publishes_per_slot").value, 3.0);
        assert_eq!(
            f("herd_j20_fresh_launch_publishes_per_slot").goal,
            Some(Goal::AtMost(2.0))
        );
        assert_eq!(
            f("herd_j20_fresh_publishes_per_slot_cmd_run_all").value,
            3.0
        );
        assert_eq!(f("herd_j20_fresh_lateness_p99_ms").value, 30.0);
        assert_eq!(f("herd_j20_fresh_false_failures").value, 1.0);
        assert_eq!(f("herd_j20_fresh_minions_cpu_per_slot").value, 3.0);
        assert!(r.notes[0].contains("1× 255 unreachable"), "{:?}", r.notes);
        let mut five = ScenarioResult::new("herd", "current", "test");
        add_figures(&mut five, &Observed { jobs: 5, ..o });
        assert!(five.figures.iter().all(|f| f.goal.is_none()));
        assert!(five.get("herd_j5_fresh_runs").is_some());
    }
}
