//! The ssh executor's configuration (`saltpeter_config.executors.ssh.config`): its keys
//! with their documentation, read into an [`SshConfig`] with every problem named by its
//! key (`config.port`, ...).
//!
//! [`SshConfig::parse`] is pure (the shape and the values); [`SshConfig::check_files`]
//! looks at the files the keys name (`check_config` only: every other operation runs
//! with what is there and reports what `ssh` says).

use serde_json::{Map, Value};

use super::hosts;
use crate::executor::protocol::KeyDoc;

/// The configuration, with the defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SshConfig {
    pub(super) identity_file: Option<String>,
    pub(super) known_hosts_file: Option<String>,
    pub(super) user: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) ssh_options: Vec<String>,
    pub(super) inventory: Option<String>,
    pub(super) connect_timeout: u64,
    pub(super) parallel: usize,
    pub(super) ssh_bin: String,
    pub(super) op_timeout: u64,
}

impl Default for SshConfig {
    fn default() -> SshConfig {
        SshConfig {
            identity_file: None,
            known_hosts_file: None,
            user: None,
            port: None,
            ssh_options: Vec::new(),
            inventory: None,
            connect_timeout: 10,
            parallel: 32,
            ssh_bin: "ssh".to_string(),
            op_timeout: 55,
        }
    }
}

/// A problem with one key (`config.KEY`; `None`: the mapping itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyError {
    pub(super) key: Option<String>,
    pub(super) message: String,
}

/// The keys, in the order `describe` lists them.
const KEYS: [(&str, &str); 10] = [
    (
        "identity_file",
        "Absolute path of the private key ssh authenticates with (-i, with \
         IdentitiesOnly=yes). Default: the daemon user's keys and ssh agent.",
    ),
    (
        "known_hosts_file",
        "Absolute path of the known-hosts file (UserKnownHostsFile). Host keys are \
         checked as the operator's ssh configuration says (StrictHostKeyChecking is never \
         changed; ssh_options may set it).",
    ),
    (
        "user",
        "The user to log in as where a host spec names none (-l). Default: ssh's.",
    ),
    (
        "port",
        "The port where a host spec names none (-p), 1 to 65535. Default: ssh's.",
    ),
    (
        "ssh_options",
        "A list of Key=Value ssh options, each passed as -o (BatchMode is always yes; \
         ConnectTimeout comes from connect_timeout).",
    ),
    (
        "inventory",
        "Absolute path of a file of hosts, one spec per line (# comments), which target \
         type glob matches its patterns against.",
    ),
    (
        "connect_timeout",
        "Seconds ssh may take to connect (ConnectTimeout), 1 to 600. Default 10.",
    ),
    (
        "parallel",
        "How many ssh connections run at once, 1 to 1024. Default 32.",
    ),
    (
        "ssh_bin",
        "The OpenSSH client: a command name looked up in PATH, or an absolute path. \
         Default ssh.",
    ),
    (
        "op_timeout",
        "Seconds a launch or kill may take in all, 1 to 3600; machines not done by then \
         are reported failed. Keep it under the executor's timeout (default 60). \
         Default 55.",
    ),
];

/// What `describe` lists.
pub(super) fn key_docs() -> Vec<KeyDoc> {
    KEYS.iter()
        .map(|(name, doc)| KeyDoc {
            name: name.to_string(),
            required: false,
            doc: doc.to_string(),
        })
        .collect()
}

impl SshConfig {
    /// The configuration `value` holds (`null` or `{}`: every default), and what is
    /// wrong with it; a key in error keeps its default.
    pub(super) fn parse(value: &Value) -> (SshConfig, Vec<KeyError>) {
        let mut config = SshConfig::default();
        let mut errors = Vec::new();
        let empty = Map::new();
        let map = match value {
            Value::Null => &empty,
            Value::Object(map) => map,
            _ => {
                errors.push(KeyError {
                    key: None,
                    message: "the ssh executor's config is not a mapping".to_string(),
                });
                &empty
            }
        };
        for (key, value) in map {
            if let Err(message) = config.set(key, value) {
                errors.push(KeyError {
                    key: Some(format!("config.{}", crate::logsafe::clip(key, 60))),
                    message,
                });
            }
        }
        (config, errors)
    }

    /// The configuration, or every problem in one message (the operations other than
    /// `check_config`).
    pub(super) fn load(value: &Value) -> Result<SshConfig, String> {
        let (config, errors) = SshConfig::parse(value);
        if errors.is_empty() {
            return Ok(config);
        }
        Err(errors
            .iter()
            .map(|e| match &e.key {
                Some(key) => format!("{key}: {}", e.message),
                None => e.message.clone(),
            })
            .collect::<Vec<_>>()
            .join("; "))
    }

    fn set(&mut self, key: &str, value: &Value) -> Result<(), String> {
        match key {
            "identity_file" => self.identity_file = Some(option_path(value)?),
            "known_hosts_file" => self.known_hosts_file = Some(option_path(value)?),
            "inventory" => self.inventory = Some(path(value)?),
            "user" => {
                let user = string(value)?;
                hosts::check_user(&user)?;
                self.user = Some(user);
            }
            "port" => self.port = Some(integer(value, 1, 65535)? as u16),
            "ssh_options" => self.ssh_options = ssh_options(value)?,
            "connect_timeout" => self.connect_timeout = integer(value, 1, 600)?,
            "parallel" => self.parallel = integer(value, 1, 1024)? as usize,
            "op_timeout" => self.op_timeout = integer(value, 1, 3600)?,
            "ssh_bin" => {
                let bin = string(value)?;
                let name_ok = !bin.is_empty()
                    && !bin.starts_with('-')
                    && !bin.chars().any(|c| c.is_control());
                if !name_ok || (bin.contains('/') && !bin.starts_with('/')) {
                    return Err(format!(
                        "{} is neither a command name nor an absolute path",
                        crate::logsafe::clip(&bin, 80)
                    ));
                }
                self.ssh_bin = bin;
            }
            _ => {
                let known: Vec<&str> = KEYS.iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "unknown key; the ssh executor's keys are {}",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The files the keys name: `identity_file` and `inventory` readable (the inventory's
    /// every line a host spec), `ssh_bin` an executable file.
    pub(super) fn check_files(&self) -> Vec<KeyError> {
        let mut errors = Vec::new();
        let mut error = |key: &str, message: String| {
            errors.push(KeyError {
                key: Some(format!("config.{key}")),
                message,
            })
        };
        if let Some(file) = &self.identity_file
            && let Err(e) = std::fs::File::open(file)
        {
            error("identity_file", format!("cannot read {file}: {e}"));
        }
        if let Some(inventory) = &self.inventory
            && let Err(e) = hosts::read_hosts(inventory)
        {
            error("inventory", e);
        }
        if find_program(&self.ssh_bin).is_none() {
            error(
                "ssh_bin",
                format!(
                    "{} is not an executable file{} (Debian: apt-get install openssh-client)",
                    self.ssh_bin,
                    if self.ssh_bin.contains('/') {
                        ""
                    } else {
                        " in PATH"
                    }
                ),
            );
        }
        errors
    }
}

/// `program` as `Command` would run it: an absolute path, or the first executable file
/// of that name in `PATH`.
pub(super) fn find_program(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

fn string(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{} is not a string", kind(value)))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// An absolute path without control characters.
fn path(value: &Value) -> Result<String, String> {
    let path = string(value)?;
    if !path.starts_with('/') {
        return Err(format!(
            "{} is not an absolute path",
            crate::logsafe::clip(&path, 200)
        ));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{} holds a control character",
            crate::logsafe::clip(&path, 200)
        ));
    }
    Ok(path)
}

/// A path that goes into an `-o Key=Value` option, which ssh splits at whitespace and
/// quotes: none of those in it.
fn option_path(value: &Value) -> Result<String, String> {
    let path = path(value)?;
    if path
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\'))
    {
        return Err(format!(
            "{} holds whitespace or a quote, which ssh would split",
            crate::logsafe::clip(&path, 200)
        ));
    }
    Ok(path)
}

fn integer(value: &Value, min: u64, max: u64) -> Result<u64, String> {
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{} is not an integer from {min} to {max}",
            crate::logsafe::clip(&value.to_string(), 40)
        )),
    }
}

/// Options ssh takes from us, which an `ssh_options` entry may not set.
const OURS: [(&str, &str); 2] = [
    ("batchmode", "BatchMode is always yes"),
    ("connecttimeout", "set connect_timeout instead"),
];

/// A list of `Key=Value` strings, each one `-o` option.
fn ssh_options(value: &Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "{} is not a list of Key=Value strings",
            kind(value)
        ));
    };
    let mut options = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let item_error = |e: String| format!("item {}: {e}", n + 1);
        let option = string(item).map_err(item_error)?;
        let shown = crate::logsafe::clip(&option, 80);
        let key = option.split('=').next().unwrap_or("");
        let key_ok = key.starts_with(|c: char| c.is_ascii_alphabetic())
            && key.chars().all(|c| c.is_ascii_alphanumeric());
        if !key_ok || !option.contains('=') || option.chars().any(|c| c.is_control()) {
            return Err(item_error(format!(
                "{shown} is not one Key=Value option (a letter first, no line breaks)"
            )));
        }
        if let Some((_, why)) = OURS.iter().find(|(ours, _)| key.eq_ignore_ascii_case(ours)) {
            return Err(item_error(format!("{shown}: {why}")));
        }
        options.push(option);
    }
    Ok(options)
}
