//! `saltpeterctl wrapper status`: the minions grouped by the wrapper build they have.

use serde_json::{Value, json};

use super::exit::{CtlResult, EXIT_OK};
use super::out::print_json;
use super::table::{Style, Table, cell};
use crate::wire::admin::WrapperFleet;

/// The first 12 hex digits of a build, or what stands for an unknown one.
fn short(sha256: &str) -> &str {
    match sha256.get(..12) {
        Some(s) if !s.is_empty() => s,
        _ => "(unknown)",
    }
}

pub(super) fn status(fleet: &WrapperFleet, json: bool) -> CtlResult {
    let style = Style::stdout();
    if json {
        let minions: Vec<Value> = fleet
            .minions
            .iter()
            .map(|m| {
                json!({
                    "minion": m.minion,
                    "path": m.path,
                    "sha256": m.sha256,
                    "current": m.current,
                    "seen": crate::json::time(Some(m.seen)),
                    "deploying": m.deploying,
                    "deployments": m.deployments,
                })
            })
            .collect();
        print_json(&json!({ "this_build": fleet.this_build, "minions": minions }));
        return Ok(EXIT_OK);
    }
    match &fleet.this_build {
        Some(build) => outln!("this build's wrapper: sha256 {build}"),
        None => outln!("this build's wrapper: not hashed yet"),
    }
    // One row per (build, path): how many minions, and which.
    let mut groups: std::collections::BTreeMap<(bool, &str, &str), Vec<&str>> = Default::default();
    for m in &fleet.minions {
        let key = (!m.current, m.sha256.as_str(), m.path.as_str());
        groups.entry(key).or_default().push(&m.minion);
    }
    let mut t = Table::new(&["BUILD", "PATH", "MINIONS", "WHICH"]);
    for ((stale, sha, path), minions) in &groups {
        let build = match stale {
            false => format!("{} (this build)", short(sha)),
            true => short(sha).to_string(),
        };
        let mut which = minions
            .iter()
            .take(8)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if minions.len() > 8 {
            which.push_str(&format!(", ... ({} more)", minions.len() - 8));
        }
        t.row(vec![
            cell(build),
            cell(*path),
            cell(minions.len().to_string()),
            cell(which),
        ]);
    }
    out!("{}", t.render(style, ""));
    let deploying: Vec<&str> = fleet
        .minions
        .iter()
        .filter(|m| m.deploying)
        .map(|m| m.minion.as_str())
        .collect();
    if !deploying.is_empty() {
        outln!("deploying now: {}", deploying.join(", "));
    }
    Ok(EXIT_OK)
}
