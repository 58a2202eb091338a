//! The reader behind `read_job`: typed values out of a job's YAML nodes, each error and
//! warning a diagnostic at its file:line:column.

use super::diagnostic::{Diagnostic, Severity};
use super::types::Overlap;
use super::values::{self, Sink};
use super::yaml::{Node, NodeKind, Pos};
use crate::schedule::{CronFields, Schedule, ScheduleError};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::BTreeMap;

use super::job_keys::{ALLOW_OVERLAP_PHRASE, CRON_KEYS, JOB_KEYS, MAX_ENV_JSON};

pub(super) struct Reader<'s, 'f> {
    pub(super) job: &'s str,
    pub(super) sink: &'s mut Sink<'f>,
    pub(super) errors: Vec<Diagnostic>,
}

impl<'s, 'f> Reader<'s, 'f> {
    pub(super) fn error(&mut self, pos: Pos, message: String) {
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

    pub(super) fn warn(&mut self, pos: Pos, message: String) {
        self.sink
            .push(Severity::Warning, pos, Some(self.job), message);
    }

    /// Reads a value; on error records it at the value's position.
    pub(super) fn read<T>(
        &mut self,
        node: &Node,
        f: impl FnOnce(&Node) -> Result<T, String>,
    ) -> Option<T> {
        match f(node) {
            Ok(v) => Some(v),
            Err(message) => {
                self.error(node.pos, message);
                None
            }
        }
    }

    pub(super) fn number(
        &mut self,
        node: Option<&Node>,
        f: fn(&Node) -> Result<u64, String>,
    ) -> Option<u64> {
        node.and_then(|n| self.read(n, f))
    }

    pub(super) fn parsed<T>(
        &mut self,
        node: Option<&Node>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        node.and_then(|n| self.read(n, |n| values::string(n).and_then(|s| parse(s.trim()))))
    }

    pub(super) fn required<T>(
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
    pub(super) fn sort_keys<'n>(
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

    pub(super) fn schedule(
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

    /// `active_from` / `active_until` in the job's zone; `None` after an error (reported).
    pub(super) fn active_range(
        &mut self,
        keys: &BTreeMap<&str, &Node>,
        tz: Tz,
    ) -> Option<crate::schedule::ActiveRange> {
        let mut text = |key: &str| -> Result<Option<String>, ()> {
            match keys.get(key) {
                None => Ok(None),
                Some(n) => self
                    .read(n, |n| {
                        values::non_empty_string(n).map_err(|m| format!("`{key}`: {m}"))
                    })
                    .map(Some)
                    .ok_or(()),
            }
        };
        let from = text("active_from").ok()?;
        let until = text("active_until").ok()?;
        match super::active::range(from.as_deref(), until.as_deref(), tz) {
            Ok(range) => Some(range),
            Err((bound, message)) => {
                let key = match bound {
                    super::active::Bound::From => "active_from",
                    super::active::Bound::Until => "active_until",
                };
                let pos = keys.get(key).map_or(Pos::default(), |n| n.pos);
                self.error(pos, format!("job `{}`: {message}", self.job));
                None
            }
        }
    }

    pub(super) fn env(&mut self, node: &Node) -> Option<BTreeMap<String, String>> {
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

    pub(super) fn notify(&mut self, node: &Node) -> Vec<super::notify::NotifyRule> {
        let mut errors = Vec::new();
        let rules = super::notify::read_rules(node, &mut errors);
        for (pos, message) in errors {
            self.error(pos, message);
        }
        rules
    }

    pub(super) fn timeout(&mut self, keys: &BTreeMap<&str, &Node>) -> u64 {
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

    pub(super) fn overlap(&mut self, keys: &BTreeMap<&str, &Node>) -> Overlap {
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
