//! What main measures for `/metrics`, and the rendering of all of the daemon's metrics
//! (db reports its commit latency to main; the hub adds its own connection counts).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::Main;
use crate::metrics::{DURATION_BUCKETS, Histogram, LATENCY_BUCKETS, header, label_value};
use crate::wire::records::RunState;

pub struct MainMetrics {
    runs_by_state: BTreeMap<&'static str, u64>,
    run_duration: Histogram,
    lateness: Histogram,
    /// Salt batch launches: the salt call to its answer.
    launch: Histogram,
    output_bytes: u64,
    output_frames: u64,
    /// The latest histogram db reported.
    pub db_commit: Option<Histogram>,
    /// Per job (rendered for the jobs configured now: jobs × states series at most).
    per_job: std::collections::HashMap<String, JobSeries>,
}

/// What `/metrics` says of one job, for alerts like "job X has not succeeded lately".
#[derive(Default)]
struct JobSeries {
    runs_by_state: BTreeMap<&'static str, u64>,
    /// Unix milliseconds of the last run that ended succeeded, and of the last that
    /// ended failed, partial or canceled.
    last_success: Option<i64>,
    last_failure: Option<i64>,
    /// Seconds from the start to the end of its last run that was not skipped.
    last_duration: Option<f64>,
}

impl Default for MainMetrics {
    fn default() -> Self {
        MainMetrics {
            runs_by_state: BTreeMap::new(),
            run_duration: Histogram::new(DURATION_BUCKETS),
            lateness: Histogram::new(LATENCY_BUCKETS),
            launch: Histogram::new(DURATION_BUCKETS),
            output_bytes: 0,
            output_frames: 0,
            db_commit: None,
            per_job: std::collections::HashMap::new(),
        }
    }
}

impl MainMetrics {
    pub fn run_ended(&mut self, job: &str, state: RunState, duration_s: Option<f64>, now_ms: i64) {
        *self.runs_by_state.entry(state.as_str()).or_insert(0) += 1;
        if let Some(d) = duration_s
            && state != RunState::Skipped
        {
            self.run_duration.observe(d);
        }
        let series = self.per_job.entry(job.to_string()).or_default();
        *series.runs_by_state.entry(state.as_str()).or_insert(0) += 1;
        match state {
            RunState::Succeeded => series.last_success = Some(now_ms),
            RunState::Skipped => {}
            _ => series.last_failure = Some(now_ms),
        }
        if state != RunState::Skipped && duration_s.is_some() {
            series.last_duration = duration_s;
        }
    }

    /// How late a slot was acted on (milliseconds; early is 0).
    pub fn observe_lateness(&mut self, ms: i64) {
        self.lateness.observe(ms.max(0) as f64 / 1000.0);
    }

    /// One salt batch launch took this long.
    pub fn observe_launch(&mut self, took: std::time::Duration) {
        self.launch.observe(took.as_secs_f64());
    }

    pub fn output(&mut self, bytes: usize) {
        self.output_bytes += bytes as u64;
        self.output_frames += 1;
    }
}

/// main's metrics in the Prometheus text format.
pub fn render(core: &Main) -> String {
    let m = &core.views.ui.metrics;
    let mut out = String::new();
    header(
        &mut out,
        "saltpeter_runs_total",
        "counter",
        "Runs ended since start, by final state.",
    );
    for state in RunState::ALL.iter().filter(|s| s.is_final()) {
        let n = m.runs_by_state.get(state.as_str()).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "saltpeter_runs_total{{state=\"{}\"}} {n}",
            label_value(state.as_str())
        );
    }
    render_per_job(core, &mut out);
    header(
        &mut out,
        "saltpeter_run_duration_seconds",
        "histogram",
        "Time from a run's start to its end.",
    );
    m.run_duration
        .render("saltpeter_run_duration_seconds", "", &mut out);
    header(
        &mut out,
        "saltpeter_schedule_lateness_seconds",
        "histogram",
        "How late scheduled slots were acted on (go sent, or launched).",
    );
    m.lateness
        .render("saltpeter_schedule_lateness_seconds", "", &mut out);
    header(
        &mut out,
        "saltpeter_salt_launch_seconds",
        "histogram",
        "Salt batch launches: the one cmd.run_all publish of a batch, call to answer.",
    );
    m.launch
        .render("saltpeter_salt_launch_seconds", "", &mut out);
    header(
        &mut out,
        "saltpeter_salt_launch_publishes_total",
        "counter",
        "Salt launch publishes (one per round and distinct set of runs) since start.",
    );
    let _ = writeln!(
        out,
        "saltpeter_salt_launch_publishes_total {}",
        core.rounds.publishes
    );
    header(
        &mut out,
        "saltpeter_wrapper_deployments_total",
        "counter",
        "Wrapper deployments to a minion since start (one per minion and build).",
    );
    let _ = writeln!(
        out,
        "saltpeter_wrapper_deployments_total {}",
        core.fleet.deployments_total()
    );
    header(
        &mut out,
        "saltpeter_prestage_lead_seconds",
        "gauge",
        "How far ahead of its slot each salt job is launched (the cap until measured).",
    );
    let leads = core.leads();
    for (name, entry) in &core.config.jobs {
        if let Some(job) = entry.job_ref()
            && job.executor == crate::config::Executor::Salt
        {
            let lead = leads.of(job).num_milliseconds() as f64 / 1000.0;
            let _ = writeln!(
                out,
                "saltpeter_prestage_lead_seconds{{job=\"{}\"}} {lead}",
                label_value(name)
            );
        }
    }
    header(
        &mut out,
        "saltpeter_wrappers_connected",
        "gauge",
        "Wrapper sessions bound to a target now.",
    );
    let _ = writeln!(
        out,
        "saltpeter_wrappers_connected {}",
        core.flight.sessions.len()
    );
    header(
        &mut out,
        "saltpeter_runs_in_flight",
        "gauge",
        "Runs recorded and not finished.",
    );
    let _ = writeln!(out, "saltpeter_runs_in_flight {}", core.flight.runs.len());
    header(
        &mut out,
        "saltpeter_output_bytes_total",
        "counter",
        "Output bytes received from wrappers (resends included).",
    );
    let _ = writeln!(out, "saltpeter_output_bytes_total {}", m.output_bytes);
    header(
        &mut out,
        "saltpeter_output_frames_total",
        "counter",
        "Output frames received from wrappers (resends included).",
    );
    let _ = writeln!(out, "saltpeter_output_frames_total {}", m.output_frames);
    header(
        &mut out,
        "saltpeter_jobs",
        "gauge",
        "Jobs in the configuration, valid or not.",
    );
    let _ = writeln!(out, "saltpeter_jobs {}", core.config.jobs.len());
    header(
        &mut out,
        "saltpeter_config_errors",
        "gauge",
        "Errors in the configuration now.",
    );
    let errors = core
        .config
        .diagnostics
        .iter()
        .filter(|d| d.severity == crate::config::Severity::Error)
        .count();
    let _ = writeln!(out, "saltpeter_config_errors {errors}");
    header(
        &mut out,
        "saltpeter_db_commit_seconds",
        "histogram",
        "Time from the start of a database batch transaction to its commit.",
    );
    match &m.db_commit {
        Some(h) => h.render("saltpeter_db_commit_seconds", "", &mut out),
        None => Histogram::new(LATENCY_BUCKETS).render("saltpeter_db_commit_seconds", "", &mut out),
    }
    render_ha(core, &mut out);
    out
}

/// The leader lease, when the database is shared (docs/ha.md): this server's role, and
/// which server leads as far as this one knows.
/// The per-job series, for the jobs configured now. The label is `job_name`: `job` is
/// the label Prometheus gives every scraped series (a `job` here would arrive renamed).
fn render_per_job(core: &Main, out: &mut String) {
    let per_job = &core.views.ui.metrics.per_job;
    header(
        out,
        "saltpeter_job_runs_total",
        "counter",
        "Runs of each job ended since start, by final state (states it never ended in are absent).",
    );
    for name in core.config.jobs.keys() {
        let Some(series) = per_job.get(name) else {
            continue;
        };
        for (state, n) in &series.runs_by_state {
            let _ = writeln!(
                out,
                "saltpeter_job_runs_total{{job_name=\"{}\",state=\"{state}\"}} {n}",
                label_value(name)
            );
        }
    }
    type Pick = fn(&JobSeries) -> Option<f64>;
    let gauges: [(&str, &str, Pick); 3] = [
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
    ];
    for (metric, help, pick) in gauges {
        header(out, metric, "gauge", help);
        for name in core.config.jobs.keys() {
            if let Some(value) = per_job.get(name).and_then(pick) {
                let _ = writeln!(
                    out,
                    "{metric}{{job_name=\"{}\"}} {value}",
                    label_value(name)
                );
            }
        }
    }
}

fn render_ha(core: &Main, out: &mut String) {
    let ha = &core.ha;
    if !ha.shared {
        return;
    }
    header(
        out,
        "saltpeter_ha_leader",
        "gauge",
        "1 while this server holds the leader lease.",
    );
    let server = label_value(&ha.server);
    let _ = writeln!(
        out,
        "saltpeter_ha_leader{{server=\"{server}\",role=\"{}\"}} {}",
        ha.role(),
        u8::from(ha.leader)
    );
    header(
        out,
        "saltpeter_ha_lease_holder",
        "gauge",
        "The server holding the leader lease, as this server last read it.",
    );
    if let Some(holder) = &ha.holder {
        let _ = writeln!(
            out,
            "saltpeter_ha_lease_holder{{server=\"{}\"}} 1",
            label_value(holder)
        );
    }
    header(
        out,
        "saltpeter_ha_takeovers_total",
        "counter",
        "Times this server took the leader lease.",
    );
    let _ = writeln!(out, "saltpeter_ha_takeovers_total {}", ha.takeovers);
}
