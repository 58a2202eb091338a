//! The scenarios, in the report's order. Each starts its own daemon(s) on a fresh root,
//! measures through public interfaces only (`saltpeterctl`, the wrapper port, `/proc`),
//! and returns figures with their goals beside them; none fails on time.

mod compression;
mod fanin;
mod fanout;
mod fleet;
mod herd;
mod ingest;
mod memory;
mod original;
mod salt;
mod scheduler;

use crate::BenchError;
use crate::harness::Binaries;
use crate::results::ScenarioResult;

/// What every scenario gets.
pub struct Env {
    pub bins: Binaries,
    pub label: String,
    pub build: String,
}

impl Env {
    pub fn result(&self, scenario: &str) -> ScenarioResult {
        ScenarioResult::new(scenario, &self.label, &self.build)
    }
}

pub struct Scenario {
    pub name: &'static str,
    pub title: &'static str,
    /// What it does and which goal it checks, for the report.
    pub about: &'static str,
    /// Figures are keyed by size and a run at one size keeps those of the others (the
    /// Salt scenario, run at 3, 10 and 30 minions one at a time).
    pub sizes_side_by_side: bool,
    /// The scenario's own table of figures in the report, for every build measured
    /// (default: one row per figure, one column per build).
    pub table: Option<fn(&[&ScenarioResult]) -> String>,
    pub run: fn(&Env) -> Result<ScenarioResult, BenchError>,
}

pub const ALL: &[Scenario] = &[
    fanin::SCENARIO,
    ingest::SCENARIO,
    fanout::SCENARIO,
    scheduler::SCENARIO,
    salt::SCENARIO,
    original::SCENARIO,
    memory::SCENARIO,
    herd::SCENARIO,
    fleet::SCENARIO,
    compression::SCENARIO,
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

/// A size from the environment (`SP_BENCH_<NAME>`), else `default`.
pub fn size(name: &str, default: usize) -> usize {
    std::env::var(format!("SP_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `targets: [p0, p1, …]` for `n` local targets named `prefix{i}`.
pub fn target_list(prefix: &str, n: usize) -> String {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    format!("[{}]", names.join(", "))
}

/// The CPU and peak memory of every daemon process, as figures.
pub fn process_figures(result: &mut ScenarioResult, processes: &[(String, u32)], what: &str) {
    for (role, pid) in processes {
        result.figure(
            &format!("peak_rss_{role}"),
            &format!("{role}: peak RSS {what}"),
            crate::procstat::peak_rss_kib(*pid) as f64 / 1024.0,
            "MiB",
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_are_unique_and_found() {
        for s in ALL {
            assert_eq!(find(s.name).map(|f| f.title), Some(s.title));
        }
        let mut names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        names.dedup();
        assert_eq!(names.len(), 10);
    }

    #[test]
    fn target_lists_are_yaml_flow_sequences() {
        assert_eq!(target_list("t", 3), "[t0, t1, t2]");
        assert_eq!(target_list("t", 0), "[]");
    }
}
