//! What main measures for `/metrics`, and the rendering of all of the daemon's metrics
//! (db reports its commit latency to main; the hub adds its own connection counts).

use crate::roles::main::notify::{DELIVERY_RESULTS, Outbox};
use crate::roles::main::state::views::MainMetrics;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::metrics::{DURATION_BUCKETS, Histogram, LATENCY_BUCKETS, header, label_value};
use crate::roles::main::rules::job_metrics::{EndedRun, PerJob, TARGET_RESULTS, target_result};
use crate::roles::main::state::Main;
use crate::wire::records::RunState;

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
            per_job: PerJob::default(),
            targets_by_result: BTreeMap::new(),
            slots_missed: 0,
        }
    }
}

impl MainMetrics {
    pub(crate) fn run_ended(&mut self, job: &str, run: &EndedRun) {
        *self.runs_by_state.entry(run.state.as_str()).or_insert(0) += 1;
        if let Some(d) = run.duration_s
            && run.state != RunState::Skipped
        {
            self.run_duration.observe(d);
        }
        for result in run.targets.iter().filter_map(target_result) {
            *self.targets_by_result.entry(result).or_insert(0) += 1;
        }
        self.per_job.run_ended(job, run);
    }

    /// `n` slots of `job` were not acted on in time (skipped or caught up).
    pub(crate) fn slots_missed(&mut self, job: &str, n: u64) {
        self.slots_missed += n;
        self.per_job.slots_missed(job, n);
    }

    /// How late a slot was acted on (milliseconds; early is 0).
    pub(crate) fn observe_lateness(&mut self, ms: i64) {
        self.lateness.observe(ms.max(0) as f64 / 1000.0);
    }

    /// One salt batch launch took this long.
    pub(crate) fn observe_launch(&mut self, took: std::time::Duration) {
        self.launch.observe(took.as_secs_f64());
    }

    pub(crate) fn output(&mut self, bytes: usize) {
        self.output_bytes += bytes as u64;
        self.output_frames += 1;
    }
}

/// main's metrics in the Prometheus text format.
pub(crate) fn render(core: &Main) -> String {
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
    m.per_job.render(core.config.jobs.keys(), &mut out);
    render_watch(m, core.notify.outbox(), &mut out);
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
    let _ = writeln!(out, "saltpeter_runs_in_flight {}", core.runs_in_flight());
    header(
        &mut out,
        "saltpeter_targets_suspended",
        "gauge",
        "Targets of runs in flight suspended by an operator.",
    );
    // The targets in flight, counted once for both gauges.
    let (suspended, throttled) =
        core.runs()
            .flat_map(|r| r.targets.values())
            .fold((0, 0), |(s, q), t| {
                (
                    s + usize::from(t.suspended()),
                    q + usize::from(t.is_throttled()),
                )
            });
    let _ = writeln!(out, "saltpeter_targets_suspended {suspended}");
    header(
        &mut out,
        "saltpeter_targets_throttled",
        "gauge",
        "Targets of runs in flight queued for a place on their machine (max_running_per_machine).",
    );
    let _ = writeln!(out, "saltpeter_targets_throttled {throttled}");
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
    storage_metrics(core, &mut out);
    out
}

/// Targets by how they ended, missed slots, the notification outbox: what the alerts on
/// lost targets, missed slots and notifications watch (every series present from start).
fn render_watch(m: &MainMetrics, outbox: &Outbox, out: &mut String) {
    header(
        out,
        "saltpeter_targets_total",
        "counter",
        "Targets of runs ended since start, by how they ended.",
    );
    for result in TARGET_RESULTS {
        let n = m.targets_by_result.get(result).copied().unwrap_or(0);
        let _ = writeln!(out, "saltpeter_targets_total{{result=\"{result}\"}} {n}");
    }
    header(
        out,
        "saltpeter_slots_missed_total",
        "counter",
        "Slots not acted on in time since start (the daemon down, or the loop more than \
         the grace late), skipped or caught up.",
    );
    let _ = writeln!(out, "saltpeter_slots_missed_total {}", m.slots_missed);
    header(
        out,
        "saltpeter_notify_outbox_pending",
        "gauge",
        "Notification and log export messages queued and not yet delivered or given up.",
    );
    let _ = writeln!(out, "saltpeter_notify_outbox_pending {}", outbox.pending());
    header(
        out,
        "saltpeter_notify_outbox_oldest_seconds",
        "gauge",
        "Age of the oldest message pending in the outbox (0 when none is).",
    );
    let now = chrono::Utc::now().timestamp_millis();
    let oldest = outbox.oldest().map_or(0, |at| (now - at).max(0));
    let _ = writeln!(
        out,
        "saltpeter_notify_outbox_oldest_seconds {}",
        oldest as f64 / 1000.0
    );
    header(
        out,
        "saltpeter_notify_deliveries_total",
        "counter",
        "Delivery attempts of notifications and log exports since start, by result.",
    );
    for result in DELIVERY_RESULTS {
        let n = outbox.attempts(result);
        let _ = writeln!(
            out,
            "saltpeter_notify_deliveries_total{{result=\"{result}\"}} {n}"
        );
    }
}

/// The leader lease, when the database is shared (docs/ha.md): this server's role, and
/// which server leads as far as this one knows.
fn render_ha(core: &Main, out: &mut String) {
    let ha = &core.ha;
    if !ha.shared() {
        return;
    }
    header(
        out,
        "saltpeter_ha_leader",
        "gauge",
        "1 while this server holds the leader lease.",
    );
    let server = label_value(ha.server());
    let _ = writeln!(
        out,
        "saltpeter_ha_leader{{server=\"{server}\",role=\"{}\"}} {}",
        ha.role(),
        u8::from(ha.leader())
    );
    header(
        out,
        "saltpeter_ha_lease_holder",
        "gauge",
        "The server holding the leader lease, as this server last read it.",
    );
    if let Some(holder) = ha.known_holder() {
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
    let _ = writeln!(out, "saltpeter_ha_takeovers_total {}", ha.takeovers());
}

/// Whether the database stores, what failed to be written, and the stalls liveness
/// did not count (`state/storage.rs`, `state/liveness.rs`).
fn storage_metrics(core: &Main, out: &mut String) {
    header(
        out,
        "saltpeter_storage_trouble",
        "gauge",
        "1 while the database does not store (a full disk, a database out of reach, a \
         call db did not answer in time); outcomes wait with their wrappers meanwhile.",
    );
    let trouble = u8::from(core.storage.trouble().is_some());
    let _ = writeln!(out, "saltpeter_storage_trouble {trouble}");
    header(
        out,
        "saltpeter_db_write_failures_total",
        "counter",
        "Database calls that failed to store since start (each retry counts).",
    );
    let _ = writeln!(
        out,
        "saltpeter_db_write_failures_total {}",
        core.storage.write_failures()
    );
    header(
        out,
        "saltpeter_slots_refused_total",
        "counter",
        "Slots whose run could not be recorded since start (recorded as skipped once the \
         database stores again).",
    );
    let _ = writeln!(
        out,
        "saltpeter_slots_refused_total {}",
        core.storage.slots_refused()
    );
    header(
        out,
        "saltpeter_outcomes_unstored",
        "gauge",
        "Target outcomes decided and not stored yet (their wrappers keep them).",
    );
    let _ = writeln!(
        out,
        "saltpeter_outcomes_unstored {}",
        core.storage.outcomes_waiting()
    );
    header(
        out,
        "saltpeter_stalls_total",
        "counter",
        "Stalls of main or the hub (no tick for seconds) since start; wrappers' silence \
         across them is not counted.",
    );
    let _ = writeln!(out, "saltpeter_stalls_total {}", core.liveness.stalls());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_and_attempts_by_result_are_rendered() {
        // How the numbers change is the notifier's (`notify/tests.rs`).
        let m = MainMetrics::default();
        let mut outbox = Outbox::default();
        outbox.counted(2, Some(1_000));
        outbox.attempted(false, true);
        outbox.attempted(true, false);
        outbox.attempted(false, false);
        outbox.attempted(true, false);
        let mut out = String::new();
        render_watch(&m, &outbox, &mut out);
        for line in [
            "saltpeter_notify_deliveries_total{result=\"delivered\"} 2",
            "saltpeter_notify_deliveries_total{result=\"failed\"} 1",
            "saltpeter_notify_deliveries_total{result=\"given_up\"} 1",
            "saltpeter_notify_outbox_pending 0",
            "saltpeter_notify_outbox_oldest_seconds 0",
            "saltpeter_targets_total{result=\"lost\"} 0",
            "saltpeter_slots_missed_total 0",
        ] {
            assert!(out.contains(line), "missing `{line}` in:\n{out}");
        }
    }

    #[test]
    fn missed_slots_count_in_all_and_per_job() {
        let mut m = MainMetrics::default();
        m.slots_missed("a", 3);
        m.slots_missed("b", 0);
        m.slots_missed("a", 1);
        let mut out = String::new();
        render_watch(&m, &Outbox::default(), &mut out);
        assert!(out.contains("saltpeter_slots_missed_total 4\n"), "{out}");
        let mut out = String::new();
        m.per_job
            .render(["a".to_string(), "b".to_string()].iter(), &mut out);
        assert!(
            out.contains("saltpeter_job_slots_missed_total{job_name=\"a\"} 4\n"),
            "{out}"
        );
        assert!(!out.contains("\"b\""), "{out}");
    }
}
