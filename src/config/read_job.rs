//! Reading one job's YAML mapping into a [`Job`].
//!
//! The mapping is read in two passes: first every key is sorted into known (kept), deprecated
//! (warned about, sometimes translated) and unknown (warned about, with the closest known key);
//! then each known key is read with its own type. Every problem is collected rather than
//! returned at the first, so `saltpeterctl config check` shows all of them at once. Any error
//! leaves the job listed but disabled; warnings never do.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Largest `env` (as JSON) a job may have: the wrapper accepts messages up to 1 MiB, and
/// the command and the rest of the job spec need room too.
pub(crate) const MAX_ENV_JSON: usize = 768 * 1024;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::job::Job;
use super::types::{Executor, Missed, OutputLimit, Overlap, TargetType};
use super::values::{self, Sink};
use super::yaml::{Node, NodeKind, Pos};
use super::{Diagnostic, Severity};
use crate::schedule::{CronFields, Schedule, ScheduleError};

/// The value of `allow_overlap` that made the original allow overlapping runs.
const ALLOW_OVERLAP_PHRASE: &str = "i know what i am doing!";

/// Keys a job may have (current and accepted-from-the-original).
pub(crate) const JOB_KEYS: &[&str] = &[
    "sec",
    "min",
    "hour",
    "dom",
    "mon",
    "dow",
    "year",
    "schedule",
    "timezone",
    "command",
    "targets",
    "target_type",
    "executor",
    "user",
    "cwd",
    "env",
    "timeout",
    "kill_grace",
    "number_of_targets",
    "batch_size",
    "overlap",
    "allow_overlap",
    "missed",
    "missed_deadline",
    "splay",
    "enabled",
    "output_limit",
    "wrapper_path",
    "saltpeter_server_host",
    "notify",
    "retries",
    "retry_delay",
    "retry_unreachable",
    "hard_timeout",
    "soft_timeout",
    "utc",
    "use_wrapper",
    "lockfile",
    "wrapper_loglevel",
    "wrapper_logdir",
    "group",
    "after",
];

const CRON_KEYS: [&str; 7] = ["sec", "min", "hour", "dom", "mon", "dow", "year"];

/// What a job inherits from `saltpeter_config`.
pub(crate) struct JobDefaults<'a> {
    pub(crate) timezone: Tz,
    pub(crate) executor: Executor,
    pub(crate) wrapper_path: Option<&'a str>,
    pub(crate) server_host: Option<&'a str>,
    pub(crate) now: DateTime<Utc>,
}

/// Reads one job. `Err` carries the job's errors (already also pushed to the sink).
pub(crate) fn read_job(
    name: &str,
    group: &str,
    name_pos: Pos,
    node: &Node,
    defaults: &JobDefaults<'_>,
    sink: &mut Sink<'_>,
) -> Result<Job, Vec<Diagnostic>> {
    let mut reader = Reader {
        job: name,
        sink,
        errors: Vec::new(),
    };
    let NodeKind::Map(pairs) = &node.kind else {
        reader.error(
            node.pos,
            format!(
                "job `{name}` must be a mapping of keys (min, hour, command, ...), found {}",
                node.describe()
            ),
        );
        return Err(reader.errors);
    };
    let keys = reader.sort_keys(pairs, group);
    let get = |k: &str| keys.get(k).copied();

    let timezone = get("timezone")
        .and_then(|n| reader.read(n, values::timezone))
        .unwrap_or(defaults.timezone);
    let after = get("after").and_then(|n| reader.read(n, read_after));
    // A chained job needs no schedule of its own; without one it only runs after its
    // upstream job.
    let has_schedule =
        keys.contains_key("schedule") || CRON_KEYS.iter().any(|k| keys.contains_key(k));
    let scheduled = has_schedule || after.is_none() && get("after").is_none();
    let schedule = if scheduled {
        reader.schedule(&keys, name_pos, timezone, defaults.now)
    } else {
        never_fires()
    };
    let command = reader.required(
        get("command"),
        "command",
        name_pos,
        values::non_empty_string,
    );
    let (targets, target_expr) = match reader.required(get("targets"), "targets", name_pos, targets)
    {
        Some((list, expr)) => (Some(list), expr),
        None => (None, String::new()),
    };
    let target_type = reader
        .parsed(get("target_type"), TargetType::parse)
        .unwrap_or_default();
    let executor = reader
        .parsed(get("executor"), Executor::parse)
        .unwrap_or(defaults.executor);
    let user = get("user")
        .and_then(|n| reader.read(n, values::optional_string))
        .flatten();
    let cwd = get("cwd")
        .and_then(|n| reader.read(n, values::optional_string))
        .flatten();
    let env = get("env").and_then(|n| reader.env(n)).unwrap_or_default();
    let timeout_s = reader.timeout(&keys);
    let kill_grace_s = reader
        .number(get("kill_grace"), values::seconds)
        .unwrap_or(10);
    let number_of_targets = count(reader.number(get("number_of_targets"), values::unsigned));
    let batch_size = count(reader.number(get("batch_size"), values::unsigned));
    let overlap = reader.overlap(&keys);
    let missed = reader
        .parsed(get("missed"), Missed::parse)
        .unwrap_or_default();
    let missed_deadline_s = reader
        .number(get("missed_deadline"), values::seconds)
        .unwrap_or(3600);
    let splay_s = reader.number(get("splay"), values::seconds).unwrap_or(0);
    let enabled = get("enabled")
        .and_then(|n| reader.read(n, values::boolean))
        .unwrap_or(true);
    let output_limit = get("output_limit")
        .and_then(|n| reader.read(n, OutputLimit::read))
        .unwrap_or_default();
    let wrapper_path = get("wrapper_path")
        .and_then(|n| reader.read(n, values::optional_string))
        .flatten()
        .or_else(|| defaults.wrapper_path.map(str::to_string));
    let server_host = get("saltpeter_server_host")
        .and_then(|n| reader.read(n, values::optional_string))
        .flatten()
        .or_else(|| defaults.server_host.map(str::to_string));
    let notify = get("notify").map(|n| reader.notify(n));
    let retries = reader
        .number(get("retries"), values::unsigned)
        .and_then(|n| match u32::try_from(n) {
            Ok(n) if n <= 100 => Some(n),
            _ => {
                if let Some(node) = get("retries") {
                    reader.error(node.pos, format!("`retries`: {n} is more than 100"));
                }
                None
            }
        })
        .unwrap_or(0);
    let retry_delay_s = reader
        .number(get("retry_delay"), values::seconds)
        .unwrap_or(10);
    if let Some(node) = get("retry_unreachable") {
        reader.warn(
            node.pos,
            "`retry_unreachable` has no effect yet: an unreachable target is recorded as 255 at once".to_string(),
        );
    }

    match (schedule, command, targets) {
        (Some(schedule), Some(command), Some(targets)) if reader.errors.is_empty() => Ok(Job {
            name: name.to_string(),
            group: group.to_string(),
            file: PathBuf::from(reader.sink.file),
            line: name_pos.line,
            schedule,
            timezone,
            command,
            targets,
            target_expr,
            target_type,
            executor,
            user,
            cwd,
            env,
            timeout_s,
            kill_grace_s,
            number_of_targets,
            batch_size,
            overlap,
            missed,
            missed_deadline_s,
            splay_s,
            enabled,
            output_limit,
            wrapper_path,
            server_host,
            notify,
            retries,
            retry_delay_s,
            after,
            scheduled,
        }),
        _ => Err(reader.errors),
    }
}

/// The schedule of a chained job without one: a year long past, so it never fires.
fn never_fires() -> Option<Schedule> {
    Schedule::from_expr("0 0 0 1 1 * 1970", Tz::UTC).ok()
}

/// `after: {job: NAME, on: success|failure|always}` (`on` defaults to success).
fn read_after(node: &Node) -> Result<super::job::After, String> {
    let NodeKind::Map(pairs) = &node.kind else {
        return Err(format!(
            "`after` must be a mapping such as {{job: backup, on: success}}, found {}",
            node.describe()
        ));
    };
    let mut job = None;
    let mut on = super::job::ChainOn::Success;
    for (key, value) in pairs {
        match key.scalar() {
            Some("job") => job = Some(values::non_empty_string(value)?.trim().to_string()),
            Some("on") => on = super::job::ChainOn::parse(values::string(value)?.trim())?,
            other => {
                return Err(format!(
                    "`after` takes `job` and `on`, not `{}`",
                    other.unwrap_or("?")
                ));
            }
        }
    }
    let job = job.ok_or_else(|| "`after` needs `job`: the job to run after".to_string())?;
    Ok(super::job::After {
        job,
        on,
        line: node.pos.line,
        column: node.pos.column,
    })
}

/// `0` (and absent) means "all", as in the original.
fn count(value: Option<u64>) -> Option<usize> {
    value
        .filter(|n| *n > 0)
        .and_then(|n| usize::try_from(n).ok())
}

fn targets(node: &Node) -> Result<(Vec<String>, String), String> {
    let list = values::string_list(node)?;
    if list.is_empty() {
        return Err("expected a target expression or a list of targets, found none".to_string());
    }
    let expr = match &node.kind {
        NodeKind::Seq(_) => list.join(","),
        _ => values::string(node)?.trim().to_string(),
    };
    Ok((list, expr))
}

struct Reader<'s, 'f> {
    job: &'s str,
    sink: &'s mut Sink<'f>,
    errors: Vec<Diagnostic>,
}

impl<'s, 'f> Reader<'s, 'f> {
    fn error(&mut self, pos: Pos, message: String) {
        let d = values::diagnostic(
            self.sink.file,
            Severity::Error,
            pos,
            Some(self.job),
            message,
        );
        self.errors.push(d.clone());
        self.sink.out.push(d);
    }

    fn warn(&mut self, pos: Pos, message: String) {
        self.sink
            .push(Severity::Warning, pos, Some(self.job), message);
    }

    /// Reads a value; on error records it at the value's position.
    fn read<T>(&mut self, node: &Node, f: impl FnOnce(&Node) -> Result<T, String>) -> Option<T> {
        match f(node) {
            Ok(v) => Some(v),
            Err(message) => {
                self.error(node.pos, message);
                None
            }
        }
    }

    fn number(&mut self, node: Option<&Node>, f: fn(&Node) -> Result<u64, String>) -> Option<u64> {
        node.and_then(|n| self.read(n, f))
    }

    fn parsed<T>(
        &mut self,
        node: Option<&Node>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        node.and_then(|n| self.read(n, |n| values::string(n).and_then(|s| parse(s.trim()))))
    }

    fn required<T>(
        &mut self,
        node: Option<&Node>,
        key: &str,
        name_pos: Pos,
        f: impl FnOnce(&Node) -> Result<T, String>,
    ) -> Option<T> {
        match node {
            Some(n) => self.read(n, f),
            None => {
                self.error(name_pos, format!("missing required key `{key}`"));
                None
            }
        }
    }

    /// Sorts the mapping's keys: known ones are returned, the rest are warned about.
    fn sort_keys<'n>(
        &mut self,
        pairs: &'n [(Node, Node)],
        group: &str,
    ) -> BTreeMap<&'n str, &'n Node> {
        let mut keys: BTreeMap<&str, &Node> = BTreeMap::new();
        let mut seen: BTreeMap<&str, Pos> = BTreeMap::new();
        for (key, value) in pairs {
            let Some(name) = key.scalar() else {
                self.warn(
                    key.pos,
                    format!(
                        "a job key must be a plain name, found {}; it is ignored",
                        key.describe()
                    ),
                );
                continue;
            };
            if let Some(first) = seen.insert(name, key.pos) {
                self.warn(
                    key.pos,
                    format!(
                        "key `{name}` is repeated (first at line {}); this later value is used",
                        first.line
                    ),
                );
            }
            match name {
                "soft_timeout" => self.warn(key.pos, "`soft_timeout` has no effect; use `timeout`".to_string()),
                "utc" => self.warn(key.pos, "`utc` has no effect: the fields are read in `timezone` (default: saltpeter_config.timezone, else UTC)".to_string()),
                "lockfile" => self.warn(key.pos, "`lockfile` has no effect: overlapping runs are prevented by the hub (see `overlap`)".to_string()),
                "wrapper_loglevel" | "wrapper_logdir" => self.warn(key.pos, format!("`{name}` has no effect: the wrapper sends its output to the hub")),
                "use_wrapper" => {
                    if values::boolean(value) != Ok(true) {
                        self.warn(key.pos, "`use_wrapper: false` (the original's Salt-only mode) is not supported; the job runs through the wrapper".to_string());
                    }
                }
                "group" => {
                    if value.scalar() != Some(group) {
                        self.warn(key.pos, format!("`group` is always the file name (`{group}`); this value is ignored"));
                    }
                }
                _ if JOB_KEYS.contains(&name) => {
                    keys.insert(name, value);
                }
                _ => {
                    let message = values::unknown_key_message("key", name, JOB_KEYS);
                    self.warn(key.pos, message);
                }
            }
        }
        keys
    }

    fn schedule(
        &mut self,
        keys: &BTreeMap<&str, &Node>,
        name_pos: Pos,
        tz: Tz,
        now: DateTime<Utc>,
    ) -> Option<Schedule> {
        let present: Vec<&str> = CRON_KEYS
            .iter()
            .copied()
            .filter(|k| keys.contains_key(k))
            .collect();
        let built = if let Some(expr_node) = keys.get("schedule") {
            if !present.is_empty() {
                self.error(expr_node.pos, format!("give either `schedule` or the fields (sec min hour dom mon dow year), not both; found `schedule` and `{}`", present.join("`, `")));
                return None;
            }
            let expr = self.read(expr_node, values::non_empty_string)?;
            (Schedule::from_expr(&expr, tz), expr_node.pos)
        } else {
            let missing: Vec<&str> = ["min", "hour", "dom", "mon", "dow"]
                .into_iter()
                .filter(|k| !keys.contains_key(k))
                .collect();
            if !missing.is_empty() {
                self.error(
                    name_pos,
                    format!(
                        "missing required key{} `{}` (or give `schedule`)",
                        if missing.len() > 1 { "s" } else { "" },
                        missing.join("`, `")
                    ),
                );
                return None;
            }
            let mut text = |key: &str, default: &str| -> Option<String> {
                match keys.get(key) {
                    Some(n) => self.read(n, |n| {
                        values::string(n).map_err(|m| {
                            format!("field `{key}`: {m}; quote cron fields, e.g. '*/5'")
                        })
                    }),
                    None => Some(default.to_string()),
                }
            };
            let fields = CronFields {
                sec: text("sec", "0")?,
                min: text("min", "")?,
                hour: text("hour", "")?,
                dom: text("dom", "")?,
                mon: text("mon", "")?,
                dow: text("dow", "")?,
                year: text("year", "*")?,
            };
            let first = CRON_KEYS
                .iter()
                .find_map(|k| keys.get(k))
                .map_or(name_pos, |n| n.pos);
            (Schedule::from_fields(&fields, tz), first)
        };
        let (result, pos) = built;
        let result = result.and_then(|s| s.check_fires(now).map(|()| s));
        match result {
            Ok(schedule) => Some(schedule),
            Err(err) => {
                let at = match &err {
                    ScheduleError::Field { field, .. } => keys.get(field).map_or(pos, |n| n.pos),
                    _ => pos,
                };
                self.error(at, err.to_string());
                None
            }
        }
    }

    fn env(&mut self, node: &Node) -> Option<BTreeMap<String, String>> {
        if node.is_null() {
            return Some(BTreeMap::new());
        }
        let NodeKind::Map(pairs) = &node.kind else {
            self.error(
                node.pos,
                format!(
                    "`env` must be a mapping of variable names to values, found {}",
                    node.describe()
                ),
            );
            return None;
        };
        let mut env = BTreeMap::new();
        for (key, value) in pairs {
            let name = match key.scalar() {
                Some(k) if !k.is_empty() && !k.contains(['=', '\0']) => k.to_string(),
                _ => {
                    self.error(key.pos, format!("environment variable name {} is not valid (empty, or contains `=` or NUL)", values::found(key)));
                    continue;
                }
            };
            let text = match &value.kind {
                NodeKind::Scalar { .. } if value.is_null() => {
                    self.warn(value.pos, format!("environment variable `{name}` has no value; it is set to the empty string"));
                    String::new()
                }
                // The original passed values through Python's str(): booleans became True/False.
                NodeKind::Scalar {
                    text,
                    quoted: false,
                } => match values::bool_word(text) {
                    Some(true) => "True".to_string(),
                    Some(false) => "False".to_string(),
                    None => text.clone(),
                },
                NodeKind::Scalar { text, .. } => text.clone(),
                _ => {
                    self.error(
                        value.pos,
                        format!(
                            "environment variable `{name}` must be a single value, found {}",
                            value.describe()
                        ),
                    );
                    continue;
                }
            };
            if text.contains('\0') {
                self.error(
                    value.pos,
                    format!("environment variable `{name}` contains a NUL byte"),
                );
                continue;
            }
            env.insert(name, text);
        }
        // The job reaches its wrapper in one `welcome` message (at most 1 MiB on the
        // wrapper's side); an `env` that cannot fit would make every wrapper reconnect
        // forever, so it is a configuration error here instead.
        let encoded = serde_json::to_string(&env).map_or(usize::MAX, |t| t.len());
        if encoded > MAX_ENV_JSON {
            self.error(
                node.pos,
                format!(
                    "`env` takes {encoded} bytes as JSON; a job's environment must fit in one \
                     wrapper message (at most {MAX_ENV_JSON} bytes)"
                ),
            );
            return None;
        }
        Some(env)
    }

    fn notify(&mut self, node: &Node) -> Vec<super::notify::NotifyRule> {
        let mut errors = Vec::new();
        let rules = super::notify::read_rules(node, &mut errors);
        for (pos, message) in errors {
            self.error(pos, message);
        }
        rules
    }

    fn timeout(&mut self, keys: &BTreeMap<&str, &Node>) -> u64 {
        match (keys.get("timeout"), keys.get("hard_timeout")) {
            (Some(t), hard) => {
                if let Some(h) = hard {
                    self.warn(
                        h.pos,
                        "`hard_timeout` is ignored because `timeout` is set".to_string(),
                    );
                }
                self.read(t, values::seconds).unwrap_or(3600)
            }
            (None, Some(h)) => {
                self.warn(
                    h.pos,
                    "`hard_timeout` is deprecated and read as `timeout`; rename it".to_string(),
                );
                self.read(h, values::seconds).unwrap_or(3600)
            }
            (None, None) => 3600,
        }
    }

    fn overlap(&mut self, keys: &BTreeMap<&str, &Node>) -> Overlap {
        let explicit = self.parsed(keys.get("overlap").copied(), Overlap::parse);
        let legacy = keys.get("allow_overlap").map(|node| {
            if node.scalar() == Some(ALLOW_OVERLAP_PHRASE) {
                Overlap::Allow
            } else {
                self.warn(node.pos, format!("`allow_overlap` only allows overlap with the exact value '{ALLOW_OVERLAP_PHRASE}'; use `overlap: allow` or `overlap: forbid`"));
                Overlap::Forbid
            }
        });
        match (explicit, legacy) {
            (Some(o), Some(l)) => {
                if o != l
                    && let Some(node) = keys.get("allow_overlap")
                {
                    self.warn(
                        node.pos,
                        format!(
                            "`allow_overlap` is ignored because `overlap: {}` is set",
                            o.as_str()
                        ),
                    );
                }
                o
            }
            (Some(o), None) | (None, Some(o)) => o,
            (None, None) => Overlap::Forbid,
        }
    }
}
