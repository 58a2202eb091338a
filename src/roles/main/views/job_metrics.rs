//! What `/metrics` says of each job, for alerts like "job X has not succeeded lately":
//! runs by final state, last success and failure, last duration and lateness, targets by
//! how they ended, missed slots.
//!
//! Cardinality is bounded by jobs × states: never a label per run or per target. The
//! series are kept in memory since start (as `saltpeter_runs_total`) and rendered for
//! the jobs configured now, so a job removed from the configuration drops out of
//! `/metrics` and comes back with its counts if it is configured again.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use crate::metrics::{header, label_value};
use crate::wire::records::{Millis, RunState, TargetReason, TargetRecord, TargetState, Trigger};

/// How a target of a run ended, as `/metrics` counts it (`result` label): a bounded set,
/// the target reasons plus `succeeded`/`failed` for a command that exited and `skipped`
/// for a target left out by maintenance.
pub(crate) const TARGET_RESULTS: &[&str] = &[
    "succeeded",
    "failed",
    "timeout",
    "killed",
    "lost",
    "wrapper_failed",
    "unreachable",
    "gave_up",
    "memory_limit",
    "canceled",
    "skipped",
];

/// The `result` of a target at its run's end; `None` for one that never settled (a run
/// refused at its slot, for one).
pub(crate) fn target_result(t: &TargetRecord) -> Option<&'static str> {
    match t.state {
        TargetState::SkippedMaintenance => Some("skipped"),
        TargetState::Finished => Some(match t.reason {
            None | Some(TargetReason::Exit) if t.exit_code == Some(0) => "succeeded",
            None | Some(TargetReason::Exit) => "failed",
            Some(reason) => reason.as_str(),
        }),
        _ => None,
    }
}

/// How late a scheduled run really started: its first target's start after the slot
/// (seconds, early is 0). `None` for runs not started by the schedule (manual, chained,
/// caught up: those count as missed) or whose targets never started.
pub(crate) fn run_lateness(
    slot: Option<Millis>,
    trigger: Trigger,
    targets: &[TargetRecord],
) -> Option<f64> {
    let slot = slot.filter(|_| trigger == Trigger::Schedule)?;
    let first = targets.iter().filter_map(|t| t.started).min()?;
    Some((first - slot).max(0) as f64 / 1000.0)
}

/// One job's series.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct JobSeries {
    runs_by_state: BTreeMap<&'static str, u64>,
    /// Unix milliseconds of the last run that ended succeeded, and of the last that
    /// ended failed, partial or canceled.
    last_success: Option<i64>,
    last_failure: Option<i64>,
    /// Seconds from the start to the end of its last run that was not skipped.
    last_duration: Option<f64>,
    /// Seconds from the slot to the first target's start, of its last scheduled run.
    last_lateness: Option<f64>,
    targets_by_result: BTreeMap<&'static str, u64>,
    slots_missed: u64,
}

/// One ended run, as the per-job series take it.
pub(crate) struct EndedRun<'a> {
    pub state: RunState,
    pub duration_s: Option<f64>,
    pub now_ms: Millis,
    pub lateness_s: Option<f64>,
    pub targets: &'a [TargetRecord],
}

/// Every job's series since start (also of jobs no longer configured: see the module
/// note).
#[derive(Debug, Default)]
pub(crate) struct PerJob {
    jobs: HashMap<String, JobSeries>,
}

impl PerJob {
    /// Count a run of `job` that ended.
    pub(crate) fn run_ended(&mut self, job: &str, run: &EndedRun) {
        let series = self.jobs.entry(job.to_string()).or_default();
        *series.runs_by_state.entry(run.state.as_str()).or_insert(0) += 1;
        match run.state {
            RunState::Succeeded => series.last_success = Some(run.now_ms),
            RunState::Skipped => {}
            _ => series.last_failure = Some(run.now_ms),
        }
        if run.state != RunState::Skipped && run.duration_s.is_some() {
            series.last_duration = run.duration_s;
        }
        if run.lateness_s.is_some() {
            series.last_lateness = run.lateness_s;
        }
        for result in run.targets.iter().filter_map(target_result) {
            *series.targets_by_result.entry(result).or_insert(0) += 1;
        }
    }

    /// `n` slots of `job` were not acted on in time.
    pub(crate) fn slots_missed(&mut self, job: &str, n: u64) {
        if n > 0 {
            self.jobs.entry(job.to_string()).or_default().slots_missed += n;
        }
    }

    /// The series of the jobs named by `configured`, in the text format. The label is
    /// `job_name`: `job` is the label Prometheus gives every scraped series (a `job`
    /// here would arrive renamed). A series with nothing to say yet is absent.
    pub(crate) fn render<'a>(
        &self,
        configured: impl Iterator<Item = &'a String> + Clone,
        out: &mut String,
    ) {
        let jobs: Vec<(&String, &JobSeries)> = configured
            .filter_map(|name| self.jobs.get(name).map(|s| (name, s)))
            .collect();
        type Counts = fn(&JobSeries) -> &BTreeMap<&'static str, u64>;
        let counters: [(&str, &str, &str, Counts); 2] = [
            (
                "saltpeter_job_runs_total",
                "state",
                "Runs of each job ended since start, by final state (states it never ended in are absent).",
                |s| &s.runs_by_state,
            ),
            (
                "saltpeter_job_targets_total",
                "result",
                "Targets of each job's runs ended since start, by how they ended (results never seen are absent).",
                |s| &s.targets_by_result,
            ),
        ];
        for (metric, label, help, counts) in counters {
            header(out, metric, "counter", help);
            for (name, series) in &jobs {
                for (value, n) in counts(series) {
                    let _ = writeln!(
                        out,
                        "{metric}{{job_name=\"{}\",{label}=\"{value}\"}} {n}",
                        label_value(name)
                    );
                }
            }
        }
        header(
            out,
            "saltpeter_job_slots_missed_total",
            "counter",
            "Slots of each job not acted on in time since start (the daemon down, or the loop \
             more than the grace late), skipped or caught up.",
        );
        for (name, series) in jobs.iter().filter(|(_, s)| s.slots_missed > 0) {
            let _ = writeln!(
                out,
                "saltpeter_job_slots_missed_total{{job_name=\"{}\"}} {}",
                label_value(name),
                series.slots_missed
            );
        }
        type Pick = fn(&JobSeries) -> Option<f64>;
        let gauges: [(&str, &str, Pick); 4] = [
            (
                "saltpeter_job_last_success_timestamp_seconds",
                "When a run of the job last ended succeeded (unix seconds; absent: not since start).",
                |s| s.last_success.map(|ms| ms as f64 / 1000.0),
            ),
            (
                "saltpeter_job_last_failure_timestamp_seconds",
                "When a run of the job last ended failed, partial or canceled (unix seconds).",
                |s| s.last_failure.map(|ms| ms as f64 / 1000.0),
            ),
            (
                "saltpeter_job_last_duration_seconds",
                "How long the job's last run that was not skipped took.",
                |s| s.last_duration,
            ),
            (
                "saltpeter_job_last_lateness_seconds",
                "How long after its slot the job's last scheduled run started its first target.",
                |s| s.last_lateness,
            ),
        ];
        for (metric, help, pick) in gauges {
            header(out, metric, "gauge", help);
            for (name, series) in &jobs {
                if let Some(value) = pick(series) {
                    let _ = writeln!(
                        out,
                        "{metric}{{job_name=\"{}\"}} {value}",
                        label_value(name)
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(state: TargetState, reason: Option<TargetReason>, code: Option<i32>) -> TargetRecord {
        TargetRecord {
            machine: "m".into(),
            state,
            reason,
            exit_code: code,
            started: Some(10_500),
            ended: None,
            suspended: false,
            waiting: None,
            limits: None,
            server: None,
        }
    }

    #[test]
    fn target_results_are_the_bounded_set() {
        use TargetState::*;
        let cases = [
            (
                target(Finished, Some(TargetReason::Exit), Some(0)),
                Some("succeeded"),
            ),
            (target(Finished, None, Some(0)), Some("succeeded")),
            (
                target(Finished, Some(TargetReason::Exit), Some(2)),
                Some("failed"),
            ),
            (
                target(Finished, Some(TargetReason::Lost), Some(253)),
                Some("lost"),
            ),
            (
                target(Finished, Some(TargetReason::Unreachable), Some(255)),
                Some("unreachable"),
            ),
            (
                target(Finished, Some(TargetReason::GaveUp), Some(255)),
                Some("gave_up"),
            ),
            (target(SkippedMaintenance, None, None), Some("skipped")),
            (target(Pending, None, None), None),
            (target(Running, None, None), None),
        ];
        for (t, want) in cases {
            assert_eq!(target_result(&t), want, "{t:?}");
        }
        // Every reason has its own result, in the set.
        for reason in TargetReason::ALL
            .iter()
            .filter(|r| **r != TargetReason::Exit)
        {
            let got = target_result(&target(Finished, Some(*reason), Some(1)));
            assert_eq!(got, Some(reason.as_str()));
            assert!(TARGET_RESULTS.contains(&reason.as_str()), "{reason}");
        }
    }

    #[test]
    fn lateness_is_the_first_start_after_a_scheduled_slot() {
        let mut late = target(TargetState::Finished, None, Some(0));
        late.started = Some(12_000);
        let early = target(TargetState::Finished, None, Some(0));
        let targets = [late, early];
        assert_eq!(
            run_lateness(Some(10_000), Trigger::Schedule, &targets),
            Some(0.5)
        );
        assert_eq!(
            run_lateness(Some(11_000), Trigger::Schedule, &targets),
            Some(0.0)
        );
        assert_eq!(run_lateness(Some(10_000), Trigger::Catchup, &targets), None);
        assert_eq!(run_lateness(None, Trigger::Manual, &targets), None);
        assert_eq!(run_lateness(Some(10_000), Trigger::Schedule, &[]), None);
    }

    #[test]
    fn per_job_series_count_and_render_for_configured_jobs_only() {
        let mut per_job = PerJob::default();
        let targets = [
            target(TargetState::Finished, Some(TargetReason::Exit), Some(0)),
            target(TargetState::Finished, Some(TargetReason::Lost), Some(253)),
        ];
        let run = EndedRun {
            state: RunState::Partial,
            duration_s: Some(3.0),
            now_ms: 20_000,
            lateness_s: Some(0.5),
            targets: &targets,
        };
        per_job.run_ended("a", &run);
        per_job.run_ended("a", &run);
        per_job.run_ended("gone", &run);
        per_job.slots_missed("a", 3);
        per_job.slots_missed("b", 0);
        let configured = ["a".to_string(), "b".to_string()];
        let mut out = String::new();
        per_job.render(configured.iter(), &mut out);
        for line in [
            "saltpeter_job_runs_total{job_name=\"a\",state=\"partial\"} 2",
            "saltpeter_job_targets_total{job_name=\"a\",result=\"succeeded\"} 2",
            "saltpeter_job_targets_total{job_name=\"a\",result=\"lost\"} 2",
            "saltpeter_job_slots_missed_total{job_name=\"a\"} 3",
            "saltpeter_job_last_failure_timestamp_seconds{job_name=\"a\"} 20",
            "saltpeter_job_last_lateness_seconds{job_name=\"a\"} 0.5",
            "# TYPE saltpeter_job_slots_missed_total counter",
        ] {
            assert!(out.contains(line), "missing `{line}` in:\n{out}");
        }
        assert!(
            !out.contains("\"gone\""),
            "a job not configured is not shown:\n{out}"
        );
        assert!(
            !out.contains("\"b\""),
            "a job with nothing counted is absent:\n{out}"
        );
    }
}
