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

use super::resources::{IoNice, Limits, parse_bytes};
use super::values::{self, found};
use super::yaml::Node;

/// Largest `cpu_quota` taken (percent): 1,024 CPUs' worth.
const MAX_CPU_QUOTA: u32 = 102_400;

/// Reads the limits from the job's keys (`get` finds a key's node); each bad value is
/// reported through `read` at its position and leaves that limit unset.
pub(super) fn read_limits<'n>(
    get: impl Fn(&str) -> Option<&'n Node>,
    mut read: impl FnMut(&Node, fn(&Node) -> Result<Limit, String>) -> Option<Limit>,
) -> Limits {
    let mut limits = Limits::default();
    for (key, parse) in [
        ("nice", nice as fn(&Node) -> Result<Limit, String>),
        ("ionice", ionice),
        ("memory_max", memory_max),
        ("cpu_quota", cpu_quota),
        ("tasks_max", tasks_max),
    ] {
        let Some(node) = get(key) else { continue };
        if node.is_null() {
            continue;
        }
        match read(node, parse) {
            Some(Limit::Nice(n)) => limits.nice = Some(n),
            Some(Limit::IoNice(io)) => limits.ionice = Some(io),
            Some(Limit::MemoryMax(b)) => limits.memory_max = Some(b),
            Some(Limit::CpuQuota(p)) => limits.cpu_quota = Some(p),
            Some(Limit::TasksMax(n)) => limits.tasks_max = Some(n),
            None => {}
        }
    }
    limits
}

/// One limit as read.
pub(super) enum Limit {
    Nice(i32),
    IoNice(IoNice),
    MemoryMax(u64),
    CpuQuota(u32),
    TasksMax(u64),
}

fn text(node: &Node, key: &str, expected: &str) -> Result<String, String> {
    node.scalar()
        .map(|t| t.trim().to_string())
        .ok_or_else(|| format!("`{key}`: expected {expected}, found {}", node.describe()))
}

fn nice(node: &Node) -> Result<Limit, String> {
    let t = text(node, "nice", "a number from -20 to 19")?;
    match t.parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(Limit::Nice(n)),
        _ => Err(format!(
            "`nice`: expected a number from -20 to 19, found {}",
            found(node)
        )),
    }
}

fn ionice(node: &Node) -> Result<Limit, String> {
    let t = text(node, "ionice", "a class such as idle or best-effort:7")?;
    IoNice::parse(&t).map(Limit::IoNice)
}

fn memory_max(node: &Node) -> Result<Limit, String> {
    let t = text(node, "memory_max", "a size such as 512M")?;
    let bytes = parse_bytes(&t).map_err(|e| format!("`memory_max`: {e}"))?;
    // Below a few MiB not even the shell starts; say so rather than fail every run.
    if bytes < 1 << 20 {
        return Err(format!("`memory_max`: {t} is less than 1M"));
    }
    Ok(Limit::MemoryMax(bytes))
}

fn cpu_quota(node: &Node) -> Result<Limit, String> {
    let t = text(node, "cpu_quota", "a percentage such as 50%")?;
    let digits = t.strip_suffix('%').unwrap_or(&t).trim();
    match digits.parse::<u32>() {
        Ok(p) if (1..=MAX_CPU_QUOTA).contains(&p) => Ok(Limit::CpuQuota(p)),
        _ => Err(format!(
            "`cpu_quota`: expected a percentage of one CPU from 1% to {MAX_CPU_QUOTA}% \
             (200% is two CPUs), found {}",
            found(node)
        )),
    }
}

fn tasks_max(node: &Node) -> Result<Limit, String> {
    match values::unsigned(node) {
        Ok(n) if n >= 1 => Ok(Limit::TasksMax(n)),
        Ok(_) => Err("`tasks_max`: 0 would not let the command start; at least 1".into()),
        Err(e) => Err(format!("`tasks_max`: {e}")),
    }
}
