//! The herd's table in the report: one row per figure, one column per herd size and
//! phase (the keys are `herd_j{J}_{phase}_{metric}`), a figure that misses its goal in
//! bold, the goals (set for 20 jobs) in the last column. One table per build measured.

use std::fmt::Write;

use super::tally;
use crate::results::{Figure, ScenarioResult, number};

/// (J, phase, metric) of a herd figure's key.
fn parse_key(key: &str) -> Option<(usize, &str, &str)> {
    let rest = key.strip_prefix("herd_j")?;
    let (jobs, rest) = rest.split_once('_')?;
    let (phase, metric) = rest.split_once('_')?;
    Some((jobs.parse().ok()?, phase, metric))
}

fn phase_order(phase: &str) -> u8 {
    match phase {
        "fresh" => 0,
        "restart" => 1,
        _ => 2,
    }
}

fn cell(f: &Figure) -> String {
    let text = if f.unit.is_empty() {
        number(f.value)
    } else {
        format!("{} {}", number(f.value), f.unit)
    };
    match f.goal {
        Some(g) if !g.met(f.value) => format!("**{text}**"),
        _ => text,
    }
}

/// The goal column of a row: one text, or one per phase when they differ.
fn goal_text(metric: &str, unit: &str, phases: &[&str]) -> String {
    let goals: Vec<(&str, String)> = phases
        .iter()
        .filter_map(|p| Some((*p, tally::goal(metric, p)?.text(unit).trim().to_string())))
        .collect();
    let mut distinct: Vec<&String> = goals.iter().map(|(_, g)| g).collect();
    distinct.dedup();
    match distinct.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        _ => goals
            .iter()
            .map(|(phase, g)| format!("{phase} {g}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Where a row goes: in the order figures are added, the publishes of each function
/// right after all publishes, by name.
fn row_order(metric: &str, first_seen: &[String]) -> (usize, String) {
    let (base, name) = match metric.strip_prefix("publishes_per_slot_") {
        Some(function) => ("publishes_per_slot", function),
        None => (metric, ""),
    };
    let at = first_seen
        .iter()
        .position(|m| m == base)
        .unwrap_or(first_seen.len());
    (at, name.to_string())
}

fn one_table(r: &ScenarioResult) -> String {
    let mut columns: Vec<(usize, String)> = Vec::new();
    // (metric, what, unit)
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for f in &r.figures {
        let Some((jobs, phase, metric)) = parse_key(&f.key) else {
            continue;
        };
        if !columns.iter().any(|(j, p)| *j == jobs && p == phase) {
            columns.push((jobs, phase.to_string()));
        }
        if !rows.iter().any(|(m, _, _)| m == metric) {
            let what = f.what.split_once(": ").map_or(f.what.as_str(), |w| w.1);
            rows.push((metric.to_string(), what.to_string(), f.unit.clone()));
        }
    }
    columns.sort_by_key(|(j, p)| (*j, phase_order(p)));
    let first_seen: Vec<String> = rows.iter().map(|(m, _, _)| m.clone()).collect();
    rows.sort_by_key(|(m, _, _)| row_order(m, &first_seen));
    let mut phases: Vec<&str> = columns.iter().map(|(_, p)| p.as_str()).collect();
    phases.sort_by_key(|p| phase_order(p));
    phases.dedup();
    let mut md = String::from("| Figure |");
    for (j, p) in &columns {
        let _ = write!(md, " {}, {p} |", tally::jobs_text(*j));
    }
    let _ = write!(md, " Goal ({} jobs) |\n|---|", tally::GOAL_JOBS);
    for _ in &columns {
        md.push_str("---|");
    }
    md.push_str("---|\n");
    for (metric, what, unit) in rows {
        let _ = write!(md, "| {what} |");
        for (j, p) in &columns {
            let f = r.get(&format!("herd_j{j}_{p}_{metric}"));
            let _ = write!(md, " {} |", f.map_or("–".to_string(), cell));
        }
        let _ = writeln!(md, " {} |", goal_text(&metric, &unit, &phases));
    }
    md
}

/// The tables of every build measured, for the report.
pub fn markdown(present: &[&ScenarioResult]) -> String {
    let mut md = String::new();
    for r in present {
        if present.len() > 1 {
            let _ = writeln!(md, "`{}`:\n", r.label);
        }
        md.push_str(&one_table(r));
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Goal;

    #[test]
    fn keys_split_into_size_phase_and_metric() {
        assert_eq!(
            parse_key("herd_j20_fresh_lateness_p99_ms"),
            Some((20, "fresh", "lateness_p99_ms"))
        );
        assert_eq!(parse_key("slot_to_command_p50_3"), None);
    }

    #[test]
    fn sizes_and_phases_are_columns_and_missed_goals_are_bold() {
        let mut r = ScenarioResult::new("herd", "before", "old");
        for j in [20, 5] {
            for p in ["fresh", "restart"] {
                let mut add = |metric: &str, what: &str, value: f64, unit: &str| {
                    r.figure(
                        &format!("herd_j{j}_{p}_{metric}"),
                        &format!("{j} jobs, {p}: {what}"),
                        value,
                        unit,
                        tally::goal(metric, p).filter(|_| j == 20),
                    );
                };
                add(
                    "publishes_per_slot_state_single",
                    "publishes: state.single",
                    2.0,
                    "",
                );
                add("deployments_per_minion", "deployments per minion", 1.0, "");
                add("publishes_per_slot", "publishes", 3.0, "");
                if j == 5 {
                    add("lateness_p99_ms", "lateness p99", 7.0, "ms");
                    add(
                        "publishes_per_slot_cmd_run_all",
                        "publishes: cmd.run_all",
                        1.0,
                        "",
                    );
                }
            }
        }
        let md = markdown(&[&r]);
        let lines: Vec<&str> = md.lines().collect();
        assert!(
            lines[0].starts_with("| Figure | 5 jobs, fresh | 5 jobs, restart | 20 jobs, fresh |"),
            "{md}"
        );
        assert_eq!(
            lines[2],
            "| deployments per minion | 1.00 | 1.00 | 1.00 | **1.00** | fresh ≤ 1.00, restart ≤ 0 |"
        );
        assert_eq!(lines[3], "| publishes | 3.00 | 3.00 | 3.00 | 3.00 |  |");
        assert!(lines[4].starts_with("| publishes: cmd.run_all |"), "{md}");
        assert!(lines[5].starts_with("| publishes: state.single |"), "{md}");
        assert_eq!(
            lines[6],
            "| lateness p99 | 7.00 ms | 7.00 ms | – | – | ≤ 50.0 ms |"
        );
    }
}
