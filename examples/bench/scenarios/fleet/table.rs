//! The fleet's table in the report: one row per figure, one column per fleet size (the
//! keys end in `_{N}`), a figure that misses its goal in bold. One table per build.

use std::fmt::Write;

use crate::results::{Figure, ScenarioResult, number};

/// (figure, size) of a fleet figure's key: `cpu_ms_per_target_hub_1000` →
/// (`cpu_ms_per_target_hub`, 1000).
fn parse_key(key: &str) -> Option<(&str, usize)> {
    let (base, n) = key.rsplit_once('_')?;
    Some((base, n.parse().ok()?))
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

pub fn table(results: &[&ScenarioResult]) -> String {
    let mut md = String::new();
    for r in results {
        let mut sizes: Vec<usize> = r
            .figures
            .iter()
            .filter_map(|f| parse_key(&f.key).map(|(_, n)| n))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut rows: Vec<(&str, &str)> = Vec::new();
        for f in &r.figures {
            if let Some((base, _)) = parse_key(&f.key)
                && !rows.iter().any(|(b, _)| *b == base)
            {
                // The text without its size ("1,000: daemon CPU ..." → "daemon CPU ...").
                let what = f.what.split_once(": ").map_or(f.what.as_str(), |(_, w)| w);
                rows.push((base, what));
            }
        }
        let _ = write!(md, "`{}` ({}):\n\n| Figure |", r.label, r.build);
        for n in &sizes {
            let _ = write!(md, " {} minions |", number(*n as f64));
        }
        md.push_str(" Goal |\n|---|");
        for _ in &sizes {
            md.push_str("---|");
        }
        md.push_str("---|\n");
        for (base, what) in rows {
            let _ = write!(md, "| {what} |");
            let mut goal = String::new();
            for n in &sizes {
                let f = r.get(&format!("{base}_{n}"));
                let _ = write!(md, " {} |", f.map(cell).unwrap_or_else(|| "–".into()));
                if let Some(fig) = f
                    && let Some(g) = fig.goal
                {
                    goal = g.text(&fig.unit);
                }
            }
            let _ = writeln!(md, " {} |", goal.trim());
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_figure_and_size() {
        assert_eq!(
            parse_key("cpu_ms_per_target_hub_1000"),
            Some(("cpu_ms_per_target_hub", 1000))
        );
        assert_eq!(
            parse_key("start_p99_ms_10000"),
            Some(("start_p99_ms", 10000))
        );
        assert_eq!(parse_key("nothing"), None);
    }
}
