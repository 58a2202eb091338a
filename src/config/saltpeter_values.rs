//! The `saltpeter_config` values with a shape of their own: `database_url` (never
//! echoed) and its TLS keys, `servers` and `retention`.

use std::path::PathBuf;

use super::types::{Retention, Secret};
use super::values;
use super::yaml::{Node, NodeKind};

/// `database_url`: empty or absent is SQLite; anything else must be a PostgreSQL URL
/// (checked in full by db when it connects). The value is never echoed: it may hold a
/// password.
pub(super) fn read_database_url(node: &Node) -> Result<Option<Secret>, String> {
    let Some(url) = values::optional_string(node)? else {
        return Ok(None);
    };
    let url = url.trim();
    if url.is_empty() {
        return Ok(None);
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(
            "must be a PostgreSQL URL (postgres://user@host/database); leave it out for SQLite"
                .to_string(),
        );
    }
    Ok(Some(Secret::new(url)))
}

/// `database_ca_file`: an absolute path (its content is checked with the URL, by
/// [`database_problem`], only when there is a database URL).
pub(super) fn read_database_ca_file(node: &Node) -> Result<Option<PathBuf>, String> {
    let Some(text) = values::optional_string(node)? else {
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return Err(format!("`{}` is not an absolute path", path.display()));
    }
    Ok(Some(path))
}

/// `servers`: wrapper URLs (`ws://` or `wss://`), one per server; a comma or a space
/// inside one would split `SP_URL`, so neither is allowed.
pub(super) fn read_servers(node: &Node) -> Result<Vec<String>, String> {
    let urls = values::string_list(node)?;
    for url in &urls {
        if !(url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(format!(
                "`{url}` is not a wrapper URL (ws://host:port or wss://…)"
            ));
        }
        if url.contains([',', ' ']) {
            return Err(format!("`{url}` holds a comma or a space"));
        }
    }
    Ok(urls)
}

pub(super) fn read_retention(node: &Node) -> Result<Retention, String> {
    let NodeKind::Map(pairs) = &node.kind else {
        return Err(format!(
            "expected a mapping with runs, days and bytes, found {}",
            node.describe()
        ));
    };
    let mut retention = Retention::default();
    for (key, value) in pairs {
        match key.scalar() {
            Some("runs") => retention.runs = values::unsigned(value)?,
            Some("days") => retention.days = values::unsigned(value)?,
            Some("bytes") => retention.bytes = values::unsigned(value)?,
            _ => {
                return Err(format!(
                    "`retention` takes runs, days and bytes, found {}",
                    values::found(key)
                ));
            }
        }
    }
    Ok(retention)
}

/// `max_running_per_machine`: one cap for every machine, or a default and caps for the
/// machines matching glob patterns (the first matching pattern, in file order, wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineCaps {
    pub default: Option<u32>,
    pub machines: Vec<(String, u32)>,
}

impl MachineCaps {
    /// The cap of `machine`; `None`: no limit.
    pub fn cap_for(&self, machine: &str) -> Option<u32> {
        self.machines
            .iter()
            .find(|(pattern, _)| super::windows::glob_match(pattern, machine))
            .map(|(_, cap)| *cap)
            .or(self.default)
            .filter(|cap| *cap > 0)
    }

    /// Any machine has a cap.
    pub fn is_set(&self) -> bool {
        self.default.is_some_and(|c| c > 0) || self.machines.iter().any(|(_, c)| *c > 0)
    }
}

/// A cap: absent, `null` or `0` mean no limit.
pub(super) fn read_limit(node: &Node) -> Result<Option<u32>, String> {
    if node.is_null() {
        return Ok(None);
    }
    match values::unsigned(node)? {
        0 => Ok(None),
        v => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("{v} is too large")),
    }
}

/// `max_running_per_machine: N`, or `{default: N, machines: {'db*': M, build01: K}}`.
pub(super) fn read_machine_caps(node: &Node) -> Result<MachineCaps, String> {
    let NodeKind::Map(pairs) = &node.kind else {
        return Ok(MachineCaps {
            default: read_limit(node)?,
            machines: Vec::new(),
        });
    };
    let mut caps = MachineCaps::default();
    for (key, value) in pairs {
        match key.scalar() {
            Some("default") => caps.default = read_limit(value)?,
            Some("machines") => {
                let NodeKind::Map(machines) = &value.kind else {
                    return Err(format!(
                        "`machines` must map machine names or globs to caps, such as \
                         {{'db*': 1}}, found {}",
                        value.describe()
                    ));
                };
                for (pattern, cap) in machines {
                    let pattern = pattern
                        .scalar()
                        .filter(|p| !p.trim().is_empty())
                        .ok_or_else(|| {
                            "a machine name or glob must be a non-empty text".to_string()
                        })?;
                    // `0` here means no limit for those machines, whatever the default.
                    let cap = read_limit(cap)
                        .map_err(|m| format!("cap of `{pattern}`: {m}"))?
                        .unwrap_or(0);
                    caps.machines.push((pattern.trim().to_string(), cap));
                }
            }
            other => {
                return Err(format!(
                    "`max_running_per_machine` takes a number, or `default` and `machines`, \
                     not `{}`",
                    other.unwrap_or("?")
                ));
            }
        }
    }
    Ok(caps)
}
