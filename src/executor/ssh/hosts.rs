//! Host specs and target expressions: what a machine name means to the ssh executor and
//! which machines a job's target names.
//!
//! A machine is a host spec as the operator wrote it (trimmed): `host`, `user@host`,
//! `host:port`, `user@host:port`, `[v6addr]:port` (`user@[v6addr]:port`), a bare IPv6
//! address. Each part is checked so it can only ever be a host, a user or a port on the
//! `ssh` command line: no whitespace, no control characters, no leading `-`, a port
//! from 1 to 65535.
//!
//! Target types: `list` (comma-separated specs), `glob` (shell-style patterns, separated
//! by commas, over the host lines of the inventory file of `config.inventory`), `file`
//! (the target is the path of a file of hosts). A file of hosts has one spec per line;
//! blank lines and `#` comments are skipped; every line is checked (errors at
//! `path:line`) and a file over [`MAX_HOSTS_FILE`] bytes is refused.

use std::io::Read;

/// One machine, as `ssh` is told to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostSpec {
    pub(super) user: Option<String>,
    /// A host name or an address (an IPv6 address without its brackets).
    pub(super) host: String,
    pub(super) port: Option<u16>,
}

/// The longest machine name the protocol allows.
const MAX_SPEC: usize = 255;

/// The largest file of hosts read.
pub(super) const MAX_HOSTS_FILE: u64 = 4 * 1024 * 1024;

/// The target types, as `describe` lists them.
pub(super) const TARGET_TYPES: [&str; 3] = ["list", "glob", "file"];

/// `text` (trimmed) as a host spec, or why it is not one.
pub(super) fn parse_spec(text: &str) -> Result<HostSpec, String> {
    let spec = text.trim();
    let shown = crate::logsafe::clip(spec, 80);
    if spec.is_empty() {
        return Err("an empty host".to_string());
    }
    if spec.chars().count() > MAX_SPEC {
        return Err(format!("{shown} is over {MAX_SPEC} characters"));
    }
    if let Some(c) = spec.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{shown} holds {:?}", c));
    }
    let (user, rest) = match spec.split_once('@') {
        Some((user, rest)) => {
            check_user(user).map_err(|e| format!("{shown}: {e}"))?;
            (Some(user.to_string()), rest)
        }
        None => (None, spec),
    };
    let (host, port) = split_host_port(rest).map_err(|e| format!("{shown}: {e}"))?;
    Ok(HostSpec {
        user,
        host: host.to_string(),
        port,
    })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address.
fn split_host_port(text: &str) -> Result<(&str, Option<u16>), String> {
    if let Some(inner) = text.strip_prefix('[') {
        let (addr, after) = inner
            .split_once(']')
            .ok_or_else(|| "an IPv6 address without its closing ]".to_string())?;
        check_v6(addr)?;
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':').ok_or_else(|| {
                format!("{after:?} after the address is not :PORT")
            })?)?),
        };
        return Ok((addr, port));
    }
    match text.matches(':').count() {
        0 => check_host(text).map(|()| (text, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            check_host(host)?;
            Ok((host, Some(parse_port(port)?)))
        }
        // A bare IPv6 address; with a port it needs its brackets.
        _ => check_v6(text).map(|()| (text, None)),
    }
}

/// A port from 1 to 65535.
pub(super) fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(port) if port > 0 && text.chars().all(|c| c.is_ascii_digit()) => Ok(port),
        _ => Err(format!(
            "port {:?} is not a number from 1 to 65535",
            crate::logsafe::clip(text, 20)
        )),
    }
}

/// A host name or an IPv4 address: letters, digits, `.`, `-`, `_`, not starting with `-`.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host name".to_string());
    }
    if host.starts_with('-') {
        return Err("a host may not start with -".to_string());
    }
    match host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        Some(c) => Err(format!("{c:?} cannot be part of a host name")),
        None => Ok(()),
    }
}

/// An IPv6 address (hex digits, `:` and `.`, a `%zone`).
fn check_v6(addr: &str) -> Result<(), String> {
    let (addr, zone) = addr.split_once('%').unwrap_or((addr, ""));
    let good = addr.contains(':')
        && addr
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        && zone
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if good {
        Ok(())
    } else {
        Err(format!(
            "{} is not an IPv6 address",
            crate::logsafe::clip(addr, 60)
        ))
    }
}

/// A user name: letters, digits, `.`, `-`, `_`, not starting with `-`.
pub(super) fn check_user(user: &str) -> Result<(), String> {
    if user.is_empty() {
        return Err("an empty user name".to_string());
    }
    if user.starts_with('-') {
        return Err("a user name may not start with -".to_string());
    }
    match user
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        Some(c) => Err(format!("{c:?} cannot be part of a user name")),
        None => Ok(()),
    }
}

/// How a job's target is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TargetType {
    List,
    Glob,
    File,
}

impl TargetType {
    pub(super) fn parse(word: &str) -> Result<TargetType, String> {
        match word {
            "list" => Ok(TargetType::List),
            "glob" => Ok(TargetType::Glob),
            "file" => Ok(TargetType::File),
            other => Err(format!(
                "the ssh executor reads target types {}, not {}",
                TARGET_TYPES.join(", "),
                crate::logsafe::clip(other, 40)
            )),
        }
    }
}

/// Why a target names no machines: at `key` (`target`, `target_type`,
/// `config.inventory`), `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TargetError {
    pub(super) key: &'static str,
    pub(super) message: String,
}

fn at(key: &'static str) -> impl Fn(String) -> TargetError {
    move |message| TargetError { key, message }
}

/// The machines `target` names, each once, in the order written (an inventory's order
/// for a glob).
pub(super) fn resolve(
    target: &str,
    target_type: &str,
    inventory: Option<&str>,
) -> Result<Vec<String>, TargetError> {
    let machines = match TargetType::parse(target_type).map_err(at("target_type"))? {
        TargetType::List => {
            let mut machines = Vec::new();
            for (n, item) in target.split(',').enumerate() {
                if item.trim().is_empty() {
                    continue;
                }
                parse_spec(item).map_err(|e| at("target")(format!("item {}: {e}", n + 1)))?;
                machines.push(item.trim().to_string());
            }
            machines
        }
        TargetType::File => read_hosts(target.trim()).map_err(at("target"))?,
        TargetType::Glob => {
            let patterns = glob_patterns(target).map_err(at("target"))?;
            let Some(inventory) = inventory else {
                return Err(at("target_type")(
                    "target type glob matches the hosts of an inventory file, and \
                     config.inventory names none (target_type: list takes host names)"
                        .to_string(),
                ));
            };
            read_hosts(inventory)
                .map_err(at("config.inventory"))?
                .into_iter()
                .filter(|line| patterns.iter().any(|p| glob_matches_host(p, line)))
                .collect()
        }
    };
    let mut seen = std::collections::HashSet::new();
    Ok(machines
        .into_iter()
        .filter(|m| seen.insert(m.clone()))
        .collect())
}

/// The comma-separated patterns of a glob target, each checked.
fn glob_patterns(target: &str) -> Result<Vec<&str>, String> {
    let patterns: Vec<&str> = target
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if patterns.is_empty() {
        return Err("an empty glob".to_string());
    }
    for pattern in &patterns {
        check_glob(pattern)?;
    }
    Ok(patterns)
}

/// The host lines of the file at `path` (absolute), each checked.
pub(super) fn read_hosts(path: &str) -> Result<Vec<String>, String> {
    let shown = crate::logsafe::clip(path, 200);
    if !path.starts_with('/') {
        return Err(format!("{shown} is not an absolute path"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_HOSTS_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_HOSTS_FILE {
        return Err(format!("{shown} is over {MAX_HOSTS_FILE} bytes"));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    let mut hosts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        parse_spec(line).map_err(|e| format!("{shown}:{}: {e}", n + 1))?;
        hosts.push(line.to_string());
    }
    Ok(hosts)
}

/// Whether a host line matches `pattern`: the line as written or its host alone.
fn glob_matches_host(pattern: &str, line: &str) -> bool {
    glob_match(pattern, line) || parse_spec(line).is_ok_and(|spec| glob_match(pattern, &spec.host))
}

/// A shell-style pattern: `*`, `?`, `[set]` (ranges, `!` or `^` negates), `\` escapes.
pub(super) fn check_glob(pattern: &str) -> Result<(), String> {
    if let Some(c) = pattern
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "glob {} holds {c:?}",
            crate::logsafe::clip(pattern, 80)
        ));
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 == chars.len() => {
                return Err(format!("glob {pattern} ends with a lone \\"));
            }
            '\\' => i += 2,
            '[' => match set_end(&chars, i) {
                Some(end) => i = end + 1,
                None => return Err(format!("glob {pattern} has a [ without its ]")),
            },
            _ => i += 1,
        }
    }
    Ok(())
}

/// The index of the `]` closing the set that opens at `open`.
fn set_end(chars: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(chars.get(i), Some('!' | '^')) {
        i += 1;
    }
    // A `]` first in the set is one of its members.
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        if chars[i] == ']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `text` matches the whole of `pattern` (see [`check_glob`]; an unclosed `[`
/// matches itself).
pub(super) fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // The classic backtracking over the last `*`: linear in practice, no recursion.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => match set_end(&p, pi) {
                Some(end) => set_contains(&p[pi + 1..end], t[ti]).then_some(end + 1 - pi),
                None => (t[ti] == '[').then_some(1),
            },
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == t[ti]).then_some(2),
            Some(&c) => (c == t[ti]).then_some(1),
            None => None,
        };
        match (step, star) {
            (Some(width), _) => {
                pi += width;
                ti += 1;
            }
            (None, Some((sp, st))) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether the set body `set` (between `[` and `]`) holds `c`.
fn set_contains(set: &[char], c: char) -> bool {
    let (negated, set) = match set.first() {
        Some('!' | '^') => (true, &set[1..]),
        _ => (false, set),
    };
    let mut found = false;
    let mut i = 0;
    while i < set.len() {
        if i + 2 < set.len() && set[i + 1] == '-' {
            found |= set[i] <= c && c <= set[i + 2];
            i += 3;
        } else {
            found |= set[i] == c;
            i += 1;
        }
    }
    found != negated
}
