//! The herd's table in the report: one row per figure, one column per herd size and
//! phase (the keys are `herd_j{J}_{phase}_{metric}`), a figure that misses its goal in
//! bold, the goals (set for 20 jobs) in the last column. One table per build measured.

use std::fmt::Write;

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
fn goal_text(goals: &[(&str, String)]) -> String {
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

fn one_table(r: &ScenarioResult) -> String {
    let mut columns: Vec<(usize, String)> = Vec::new();
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in &r.figures {
        let Some((jobs, phase, metric)) = parse_key(&f.key) else {
            continue;
        };
        if !columns.iter().any(|(j, p)| *j == jobs && p == phase) {
            columns.push((jobs, phase.to_string()));
        }
        if !rows.iter().any(|(m, _)| m == metric) {
            let what = f.what.split_once(": ").map_or(f.what.as_str(), |w| w.1);
            rows.push((metric.to_string(), what.to_string()));
        }
    }
    columns.sort_by_key(|(j, p)| (*j, phase_order(p)));
    let mut md = String::from("| Figure |");
    for (j, p) in &columns {
        let _ = write!(md, " {j} jobs, {p} |");
    }
    md.push_str(" Goal (20 jobs) |\n|---|");
    for _ in &columns {
        md.push_str("---|");
    }
    md.push_str("---|\n");
    for (metric, what) in rows {
        let _ = write!(md, "| {what} |");
        let mut goals: Vec<(&str, String)> = Vec::new();
        for (j, p) in &columns {
            let f = r.get(&format!("herd_j{j}_{p}_{metric}"));
            let _ = write!(md, " {} |", f.map_or("–".to_string(), cell));
            if let Some(f) = f
                && let Some(g) = f.goal
                && !goals.iter().any(|(gp, _)| gp == p)
            {
                goals.push((p.as_str(), g.text(&f.unit).trim().to_string()));
            }
        }
        let _ = writeln!(md, " {} |", goal_text(&goals));
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
        let goal = |p: &str| Some(Goal::AtMost(if p == "fresh" { 1.0 } else { 0.0 }));
        for j in [20, 5] {
            for p in ["fresh", "restart"] {
                r.figure(
                    &format!("herd_j{j}_{p}_deployments_per_minion"),
                    &format!("{j} jobs, {p}: deployments per minion"),
                    if j == 20 { 3.0 } else { 1.0 },
                    "",
                    if j == 20 { goal(p) } else { None },
                );
            }
        }
        let md = markdown(&[&r]);
        assert!(
            md.starts_with("| Figure | 5 jobs, fresh | 5 jobs, restart | 20 jobs, fresh |"),
            "{md}"
        );
        assert!(
            md.contains("| deployments per minion | 1.00 | 1.00 | **3.00** | **3.00** | fresh ≤ 1.00, restart ≤ 0 |"),
            "{md}"
        );
    }
}
