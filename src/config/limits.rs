//! A job's resource limits on its target: `nice`, `ionice`, `memory_max`, `cpu_quota`,
//! `tasks_max` (the wrapper applies them: `crate::wrapper::limits`).
//!
//! ```yaml
//! nice: 10                 # -20 (first) .. 19 (last)
//! ionice: idle             # idle, best-effort[:0-7], realtime[:0-7], or a level 0-7
//! memory_max: 512M         # bytes, or with K, M, G, T (powers of 1024)
//! cpu_quota: 50%           # of one CPU; 200% is two CPUs' worth
//! tasks_max: 64            # processes and threads at once
//! ```

use super::job_reader::Reader;
use super::resources::{IoNice, Limits, parse_bytes};
use super::values::{self, found};
use super::yaml::Node;

/// Largest `cpu_quota` taken (percent): 1,024 CPUs' worth.
const MAX_CPU_QUOTA: u32 = 102_400;

/// Reads the limits from the job's keys (`get` finds a key's node); each bad value is
/// reported through the reader at its position and leaves that limit unset.
pub(super) fn read_limits<'n>(
    get: impl Fn(&str) -> Option<&'n Node>,
    reader: &mut Reader<'_, '_>,
) -> Limits {
    let value = |key: &str| get(key).filter(|node| !node.is_null());
    Limits {
        nice: value("nice").and_then(|n| reader.read(n, nice)),
        ionice: value("ionice").and_then(|n| reader.read(n, ionice)),
        memory_max: value("memory_max").and_then(|n| reader.read(n, memory_max)),
        cpu_quota: value("cpu_quota").and_then(|n| reader.read(n, cpu_quota)),
        tasks_max: value("tasks_max").and_then(|n| reader.read(n, tasks_max)),
    }
}

fn text(node: &Node, key: &str, expected: &str) -> Result<String, String> {
    node.scalar()
        .map(|t| t.trim().to_string())
        .ok_or_else(|| format!("`{key}`: expected {expected}, found {}", node.describe()))
}

fn nice(node: &Node) -> Result<i32, String> {
    let t = text(node, "nice", "a number from -20 to 19")?;
    match t.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(n),
        _ => Err(format!(
            "`nice`: expected a number from -20 to 19, found {}",
            found(node)
        )),
    }
}

fn ionice(node: &Node) -> Result<IoNice, String> {
    let t = text(node, "ionice", "a class such as idle or best-effort:7")?;
    IoNice::parse(&t)
}

fn memory_max(node: &Node) -> Result<u64, String> {
    let t = text(node, "memory_max", "a size such as 512M")?;
    let bytes = parse_bytes(&t).map_err(|e| format!("`memory_max`: {e}"))?;
    // Below a few MiB not even the shell starts; say so rather than fail every run.
    if bytes < 1 << 20 {
        return Err(format!("`memory_max`: {t} is less than 1M"));
    }
    Ok(bytes)
}

fn cpu_quota(node: &Node) -> Result<u32, String> {
    let t = text(node, "cpu_quota", "a percentage such as 50%")?;
    let digits = t.strip_suffix('%').unwrap_or(&t).trim();
    match digits.parse::<u32>() {
        Ok(p) if (1..=MAX_CPU_QUOTA).contains(&p) => Ok(p),
        _ => Err(format!(
            "`cpu_quota`: expected a percentage of one CPU from 1% to {MAX_CPU_QUOTA}% \
             (200% is two CPUs), found {}",
            found(node)
        )),
    }
}

fn tasks_max(node: &Node) -> Result<u64, String> {
    match values::unsigned(node) {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("`tasks_max`: 0 would not let the command start; at least 1".into()),
        Err(e) => Err(format!("`tasks_max`: {e}")),
    }
}
