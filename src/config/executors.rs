//! `saltpeter_config.executors` and `executor_path`: where each executor plugin is
//! (docs/executors.md), and which plugin a job's `executor: NAME` names.
//!
//! - `executors: {NAME: {path, sha256, timeout, config}}`: a plugin named explicitly,
//!   with an optional sha256 pin, the deadline of its slow operations and its own
//!   configuration (any YAML mapping; handed to the plugin as JSON).
//! - `executor_path`: directories searched, in order, for `saltpeter-executor-NAME`
//!   when `executors` has no `path` for NAME; default the packaged directory, then the
//!   directory of the daemon binary (a `cargo build` puts the plugins there).
//!
//! Finding a plugin is a `stat` per directory; hashing it for the pin is not done here
//! (the daemon's `--exec-pinned` checks it on the file it executes, and the
//! configuration check of `check.rs` runs outside any loop).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::values;
use super::yaml::{Node, NodeKind};
use crate::executor::spec::DEFAULT_TIMEOUT_S;
use crate::executor::spec::PluginSpec;

/// One entry of `saltpeter_config.executors`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginEntry {
    pub path: Option<PathBuf>,
    pub sha256: Option<String>,
    pub timeout_s: Option<u64>,
    /// The `config` mapping as JSON text.
    pub config: String,
}

/// Reads `executors`.
pub(crate) fn read_executors(node: &Node) -> Result<BTreeMap<String, PluginEntry>, String> {
    if node.is_null() {
        return Ok(BTreeMap::new());
    }
    let NodeKind::Map(pairs) = &node.kind else {
        return Err(format!(
            "expected a mapping of executor names, found {}",
            node.describe()
        ));
    };
    let mut out = BTreeMap::new();
    for (key, value) in pairs {
        let name = values::string(key)?;
        if crate::executor::is_builtin(&name) {
            return Err(format!("`{name}` is a built-in executor, not a plugin"));
        }
        if !crate::executor::valid_name(&name) {
            return Err(format!(
                "`{}` is not an executor name (1 to 64 of a-z, 0-9, _ and -, starting \
                 with a letter)",
                crate::logsafe::clip(&name, 80)
            ));
        }
        let entry = read_entry(value).map_err(|e| format!("executors.{name}: {e}"))?;
        out.insert(name, entry);
    }
    Ok(out)
}

fn read_entry(node: &Node) -> Result<PluginEntry, String> {
    let mut entry = PluginEntry {
        config: "{}".to_string(),
        ..PluginEntry::default()
    };
    if node.is_null() {
        return Ok(entry);
    }
    let NodeKind::Map(pairs) = &node.kind else {
        return Err(format!(
            "expected a mapping (path, sha256, timeout, config), found {}",
            node.describe()
        ));
    };
    for (key, value) in pairs {
        let key = values::string(key)?;
        match key.as_str() {
            "path" => entry.path = Some(PathBuf::from(values::non_empty_string(value)?)),
            "sha256" => {
                let hex = values::non_empty_string(value)?.trim().to_ascii_lowercase();
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err("sha256: expected 64 hexadecimal digits".to_string());
                }
                entry.sha256 = Some(hex);
            }
            "timeout" => {
                let secs = values::seconds(value).map_err(|e| format!("timeout: {e}"))?;
                if secs == 0 || secs > 3600 {
                    return Err("timeout: expected 1 to 3600 seconds".to_string());
                }
                entry.timeout_s = Some(secs);
            }
            "config" => {
                let json = to_json(value);
                if !json.is_object() && !json.is_null() {
                    return Err(format!(
                        "config: expected a mapping, found {}",
                        value.describe()
                    ));
                }
                entry.config = if json.is_null() {
                    "{}".to_string()
                } else {
                    json.to_string()
                };
            }
            other => {
                return Err(format!(
                    "unknown key `{}` (path, sha256, timeout, config)",
                    crate::logsafe::clip(other, 60)
                ));
            }
        }
    }
    Ok(entry)
}

/// A YAML tree as JSON: plain scalars that read as booleans, null or numbers become
/// those, everything else a string.
pub(crate) fn to_json(node: &Node) -> serde_json::Value {
    use serde_json::Value;
    match &node.kind {
        NodeKind::Seq(items) => Value::Array(items.iter().map(to_json).collect()),
        NodeKind::Map(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.scalar().unwrap_or_default().to_string(), to_json(v)))
                .collect(),
        ),
        NodeKind::Scalar { text, quoted: true } => Value::String(text.clone()),
        NodeKind::Scalar {
            text,
            quoted: false,
        } => {
            if node.is_null() {
                return Value::Null;
            }
            match text.as_str() {
                "true" | "True" | "TRUE" => return Value::Bool(true),
                "false" | "False" | "FALSE" => return Value::Bool(false),
                _ => {}
            }
            if let Ok(n) = text.parse::<i64>() {
                return Value::from(n);
            }
            if let Ok(f) = text.parse::<f64>()
                && f.is_finite()
            {
                return Value::from(f);
            }
            Value::String(text.clone())
        }
    }
}

/// The default `executor_path`: the packaged directory, then the daemon binary's own.
pub fn default_executor_path() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(crate::executor::DEFAULT_EXECUTOR_PATH)];
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        dirs.push(dir.to_path_buf());
    }
    dirs
}

/// Where the plugin `name` is: its `executors` entry's `path`, else the first
/// `saltpeter-executor-NAME` of `executor_path` that exists; `Err` says where it looked.
pub fn find_plugin(
    name: &str,
    entries: &BTreeMap<String, PluginEntry>,
    executor_path: &[PathBuf],
) -> Result<PluginSpec, String> {
    let entry = entries.get(name).cloned().unwrap_or_else(|| PluginEntry {
        config: "{}".to_string(),
        ..PluginEntry::default()
    });
    let file = format!("{}{name}", crate::executor::FILE_PREFIX);
    let path = match &entry.path {
        Some(path) => path.clone(),
        None => executor_path
            .iter()
            .map(|dir| dir.join(&file))
            .find(|p| p.exists())
            .ok_or_else(|| {
                format!(
                    "no executor plugin `{name}`: {file} is in none of {} \
                     (saltpeter_config.executor_path), and saltpeter_config.executors has \
                     no path for it",
                    executor_path
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?,
    };
    crate::executor::spec::check_file(&path).map_err(|e| format!("executor `{name}`: {e}"))?;
    Ok(PluginSpec {
        name: name.to_string(),
        path,
        sha256: entry.sha256,
        config: entry.config,
        timeout_s: entry.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S),
    })
}

/// `executor_path` as read: a list of directories (or one).
pub(crate) fn read_executor_path(node: &Node) -> Result<Vec<PathBuf>, String> {
    let dirs = match &node.kind {
        NodeKind::Seq(_) => values::string_list(node)?,
        _ => vec![values::non_empty_string(node)?],
    };
    dirs.into_iter()
        .map(|d| {
            let p = PathBuf::from(d.trim());
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(format!("{} is not an absolute directory", p.display()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(yaml: &str) -> Node {
        crate::config::yaml::parse(yaml)
            .expect("yaml")
            .expect("a tree")
    }

    #[test]
    fn entries_read_with_their_config_as_json() {
        let n = node(
            "ssh:\n  sha256: ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789\n  timeout: 30\n  config:\n    user: ops\n    port: 2222\n    ssh_options: [A=b]\n",
        );
        let e = read_executors(&n).unwrap();
        let ssh = &e["ssh"];
        assert_eq!(ssh.timeout_s, Some(30));
        assert_eq!(
            ssh.sha256.as_deref(),
            Some("abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
        );
        let cfg: serde_json::Value = serde_json::from_str(&ssh.config).unwrap();
        assert_eq!(cfg["port"], 2222);
        assert_eq!(cfg["user"], "ops");
        assert_eq!(cfg["ssh_options"][0], "A=b");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (yaml, want) in [
            ("salt: {}", "built-in"),
            ("Bad!: {}", "not an executor name"),
            ("x:\n  sha256: zz", "64 hexadecimal"),
            ("x:\n  timeout: 0", "1 to 3600"),
            ("x:\n  bogus: 1", "unknown key `bogus`"),
            ("x:\n  config: [1]", "expected a mapping"),
        ] {
            let err = read_executors(&node(yaml)).unwrap_err();
            assert!(err.contains(want), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_plugin_is_found_in_the_path_or_said_missing() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let err = find_plugin("demo", &BTreeMap::new(), &[dir.path().to_path_buf()]).unwrap_err();
        assert!(err.contains("saltpeter-executor-demo"), "{err}");
        let file = dir.path().join("saltpeter-executor-demo");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let err = find_plugin("demo", &BTreeMap::new(), &[dir.path().to_path_buf()]).unwrap_err();
        assert!(err.contains("not_executable"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = find_plugin("demo", &BTreeMap::new(), &[dir.path().to_path_buf()]).unwrap();
        assert_eq!(spec.path, file);
        assert_eq!(spec.timeout_s, DEFAULT_TIMEOUT_S);
    }
}
