//! The configuration's executor plugins checked (docs/executors.md): each plugin a job
//! names must be found, and its `check_config` must accept its configuration and its
//! jobs. A job whose plugin is missing or refuses it is disabled with the reason at the
//! job's `executor` key (or its name when the executor is inherited), like any other
//! configuration error; an error of the executor's own configuration disables each of
//! its jobs.
//!
//! Finding the plugins is part of every load ([`check_found`], a `stat` per plugin).
//! Running `check_config` is not: it starts a process, so the daemon's main asks
//! `blocking` to run each [`CheckOrder`] and applies the answers ([`apply_check`])
//! before the configuration takes effect; start-up and `saltpeterctl config check`, with
//! no loop to keep, run them in turn here ([`run_checks`]).

use std::collections::BTreeMap;
use std::path::Path;

use super::diagnostic::{Diagnostic, Severity};
use super::entries::{InvalidJob, JobEntry};
use super::executors::find_plugin;
use super::job::Job;
use super::saltpeter::SaltpeterConfig;
use super::values::diagnostic;
use super::yaml::Pos;
use crate::executor::protocol::{self, CheckConfigArgs, ConfigError, JobRef, Op};
use crate::executor::spec::PluginSpec;

/// One plugin's `check_config` to run: the plugin and its request line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckOrder {
    pub spec: PluginSpec,
    pub request: String,
}

/// The jobs of each plugin executor, by plugin name.
fn plugin_jobs(jobs: &BTreeMap<String, JobEntry>) -> BTreeMap<String, Vec<&Job>> {
    let mut by_plugin: BTreeMap<String, Vec<&Job>> = BTreeMap::new();
    for job in jobs.values().filter_map(JobEntry::job) {
        if let Some(name) = job.executor.plugin() {
            by_plugin.entry(name.to_string()).or_default().push(job);
        }
    }
    by_plugin
}

/// Disable `job` with `message` (an error at its `executor` key).
fn disable(
    jobs: &mut BTreeMap<String, JobEntry>,
    out: &mut Vec<Diagnostic>,
    name: &str,
    message: String,
) {
    let Some(JobEntry::Valid(job)) = jobs.get(name) else {
        return;
    };
    let line = if job.executor_line > 0 {
        job.executor_line
    } else {
        job.line
    };
    let d = diagnostic(
        &job.file,
        Severity::Error,
        Pos { line, column: 1 },
        Some(name),
        message,
    );
    out.push(d.clone());
    let invalid = JobEntry::Invalid(Box::new(InvalidJob {
        name: name.to_string(),
        group: job.group.to_string(),
        file: job.file.to_path_buf(),
        line: job.line,
        errors: vec![d],
    }));
    jobs.insert(name.to_string(), invalid);
}

/// The jobs of a configuration and its diagnostics, which the checks change.
pub(crate) type Jobs = BTreeMap<String, JobEntry>;

/// Jobs whose plugin cannot be found (or is not executable) are disabled.
pub(crate) fn check_found(
    jobs: &mut Jobs,
    sp: &SaltpeterConfig,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let missing: Vec<(String, String)> = plugin_jobs(jobs)
        .into_iter()
        .filter_map(|(plugin, jobs)| {
            let why = find_plugin(&plugin, &sp.executors, &sp.executor_path).err()?;
            Some(jobs.into_iter().map(move |j| (j.name.clone(), why.clone())))
        })
        .flatten()
        .collect();
    for (name, why) in missing {
        disable(jobs, diagnostics, &name, why);
    }
    sort(diagnostics);
}

fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
}

/// The `check_config` of every plugin the valid jobs use.
pub(crate) fn check_orders(jobs: &Jobs, sp: &SaltpeterConfig) -> Vec<CheckOrder> {
    plugin_jobs(jobs)
        .into_iter()
        .filter_map(|(plugin, jobs)| {
            let spec = find_plugin(&plugin, &sp.executors, &sp.executor_path).ok()?;
            let args = CheckConfigArgs {
                jobs: jobs
                    .iter()
                    .map(|j| JobRef {
                        name: j.name.clone(),
                        target: j.target_expr.clone(),
                        target_type: j.plugin_target_type.clone().unwrap_or_default(),
                    })
                    .collect(),
            };
            let args = serde_json::to_value(args).unwrap_or_default();
            let request = protocol::request_within(
                Op::CheckConfig,
                &plugin,
                &spec.config_value(),
                args,
                spec.deadline(Op::CheckConfig, 0),
            );
            Some(CheckOrder { spec, request })
        })
        .collect()
}

/// What one plugin's `check_config` answered (or why it did not), applied: its jobs
/// named in an error are disabled, every one of them for an error of its own
/// configuration or a plugin that did not answer.
pub(crate) fn apply_check(
    jobs: &mut Jobs,
    diagnostics: &mut Vec<Diagnostic>,
    plugin: &str,
    answer: Result<Vec<ConfigError>, String>,
) {
    let names: Vec<String> = plugin_jobs(jobs)
        .remove(plugin)
        .unwrap_or_default()
        .into_iter()
        .map(|j| j.name.clone())
        .collect();
    let mut disabled: Vec<(String, String)> = Vec::new();
    match answer {
        Err(why) => {
            let message = format!("executor `{plugin}`: check_config failed: {why}");
            disabled.extend(names.iter().map(|n| (n.clone(), message.clone())));
        }
        Ok(errors) => {
            for e in errors {
                let at = e
                    .key
                    .as_deref()
                    .map(|k| format!(" ({k})"))
                    .unwrap_or_default();
                let message = format!(
                    "executor `{plugin}`{at}: {}",
                    crate::logsafe::clip(&e.message, 400)
                );
                match e.job {
                    Some(job) if names.contains(&job) => disabled.push((job, message)),
                    Some(_) => {}
                    None => disabled.extend(names.iter().map(|n| (n.clone(), message.clone()))),
                }
            }
        }
    }
    for (name, message) in disabled {
        disable(jobs, diagnostics, &name, message);
    }
    sort(diagnostics);
}

/// A `check_config` reading: the errors, or why there is no answer.
pub fn read_check(raw: &protocol::RawOutput) -> Result<Vec<ConfigError>, String> {
    if let Some(why) = crate::executor::spec::pinned_refusal(raw.code, &raw.stderr) {
        return Err(why);
    }
    let reading = protocol::read_output(Op::CheckConfig, raw);
    let result = reading.outcome()?;
    result.errors.clone().ok_or_else(|| {
        "protocol breach bad_result: a check_config result without `errors`".to_string()
    })
}

/// Run every plugin's `check_config` in turn and apply the answers (start-up and
/// `saltpeterctl config check`; each bounded by its deadline). `daemon_exe` runs pinned
/// plugins (`--exec-pinned`).
pub(crate) fn run_checks(
    jobs: &mut Jobs,
    sp: &SaltpeterConfig,
    diagnostics: &mut Vec<Diagnostic>,
    daemon_exe: &Path,
) {
    for order in check_orders(jobs, sp) {
        let deadline = order.spec.deadline(Op::CheckConfig, 0);
        let answer = crate::executor::runner::run(
            order.spec.command(daemon_exe),
            order.request.as_bytes(),
            deadline,
        )
        .map_err(|e| e.to_string())
        .and_then(|raw| {
            if !raw.stderr.is_empty() {
                log::info!(
                    "executor {} said: {}",
                    order.spec.name,
                    crate::logsafe::clip(&String::from_utf8_lossy(&raw.stderr), 2000)
                );
            }
            read_check(&raw)
        });
        apply_check(jobs, diagnostics, &order.spec.name, answer);
    }
}
