//! A validated job: what the scheduler, the launcher and the API get for each job.
//!
//! `env` values may hold secrets, so `Debug` and the JSON view never show them.

use std::collections::BTreeMap;
use std::fmt;

use chrono_tz::Tz;

use super::types::{Executor, Missed, OutputLimit, Overlap, TargetType};
use crate::schedule::Schedule;

/// A valid job, ready to schedule.
#[derive(Clone)]
pub struct Job {
    pub name: String,
    /// The file name without its extension.
    /// Shared by the jobs of one file.
    pub group: std::sync::Arc<str>,
    /// Shared by the jobs of one file.
    pub file: std::sync::Arc<std::path::Path>,
    /// Line of the job's name in `file`.
    pub line: usize,
    pub schedule: Schedule,
    pub timezone: Tz,
    pub command: String,
    /// The targets as a list (a YAML list, or the expression split on commas).
    pub targets: Vec<String>,
    /// The target expression as given to Salt (a YAML list is joined with commas).
    pub target_expr: String,
    pub target_type: TargetType,
    /// A plugin executor's target type, as written (default `glob`); `None` for Salt
    /// and local jobs.
    pub plugin_target_type: Option<String>,
    pub executor: Executor,
    /// Line of the job's `executor` key (0: inherited from `saltpeter_config`).
    pub executor_line: usize,
    pub user: Option<String>,
    pub cwd: Option<String>,
    /// Never printed: `Debug` and [`Job::redacted_json`] show the values as `***`.
    pub env: BTreeMap<String, String>,
    /// `0` means no limit.
    pub timeout_s: u64,
    pub kill_grace_s: u64,
    pub number_of_targets: Option<usize>,
    pub batch_size: Option<usize>,
    pub overlap: Overlap,
    pub missed: Missed,
    pub missed_deadline_s: u64,
    pub splay_s: u64,
    pub enabled: bool,
    pub output_limit: OutputLimit,
    /// Job key, else `saltpeter_config.default_wrapper_path`; `None`: the built-in default.
    pub wrapper_path: Option<String>,
    /// Job key `saltpeter_server_host`, else `saltpeter_config.default_saltpeter_server_host`.
    pub server_host: Option<String>,
    /// The job's `notify` rules; `None`: `saltpeter_config.notify` applies.
    pub notify: Option<Vec<super::notify::NotifyRule>>,
    /// Extra attempts for a failed target (`retries`).
    pub retries: u32,
    /// Seconds between a failed attempt and the next (`retry_delay`).
    pub retry_delay_s: u64,
    /// Seconds an unreachable (255) target waits for its minion to come back
    /// (`retry_unreachable`); `0`: it is final at once.
    pub retry_unreachable_s: u64,
    /// Whether a suspended target's timeout keeps counting (`timeout_counts_suspended`,
    /// default true); with false its deadline moves by the time it was suspended.
    pub timeout_counts_suspended: bool,
    /// Resource limits of the command on its target (`nice`, `ionice`, `memory_max`,
    /// `cpu_quota`, `tasks_max`).
    pub limits: super::resources::Limits,
    /// `after: {job, on}`: also run when a run of another job ends (a chain).
    pub after: Option<After>,
    /// The job has a schedule of its own; a chained job without one has a schedule that
    /// never fires, and shows none.
    pub scheduled: bool,
}

/// Which outcomes of the upstream job's run start a chained run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainOn {
    /// The upstream run succeeded.
    Success,
    /// The upstream run failed or partly failed.
    Failure,
    /// Any end of the upstream run (not a skipped slot: nothing ran).
    Always,
}

impl ChainOn {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainOn::Success => "success",
            ChainOn::Failure => "failure",
            ChainOn::Always => "always",
        }
    }

    pub fn parse(text: &str) -> Result<ChainOn, String> {
        match text {
            "success" => Ok(ChainOn::Success),
            "failure" => Ok(ChainOn::Failure),
            "always" => Ok(ChainOn::Always),
            other => Err(format!(
                "`on` is one of success, failure, always, not `{other}`"
            )),
        }
    }
}

/// `after: {job: NAME, on: success|failure|always}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    pub job: String,
    pub on: ChainOn,
    /// Line of the `after` key (for the cycle diagnostic).
    pub line: usize,
    pub column: usize,
}

impl Job {
    /// The target type as written: a plugin's own word, else Salt's.
    pub fn target_type_word(&self) -> &str {
        self.plugin_target_type
            .as_deref()
            .unwrap_or(self.target_type.as_str())
    }

    /// `wrapper_path`, or the built-in [`super::saltpeter::DEFAULT_WRAPPER_PATH`].
    pub fn wrapper_path_or_default(&self) -> &str {
        self.wrapper_path
            .as_deref()
            .unwrap_or(super::saltpeter::DEFAULT_WRAPPER_PATH)
    }

    /// The job as JSON for the API and UI, with environment values replaced by `***`.
    pub fn redacted_json(&self) -> serde_json::Value {
        let env: serde_json::Map<String, serde_json::Value> = self
            .env
            .keys()
            .map(|k| (k.clone(), serde_json::Value::from("***")))
            .collect();
        serde_json::json!({
            "name": self.name,
            "group": &*self.group,
            "file": self.file.display().to_string(),
            "line": self.line,
            "schedule": self.scheduled.then(|| self.schedule.describe()),
            "after": self.after.as_ref().map(|a| serde_json::json!({
                "job": a.job,
                "on": a.on.as_str(),
            })),
            "timezone": self.timezone.name(),
            "active_from": self.schedule.range().and_then(|r| r.from_text.as_deref()),
            "active_until": self.schedule.range().and_then(|r| r.until_text.as_deref()),
            "command": self.command,
            "targets": self.targets,
            "target_expr": self.target_expr,
            "target_type": self.target_type_word(),
            "executor": self.executor.as_str(),
            "user": self.user,
            "cwd": self.cwd,
            "env": env,
            "timeout": self.timeout_s,
            "kill_grace": self.kill_grace_s,
            "number_of_targets": self.number_of_targets,
            "batch_size": self.batch_size,
            "overlap": self.overlap.as_str(),
            "missed": self.missed.as_str(),
            "missed_deadline": self.missed_deadline_s,
            "splay": self.splay_s,
            "enabled": self.enabled,
            "output_limit": {
                "head": self.output_limit.head_bytes,
                "tail": self.output_limit.tail_bytes,
            },
            "wrapper_path": self.wrapper_path,
            "saltpeter_server_host": self.server_host,
            "retries": self.retries,
            "retry_delay": self.retry_delay_s,
            "retry_unreachable": self.retry_unreachable_s,
            "timeout_counts_suspended": self.timeout_counts_suspended,
            "nice": self.limits.nice,
            "ionice": self.limits.ionice.map(|i| i.to_string()),
            "memory_max": self.limits.memory_max,
            "cpu_quota": self.limits.cpu_quota.map(|p| format!("{p}%")),
            "tasks_max": self.limits.tasks_max,
            "notify": self.notify.as_ref().map(|rules| {
                rules.iter().map(super::notify::NotifyRule::redacted_json).collect::<Vec<_>>()
            }),
        })
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: BTreeMap<&str, &str> = self.env.keys().map(|k| (k.as_str(), "***")).collect();
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("file", &self.file)
            .field("line", &self.line)
            .field("schedule", &self.schedule.describe())
            .field("timezone", &self.timezone)
            .field("command", &self.command)
            .field("targets", &self.targets)
            .field("target_expr", &self.target_expr)
            .field("target_type", &self.target_type)
            .field("executor", &self.executor)
            .field("user", &self.user)
            .field("cwd", &self.cwd)
            .field("env", &env)
            .field("timeout_s", &self.timeout_s)
            .field("kill_grace_s", &self.kill_grace_s)
            .field("number_of_targets", &self.number_of_targets)
            .field("batch_size", &self.batch_size)
            .field("overlap", &self.overlap)
            .field("missed", &self.missed)
            .field("missed_deadline_s", &self.missed_deadline_s)
            .field("splay_s", &self.splay_s)
            .field("enabled", &self.enabled)
            .field("output_limit", &self.output_limit)
            .field("wrapper_path", &self.wrapper_path)
            .field("server_host", &self.server_host)
            .field("notify", &self.notify)
            .field("retries", &self.retries)
            .field("retry_delay_s", &self.retry_delay_s)
            .field("retry_unreachable_s", &self.retry_unreachable_s)
            .field("timeout_counts_suspended", &self.timeout_counts_suspended)
            .field("limits", &self.limits)
            .field("after", &self.after)
            .field("scheduled", &self.scheduled)
            .finish()
    }
}
