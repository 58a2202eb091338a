//! Requests about jobs: the list with each job's state, one job in detail, its next
//! firings, starting one now (on all or some of its targets), and killing its runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{Executor, Job, JobEntry, Overlap, TargetType};
use crate::ipc::CallId;
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::{answer_with, failure, no_job, respond};
use crate::wire::admin::{AdminFailure, AdminResponse, JobDetail, JobInfo, JobState, JobSummary};
use crate::wire::db::DbRequest;
use crate::wire::db::RunFilter;
use crate::wire::db::calls;
use crate::wire::records::{Millis, RunId, RunRecord, RunState, Trigger};

/// Most fire times one request may ask for.
const MAX_UPCOMING: u32 = 100;
/// Runs a job's detail lists.
const LAST_RUNS: usize = 5;

pub(super) fn list(core: &mut Main, call: CallId, group: Option<String>, state: Option<JobState>) {
    core.db_call(
        DbRequest::LastRuns,
        answer_with::<calls::LastRuns>(call, move |core, last| listed(core, &last, group, state)),
    );
}

/// db's newest run of every job: the list, filtered.
fn listed(
    core: &Main,
    last: &BTreeMap<String, RunRecord>,
    group: Option<String>,
    state: Option<JobState>,
) -> AdminResponse {
    let mut jobs = summaries(core, last);
    jobs.retain(|j| {
        group.as_ref().is_none_or(|g| &j.info.group == g) && state.is_none_or(|s| j.state == s)
    });
    AdminResponse::Jobs {
        jobs,
        invalid_omitted: core.config.error_digest().invalid_omitted(),
    }
}

pub(super) fn detail(core: &mut Main, call: CallId, job: String, upcoming: u32) {
    if !core.config.jobs.contains_key(&job) {
        return failure(core, call, no_job(&job));
    }
    core.db_call(
        DbRequest::ListRuns(RunFilter {
            job: Some(job.clone()),
            limit: Some(LAST_RUNS),
            ..Default::default()
        }),
        answer_with::<calls::ListRuns>(call, move |core, runs| {
            detailed(core, &job, upcoming.min(MAX_UPCOMING), runs)
        }),
    );
}

/// db's last runs of the job: its detail.
fn detailed(core: &Main, name: &str, upcoming: u32, runs: Vec<RunRecord>) -> AdminResponse {
    // The job may have left the configuration while db was reading.
    let Some(entry) = core.config.jobs.get(name) else {
        return AdminResponse::Failure(no_job(name));
    };
    let mut last = BTreeMap::new();
    if let Some(newest) = runs.first() {
        last.insert(name.to_string(), newest.clone());
    }
    let Some(summary) = summaries(core, &last)
        .into_iter()
        .find(|s| s.info.name == name)
    else {
        return AdminResponse::Failure(no_job(name));
    };
    let next_runs = next_runs(core, entry, upcoming);
    AdminResponse::Job(Box::new(described(entry, summary, next_runs, runs)))
}

/// A job's detail from its configuration entry and what main and db know of it.
fn described(
    entry: &JobEntry,
    summary: JobSummary,
    next_runs: Vec<Millis>,
    last_runs: Vec<RunRecord>,
) -> JobDetail {
    let (config_json, errors) = match entry {
        JobEntry::Valid(job) => (Some(job.redacted_json().to_string()), Vec::new()),
        JobEntry::Invalid(bad) => (None, bad.shown_errors()),
    };
    JobDetail {
        summary,
        config: crate::roles::main::views::ui::render::cron_view(entry),
        config_json,
        errors,
        next_runs,
        last_runs,
    }
}

/// The next `upcoming` fire times of a job: the planned slot first (which may be in the
/// past while it fires), else — a disabled job has none — from now.
fn next_runs(core: &Main, entry: &JobEntry, upcoming: u32) -> Vec<Millis> {
    let Some(job) = entry.job() else {
        return Vec::new();
    };
    let planned = core.scheduler.next_of(&job.name);
    let from = planned.unwrap_or_else(chrono::Utc::now);
    let mut times: Vec<Millis> = planned.iter().map(|t| t.timestamp_millis()).collect();
    let rest = upcoming.saturating_sub(times.len() as u32) as usize;
    times.extend(
        job.schedule
            .upcoming(from, rest)
            .iter()
            .map(|t| t.timestamp_millis()),
    );
    times.truncate(upcoming as usize);
    times
}

/// `NextFirings`: answered at once from the configuration and the job control state.
pub(super) fn next_firings(
    core: &mut Main,
    call: CallId,
    job: &str,
    from: Option<Millis>,
    count: u32,
) {
    let resp = firings(core, job, from, count);
    respond(core, call, resp);
}

/// The next `count` firings of a configured job after `from` (default now).
fn firings(core: &Main, job: &str, from: Option<Millis>, count: u32) -> AdminResponse {
    let j = match valid_job(core, job) {
        Ok(j) => j,
        Err(f) => return AdminResponse::Failure(f),
    };
    if !j.enabled {
        return AdminResponse::Failure(AdminFailure::Invalid(format!(
            "job {job} has `enabled: false`: it never fires"
        )));
    }
    let from = match from {
        None => chrono::Utc::now(),
        Some(ms) => match chrono::DateTime::from_timestamp_millis(ms) {
            Some(t) => t,
            None => {
                return AdminResponse::Failure(AdminFailure::Invalid(format!(
                    "--from {ms} is out of range"
                )));
            }
        },
    };
    let count = count.clamp(1, crate::schedule::MAX_UPCOMING) as usize;
    let upcoming = j.schedule.upcoming(from, count);
    if upcoming.is_empty()
        && let Some(range) = j.schedule.range()
        && range.phase(from) == crate::schedule::RangePhase::Ended
    {
        let note = range.note(from).unwrap_or_default();
        return AdminResponse::Failure(AdminFailure::Invalid(format!(
            "job {job} has no next run: {note}"
        )));
    }
    AdminResponse::NextFirings(
        core.jobctl
            .account(
                j,
                &core.config.maintenance.windows,
                upcoming,
                chrono::Utc::now(),
            )
            .iter()
            .map(|t| t.timestamp_millis())
            .collect(),
    )
}

/// A configured job without errors, or why not.
fn valid_job<'a>(core: &'a Main, name: &str) -> Result<&'a Arc<Job>, AdminFailure> {
    match core.config.jobs.get(name) {
        None => Err(no_job(name)),
        Some(JobEntry::Invalid(bad)) => {
            let why = bad
                .errors
                .first()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "invalid".into());
            Err(AdminFailure::Invalid(format!(
                "job {name} is disabled by an error: {why}"
            )))
        }
        Some(JobEntry::Valid(job)) => Ok(job),
    }
}

/// Start `name` now; with `targets`, on those only: for `local` a subset of the job's
/// targets, for `salt` an explicit list of minions (run as a `list` target). Answered
/// with `Started` once the run is recorded (the run Workflow, `run/`).
pub(super) fn run_now(core: &mut Main, call: CallId, name: &str, targets: Option<Vec<String>>) {
    let job = match valid_job(core, name) {
        Ok(job) => Arc::clone(job),
        Err(f) => return failure(core, call, f),
    };
    let job = match targets {
        None => job,
        Some(targets) => match narrowed(&job, targets) {
            Ok(narrow) => Arc::new(narrow),
            Err(why) => return failure(core, call, AdminFailure::Invalid(why)),
        },
    };
    let refused = if core.flight.is_stopping() {
        Some("the daemon is stopping".to_string())
    } else if !job.enabled {
        // One rule for saltpeterctl, the API and /ws: `enabled: false` switches the job
        // off, run now included (docs/api.md).
        Some(format!(
            "job {name} is disabled (enabled: false in {}); enable it to run it",
            job.file.display()
        ))
    } else if core.global_maintenance() {
        Some(
            "global maintenance is on: no new runs start (saltpeterctl maintenance show)"
                .to_string(),
        )
    } else if job.overlap == Overlap::Forbid && core.job_busy(name) {
        Some(format!(
            "job {name} is still running and its overlap is `forbid`"
        ))
    } else {
        crate::roles::main::shell::throttle::job_queue_full(core, name)
    };
    if let Some(why) = refused {
        return failure(core, call, AdminFailure::Invalid(why));
    }
    core.queue_run(RunRequest {
        job,
        slot: None,
        trigger: Trigger::Manual,
        admin_call: Some(call),
        prestaged: false,
        reason: None,
    });
}

/// The job run on `targets` only (trimmed, each once).
fn narrowed(job: &Job, targets: Vec<String>) -> Result<Job, String> {
    let mut chosen: Vec<String> = Vec::new();
    for t in targets {
        let t = t.trim().to_string();
        if !t.is_empty() && !chosen.contains(&t) {
            chosen.push(t);
        }
    }
    if chosen.is_empty() {
        return Err("--targets names no target".into());
    }
    let mut job = job.clone();
    if job.executor == Executor::Local {
        if let Some(stranger) = chosen.iter().find(|t| !job.targets.contains(t)) {
            return Err(format!(
                "{stranger} is not a target of job {} (its targets: {})",
                job.name,
                job.targets.join(", ")
            ));
        }
    } else if job.executor.plugin().is_some() {
        // Every plugin understands a list (docs/executors.md).
        job.plugin_target_type = Some("list".to_string());
    } else {
        job.target_type = TargetType::List;
    }
    job.target_expr = chosen.join(",");
    job.targets = chosen;
    Ok(job)
}

/// Kill every run of `job` in flight (or only `only`), or only `machine` in them.
pub(super) fn kill_job(
    core: &mut Main,
    call: CallId,
    job: &str,
    machine: Option<&str>,
    only: Option<RunId>,
) {
    let runs: Vec<RunId> = core
        .runs()
        .filter(|r| r.job().name == job && only.is_none_or(|id| id == r.id()))
        .filter(|r| machine.is_none_or(|m| r.targets().contains_key(m)))
        .map(|r| r.id())
        .collect();
    if runs.is_empty() {
        let why = match machine {
            Some(m) => format!("no run of job {job} in flight has target {m}"),
            None if core.config.jobs.contains_key(job) => {
                format!("no run of job {job} is in flight")
            }
            None => format!("no job named {job} and no run of it in flight"),
        };
        return failure(core, call, AdminFailure::NotFound(why));
    }
    let mut reached = 0;
    for run in &runs {
        match crate::roles::main::shell::wrappers::sessions::kill(core, *run, machine) {
            Ok(n) => reached += n,
            Err(e) => log::warn!("kill of run {run} of {job}: {e}"),
        }
    }
    let ids: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
    let msg = format!(
        "kill sent to {reached} target(s) of {} run(s) of {job} ({})",
        runs.len(),
        ids.join(", ")
    );
    respond(core, call, AdminResponse::Done(msg));
}

/// Every configured job the list shows (the invalid ones within the bounds of
/// `config::ErrorDigest`), with its newest run from `last`.
fn job_infos(core: &Main, last: &BTreeMap<String, RunRecord>) -> Vec<JobInfo> {
    let digest = core.config.error_digest();
    core.config
        .jobs
        .values()
        .filter(|entry| digest.listed(entry))
        .map(|entry| {
            let name = entry.name().to_string();
            let last_run = last.get(&name);
            let (enabled, error) = match entry {
                JobEntry::Valid(j) => (j.enabled, None),
                JobEntry::Invalid(bad) => (false, Some(bad.error_line())),
            };
            JobInfo {
                paused: core.jobctl.paused_note(&name, chrono::Utc::now()),
                inactive: entry
                    .job()
                    .and_then(|j| j.schedule.range_note(chrono::Utc::now())),
                next_run: core.scheduler.next_of(&name).map(|t| t.timestamp_millis()),
                last_run: last_run.and_then(|r| r.slot.or(r.started)),
                last_result: last_run.map(|r| r.state),
                group: entry.group().to_string(),
                enabled,
                error,
                name,
            }
        })
        .collect()
}

/// The state `jobs` shows for a job, and its runs in flight.
fn job_state(core: &Main, entry: &JobEntry, last: Option<RunState>) -> (JobState, Vec<RunId>) {
    let running: Vec<RunId> = core
        .runs()
        .filter(|r| r.job().name == entry.name())
        .map(|r| r.id())
        .collect();
    let state = match entry {
        JobEntry::Invalid(_) => JobState::Invalid,
        JobEntry::Valid(_) if !running.is_empty() => JobState::Running,
        JobEntry::Valid(j) if !j.enabled => JobState::Disabled,
        JobEntry::Valid(j) if core.jobctl.paused(&j.name, chrono::Utc::now()) => JobState::Paused,
        JobEntry::Valid(_) if matches!(last, Some(RunState::Failed | RunState::Partial)) => {
            JobState::Failing
        }
        JobEntry::Valid(_) => JobState::Idle,
    };
    (state, running)
}

fn summaries(core: &Main, last: &BTreeMap<String, RunRecord>) -> Vec<JobSummary> {
    job_infos(core, last)
        .into_iter()
        .filter_map(|info| {
            let entry = core.config.jobs.get(&info.name)?;
            let (state, running) = job_state(core, entry, info.last_result);
            Some(JobSummary {
                info,
                state,
                running,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ui::CronEntryView;

    fn config(yaml: &str) -> crate::config::LoadedConfig {
        crate::config::check_yaml(yaml, chrono::Utc::now())
    }

    const JOBS: &str = "\
good:
  schedule: '0 */5 * * * *'
  executor: local
  targets: [alpha, beta]
  command: echo hi
  env: {API_KEY: hunter2}
minions:
  schedule: '@daily'
  executor: salt
  targets: 'web*'
  command: uptime
broken:
  schedule: '@daily'
  targets: alpha
";

    fn summary(entry: &JobEntry) -> JobSummary {
        let error = match entry {
            JobEntry::Valid(_) => None,
            JobEntry::Invalid(bad) => Some(
                bad.errors
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        };
        JobSummary {
            info: JobInfo {
                name: entry.name().to_string(),
                group: entry.group().to_string(),
                next_run: None,
                last_run: None,
                last_result: None,
                enabled: error.is_none(),
                error,
                paused: None,
                inactive: None,
            },
            state: JobState::Idle,
            running: Vec::new(),
        }
    }

    /// One detail serves both renderings: the configuration `saltpeterctl show` prints
    /// (redacted) and the UI's cron the API shows (schedule fields split out).
    #[test]
    fn a_detail_carries_the_configuration_for_show_and_the_api() {
        let loaded = config(JOBS);
        let entry = &loaded.jobs["good"];
        let detail = described(entry, summary(entry), Vec::new(), Vec::new());
        let shown: serde_json::Value =
            serde_json::from_str(detail.config_json.as_deref().unwrap_or("null"))
                .expect("config json");
        assert_eq!(shown["env"]["API_KEY"], "***");
        assert_eq!(shown["command"], "echo hi");
        assert!(!format!("{detail:?}").contains("hunter2"));
        let cron = crate::json::ui::cron_json(&detail.config);
        assert_eq!(cron["min"], "*/5");
        assert_eq!(cron["env"]["API_KEY"], "***");

        let entry = &loaded.jobs["broken"];
        let detail = described(entry, summary(entry), Vec::new(), Vec::new());
        assert!(matches!(detail.config, CronEntryView::Invalid { .. }));
        assert_eq!(detail.config_json, None);
        assert!(!detail.errors.is_empty(), "{detail:?}");
    }

    #[test]
    fn a_run_on_chosen_targets_takes_a_subset_or_a_minion_list() {
        let loaded = config(JOBS);
        let good = loaded.jobs["good"].job().expect("valid");
        let narrow = narrowed(good, vec![" beta ".into(), "beta".into()]).expect("subset");
        assert_eq!(narrow.targets, ["beta"]);
        assert_eq!(narrow.target_expr, "beta");
        let err = narrowed(good, vec!["alpha".into(), "gamma".into()]).unwrap_err();
        assert_eq!(
            err,
            "gamma is not a target of job good (its targets: alpha, beta)"
        );
        assert_eq!(
            narrowed(good, vec![" ".into()]).unwrap_err(),
            "--targets names no target"
        );
        let minions = loaded.jobs["minions"].job().expect("valid");
        let list = narrowed(minions, vec!["web1".into(), "db1".into()]).expect("list");
        assert_eq!(list.target_type, TargetType::List);
        assert_eq!(list.target_expr, "web1,db1");
    }
}
