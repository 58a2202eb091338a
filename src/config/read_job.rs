//! Reading one job's YAML mapping into a [`Job`].
//!
//! The mapping is read in two passes: first every key is sorted into known (kept), deprecated
//! (warned about, sometimes translated) and unknown (warned about, with the closest known key);
//! then each known key is read with its own type. Every problem is collected rather than
//! returned at the first, so `saltpeterctl config check` shows all of them at once. Any error
//! leaves the job listed but disabled; warnings never do.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::diagnostic::Diagnostic;
use super::job::Job;
use super::job_keys::CRON_KEYS;
use super::job_reader::Reader;
use super::types::{Executor, Missed, OutputLimit, TargetType};
use super::values::{self, Sink};
use super::yaml::{Node, NodeKind, Pos};
use crate::schedule::Schedule;

/// What a job inherits from `saltpeter_config`.
pub(crate) struct JobDefaults<'a> {
    pub(crate) timezone: Tz,
    pub(crate) executor: Executor,
    pub(crate) wrapper_path: Option<&'a str>,
    pub(crate) server_host: Option<&'a str>,
    pub(crate) now: DateTime<Utc>,
}

/// Reads one job. `Err` carries the job's errors (already also pushed to the sink).
/// `group` and `file` are shared by the jobs of the file (`file` is the sink's).
pub(crate) fn read_job(
    name: &str,
    group: &std::sync::Arc<str>,
    file: &std::sync::Arc<std::path::Path>,
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
    let schedule = match reader.active_range(&keys, timezone) {
        Some(range) => {
            if range.phase(defaults.now) == crate::schedule::RangePhase::Ended
                && let Some(node) = get("active_until")
            {
                let note = range.note(defaults.now).unwrap_or_default();
                reader.warn(node.pos, format!("{note} (manual runs still work)"));
            }
            schedule.map(|s| s.with_range(range))
        }
        None => None,
    };
    let command = reader.required(
        get("command"),
        "command",
        name_pos,
        values::non_empty_string,
    );
    let (targets, target_expr) = match reader.required(get("targets"), "targets", name_pos, targets)
    {
        Some((list, expr)) if get("targets").is_some_and(|n| plain_targets(&mut reader, n)) => {
            (Some(list), expr)
        }
        Some(_) | None => (None, String::new()),
    };
    let executor = reader
        .parsed(get("executor"), Executor::parse)
        .unwrap_or_else(|| defaults.executor.clone());
    let executor_line = get("executor").map_or(0, |n| n.pos.line);
    // A plugin's target types are its own (`check_config` judges them); Salt's words
    // are checked here.
    let (target_type, plugin_target_type) = if executor.plugin().is_some() {
        let word = get("target_type").and_then(|n| reader.read(n, plugin_target_word));
        (
            TargetType::default(),
            Some(word.unwrap_or_else(|| "glob".to_string())),
        )
    } else {
        let salt = reader
            .parsed(get("target_type"), TargetType::parse)
            .unwrap_or_default();
        (salt, None)
    };
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
    let retry_unreachable_s = reader
        .number(get("retry_unreachable"), |node| {
            let s = super::windows::duration(node)?;
            if s > MAX_RETRY_UNREACHABLE_S {
                return Err(format!("`retry_unreachable`: {s} s is longer than 7 days"));
            }
            Ok(s)
        })
        .unwrap_or(0);
    let timeout_counts_suspended = get("timeout_counts_suspended")
        .and_then(|n| reader.read(n, values::boolean))
        .unwrap_or(true);
    let limits = super::limits::read_limits(get, &mut reader);

    match (schedule, command, targets) {
        (Some(schedule), Some(command), Some(targets)) if reader.errors.is_empty() => Ok(Job {
            name: name.to_string(),
            group: std::sync::Arc::clone(group),
            file: std::sync::Arc::clone(file),
            line: name_pos.line,
            schedule,
            timezone,
            command,
            targets,
            target_expr,
            target_type,
            plugin_target_type,
            executor,
            executor_line,
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
            retry_unreachable_s,
            timeout_counts_suspended,
            limits,
            after,
            scheduled,
        }),
        _ => Err(reader.errors),
    }
}

/// Longest `retry_unreachable` window (7 days).
const MAX_RETRY_UNREACHABLE_S: u64 = 7 * 86_400;

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

/// Whether every target of `node` (a list, or one expression) can be written as it is in
/// the log, an event and on a terminal: one holding a control, escape or bidi character
/// (a local target name is a machine name everywhere; a Salt expression is never one)
/// is an error at its own line.
fn plain_targets(reader: &mut Reader<'_, '_>, node: &Node) -> bool {
    let items: Vec<&Node> = match &node.kind {
        NodeKind::Seq(items) => items.iter().collect(),
        _ => vec![node],
    };
    let mut plain = true;
    for item in items {
        if item
            .scalar()
            .is_some_and(|text| text.chars().any(crate::logsafe::needs_escape))
        {
            reader.error(
                item.pos,
                format!(
                    "target {} holds a control, escape or bidi character; a target must be \
                     printable as it is",
                    values::found(item)
                ),
            );
            plain = false;
        }
    }
    plain
}

/// A plugin executor's `target_type`: a word of 1 to 32 of a-z, 0-9 and `_`.
fn plugin_target_word(node: &super::yaml::Node) -> Result<String, String> {
    let word = values::non_empty_string(node)?.trim().to_ascii_lowercase();
    if word.len() <= 32
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        Ok(word)
    } else {
        Err(format!(
            "`{}` is not a target type (1 to 32 of a-z, 0-9 and _)",
            crate::logsafe::clip(&word, 40)
        ))
    }
}
