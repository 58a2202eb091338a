//! `saltpeter_maintenance.windows`: maintenance windows on a calendar.
//!
//! A window is either recurring (a cron `schedule` for its start plus a `duration`) or
//! one-off (`start` and `end`), read in its `timezone` (default `saltpeter_config.timezone`
//! is not known here, so UTC). Its scope is the whole fleet, or the machines matching
//! `machines` (globs with `*` and `?`), and every job or only the jobs of `groups`. Its
//! `policy` says what becomes of a slot inside it: `skip` (recorded as skipped with the
//! window's name) or `defer` (run once when the window ends). When a window is open is
//! computed in `roles/main/shell/windows.rs`; this module only reads and checks the keys, each
//! problem a diagnostic at the key's line.

use std::path::{Path, PathBuf};

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::diagnostic::{Diagnostic, Severity};
use super::values::{self, Sink};
use super::yaml::{Node, NodeKind};
use crate::schedule::Schedule;

/// Keys of one window.
const WINDOW_KEYS: &[&str] = &[
    "name", "schedule", "duration", "start", "end", "timezone", "machines", "groups", "policy",
];

/// A window may last at most this long (a year): longer is a typo, not a window.
const MAX_DURATION_S: u64 = 366 * 24 * 3600;

/// What becomes of a slot inside a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowPolicy {
    /// Recorded as skipped, reason `maintenance window NAME`.
    Skip,
    /// Run once when the window ends.
    Defer,
}

impl WindowPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowPolicy::Skip => "skip",
            WindowPolicy::Defer => "defer",
        }
    }
}

/// When a window is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowTime {
    /// Opens at every firing of `schedule`, for `duration_s` seconds of real time.
    Every { schedule: Schedule, duration_s: u64 },
    /// Open once, from `start` (inclusive) to `end` (exclusive).
    Once {
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    },
}

/// One maintenance window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub name: String,
    pub when: WindowTime,
    pub timezone: Tz,
    /// Machine globs; empty: the whole fleet.
    pub machines: Vec<String>,
    /// Job groups (file names); empty: every job.
    pub groups: Vec<String>,
    pub policy: WindowPolicy,
    pub file: PathBuf,
    pub line: usize,
}

impl Window {
    /// Whether the window's scope is the whole fleet (not some machines).
    pub fn fleet_wide(&self) -> bool {
        self.machines.is_empty()
    }

    /// Whether the window concerns jobs of `group`.
    pub fn covers_group(&self, group: &str) -> bool {
        self.groups.is_empty() || self.groups.iter().any(|g| g == group)
    }

    /// Whether the window concerns `machine`.
    pub fn covers_machine(&self, machine: &str) -> bool {
        self.machines.iter().any(|g| glob_match(g, machine))
    }
}

/// `*` matches any run of characters, `?` one character; everything else itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A duration: seconds as a number, or `90s`, `30m`, `2h`, `1d`, `1h30m`.
pub(crate) fn duration(node: &Node) -> Result<u64, String> {
    if let Ok(n) = values::unsigned(node) {
        return Ok(n);
    }
    let text = values::string(node)?;
    let bad = || {
        format!(
            "expected a duration such as 90s, 30m, 2h, 1d or 1h30m (or seconds), found `{text}`"
        )
    };
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() || total == 0 && text.trim().is_empty() {
        return Err(bad());
    }
    Ok(total)
}

/// A local date and time (`2026-03-29 02:00`, seconds optional) in `tz`, or an RFC 3339
/// instant.
fn instant(node: &Node, tz: Tz) -> Result<DateTime<Utc>, String> {
    let text = values::non_empty_string(node)?;
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let naive = super::active::local_date_time(text).ok_or_else(|| {
        format!(
            "expected a date and time such as 2026-03-29 02:00 (read in the window's \
                 timezone) or an RFC 3339 instant, found `{text}`"
        )
    })?;
    match tz.from_local_datetime(&naive) {
        chrono::LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        // A time repeated by a fall-back change: its first occurrence.
        chrono::LocalResult::Ambiguous(first, _) => Ok(first.with_timezone(&Utc)),
        chrono::LocalResult::None => Err(format!(
            "`{text}` does not exist in {tz} (skipped by a daylight saving change)"
        )),
    }
}

/// Reads the `windows` list of one `saltpeter_maintenance` section; problems go to `sink`.
pub(crate) fn read_windows(node: &Node, file: &Path, out: &mut Vec<Diagnostic>) -> Vec<Window> {
    let mut sink = Sink { file, out };
    let NodeKind::Seq(items) = &node.kind else {
        if !node.is_null() {
            sink.push(
                Severity::Error,
                node.pos,
                None,
                format!(
                    "`saltpeter_maintenance.windows` must be a list of windows, found {}",
                    node.describe()
                ),
            );
        }
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| match read_window(item, file) {
            Ok(w) => Some(w),
            Err(errors) => {
                sink.out.extend(errors);
                None
            }
        })
        .collect()
}

/// One window, or every problem with it (the window is then not used).
fn read_window(node: &Node, file: &Path) -> Result<Window, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut error = |pos, message: String| {
        errors.push(values::diagnostic(
            file,
            Severity::Error,
            pos,
            None,
            format!("maintenance window: {message}"),
        ));
    };
    let NodeKind::Map(pairs) = &node.kind else {
        error(
            node.pos,
            format!(
                "a window must be a mapping (name, schedule and duration, or start and end), \
                 found {}",
                node.describe()
            ),
        );
        return Err(errors);
    };
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.scalar() == Some(key))
            .map(|(_, v)| v)
    };
    for (key, _) in pairs {
        match key.scalar() {
            Some(k) if WINDOW_KEYS.contains(&k) => {}
            other => error(
                key.pos,
                values::unknown_key_message("key", other.unwrap_or("?"), WINDOW_KEYS),
            ),
        }
    }
    let name = match get("name").map(values::non_empty_string) {
        Some(Ok(n)) => Some(n.trim().to_string()),
        Some(Err(m)) => {
            error(
                get("name").map_or(node.pos, |n| n.pos),
                format!("`name`: {m}"),
            );
            None
        }
        None => {
            error(node.pos, "missing `name`".to_string());
            None
        }
    };
    let timezone = match get("timezone").map(values::timezone) {
        None => Tz::UTC,
        Some(Ok(tz)) => tz,
        Some(Err(m)) => {
            error(get("timezone").map_or(node.pos, |n| n.pos), m);
            Tz::UTC
        }
    };
    let when = match (get("schedule"), get("duration"), get("start"), get("end")) {
        (Some(s), Some(d), None, None) => {
            let schedule = values::non_empty_string(s)
                .and_then(|e| Schedule::from_expr(&e, timezone).map_err(|e| e.to_string()));
            let duration = duration(d).and_then(|n| match n {
                0 => Err("`duration` must be longer than 0".to_string()),
                n if n > MAX_DURATION_S => Err(format!(
                    "`duration` of {n} s is longer than a year; give start and end instead"
                )),
                n => Ok(n),
            });
            match (schedule, duration) {
                (Ok(schedule), Ok(duration_s)) => Some(WindowTime::Every {
                    schedule,
                    duration_s,
                }),
                (sched, dur) => {
                    if let Err(m) = sched {
                        error(s.pos, format!("`schedule`: {m}"));
                    }
                    if let Err(m) = dur {
                        error(get("duration").map_or(node.pos, |n| n.pos), m);
                    }
                    None
                }
            }
        }
        (None, None, Some(s), Some(e)) => match (instant(s, timezone), instant(e, timezone)) {
            (Ok(start), Ok(end)) if end > start => Some(WindowTime::Once { start, end }),
            (Ok(_), Ok(_)) => {
                error(e.pos, "`end` must be after `start`".to_string());
                None
            }
            (a, b) => {
                if let Err(m) = a {
                    error(s.pos, format!("`start`: {m}"));
                }
                if let Err(m) = b {
                    error(e.pos, format!("`end`: {m}"));
                }
                None
            }
        },
        _ => {
            error(
                node.pos,
                "give either `schedule` and `duration`, or `start` and `end`".to_string(),
            );
            None
        }
    };
    let list = |key: &str, error: &mut dyn FnMut(super::yaml::Pos, String)| match get(key)
        .map(values::string_list)
    {
        None => Vec::new(),
        Some(Ok(l)) => l,
        Some(Err(m)) => {
            error(
                get(key).map_or(node.pos, |n| n.pos),
                format!("`{key}`: {m}"),
            );
            Vec::new()
        }
    };
    let machines = list("machines", &mut error);
    let groups = list("groups", &mut error);
    let policy = match get("policy").map(values::string) {
        None => WindowPolicy::Skip,
        Some(Ok(p)) if p.trim() == "skip" => WindowPolicy::Skip,
        Some(Ok(p)) if p.trim() == "defer" => WindowPolicy::Defer,
        Some(Ok(p)) => {
            error(
                get("policy").map_or(node.pos, |n| n.pos),
                format!("`policy` is skip or defer, not `{p}`"),
            );
            WindowPolicy::Skip
        }
        Some(Err(m)) => {
            error(
                get("policy").map_or(node.pos, |n| n.pos),
                format!("`policy`: {m}"),
            );
            WindowPolicy::Skip
        }
    };
    match (name, when) {
        (Some(name), Some(when)) if errors.is_empty() => Ok(Window {
            name,
            when,
            timezone,
            machines,
            groups,
            policy,
            file: file.to_path_buf(),
            line: node.pos.line,
        }),
        _ => Err(errors),
    }
}
