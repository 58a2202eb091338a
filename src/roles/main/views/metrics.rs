//! What main measures for `/metrics` ([`MainMetrics`]), and the rendering of all of the
//! daemon's metrics ([`render`]): main's own counts, and the gauges of the other parts
//! handed in by the caller ([`Gauges`], `shell/views.rs`). db reports its commit latency
//! to main; the hub adds its own connection counts.

use crate::roles::main::notify::{DELIVERY_RESULTS, Outbox};
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::config::LoadedConfig;
use crate::metrics::{DURATION_BUCKETS, Histogram, LATENCY_BUCKETS, header, label_value};
use crate::roles::main::views::job_metrics::{EndedRun, PerJob, TARGET_RESULTS, target_result};
use crate::wire::records::{Millis, RunState};

/// What main counts since start.
pub(crate) struct MainMetrics {
    runs_by_state: BTreeMap<&'static str, u64>,
    run_duration: Histogram,
    lateness: Histogram,
    /// Salt batch launches: the salt call to its answer.
    launch: Histogram,
    output_bytes: u64,
    output_frames: u64,
    /// The latest histogram db reported.
    db_commit: Option<Histogram>,
    /// Per job (rendered for the jobs configured now: jobs × states series at most).
    per_job: PerJob,
    /// Targets of ended runs by how they ended (`job_metrics::TARGET_RESULTS`).
    targets_by_result: BTreeMap<&'static str, u64>,
    /// Slots not acted on in time (the daemon down, the loop late).
    slots_missed: u64,
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

    /// db's latest commit latency histogram.
    pub(crate) fn db_committed(&mut self, h: Histogram) {
        self.db_commit = Some(h);
    }

    /// An output frame of `bytes` bytes arrived from a wrapper.
    pub(crate) fn output(&mut self, bytes: usize) {
        self.output_bytes += bytes as u64;
        self.output_frames += 1;
    }
}

/// What `/metrics` shows of the other parts, as they are when it is asked.
pub(crate) struct Gauges<'a> {
    pub config: &'a LoadedConfig,
    /// Salt launch publishes since start.
    pub publishes: u64,
    /// Wrapper deployments since start.
    pub deployments: u64,
    /// How far ahead of its slot each salt job is launched, in seconds.
    pub prestage_leads: Vec<(&'a str, f64)>,
    pub wrappers_connected: usize,
    pub runs_in_flight: usize,
    pub targets_suspended: usize,
    pub targets_throttled: usize,
    /// The leader lease, when the database is shared.
    pub ha: Option<HaGauges<'a>>,
    /// Whether the database stores, and what failed to be written.
    pub storage_trouble: bool,
    pub db_write_failures: u64,
    pub slots_refused: u64,
    pub outcomes_unstored: usize,
    pub stalls: u64,
    /// The notification outbox as the notifier counts it.
    pub outbox: &'a Outbox,
    /// Now (unix milliseconds): the outbox's age.
    pub now: Millis,
}

/// The leader lease as `/metrics` shows it.
pub(crate) struct HaGauges<'a> {
    pub server: &'a str,
    pub role: &'a str,
    pub leader: bool,
    /// Which server holds the lease, as this one last read it.
    pub holder: Option<&'a str>,
    pub takeovers: u64,
}

/// main's metrics in the Prometheus text format.
pub(crate) fn render(m: &MainMetrics, g: &Gauges) -> String {
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
    m.per_job.render(g.config.jobs.keys(), &mut out);
    render_watch(m, g.outbox, g.now, &mut out);
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
    let _ = writeln!(out, "saltpeter_salt_launch_publishes_total {}", g.publishes);
    header(
        &mut out,
        "saltpeter_wrapper_deployments_total",
        "counter",
        "Wrapper deployments to a minion since start (one per minion and build).",
    );
    let _ = writeln!(out, "saltpeter_wrapper_deployments_total {}", g.deployments);
    header(
        &mut out,
        "saltpeter_prestage_lead_seconds",
        "gauge",
        "How far ahead of its slot each salt job is launched (the cap until measured).",
    );
    for (name, lead) in &g.prestage_leads {
        let _ = writeln!(
            out,
            "saltpeter_prestage_lead_seconds{{job=\"{}\"}} {lead}",
            label_value(name)
        );
    }
    header(
        &mut out,
        "saltpeter_wrappers_connected",
        "gauge",
        "Wrapper sessions bound to a target now.",
    );
    let _ = writeln!(out, "saltpeter_wrappers_connected {}", g.wrappers_connected);
    header(
        &mut out,
        "saltpeter_runs_in_flight",
        "gauge",
        "Runs recorded and not finished.",
    );
    let _ = writeln!(out, "saltpeter_runs_in_flight {}", g.runs_in_flight);
    header(
        &mut out,
        "saltpeter_targets_suspended",
        "gauge",
        "Targets of runs in flight suspended by an operator.",
    );
    let _ = writeln!(out, "saltpeter_targets_suspended {}", g.targets_suspended);
    header(
        &mut out,
        "saltpeter_targets_throttled",
        "gauge",
        "Targets of runs in flight queued for a place on their machine (max_running_per_machine).",
    );
    let _ = writeln!(out, "saltpeter_targets_throttled {}", g.targets_throttled);
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
    let _ = writeln!(out, "saltpeter_jobs {}", g.config.jobs.len());
    header(
        &mut out,
        "saltpeter_config_errors",
        "gauge",
        "Errors in the configuration now.",
    );
    let errors = g.config.error_digest().errors();
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
    if let Some(ha) = &g.ha {
        render_ha(ha, &mut out);
    }
    storage_metrics(g, &mut out);
    out
}

/// Targets by how they ended, missed slots, the notification outbox: what the alerts on
/// lost targets, missed slots and notifications watch (every series present from start).
fn render_watch(m: &MainMetrics, outbox: &Outbox, now: Millis, out: &mut String) {
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
fn render_ha(ha: &HaGauges, out: &mut String) {
    header(
        out,
        "saltpeter_ha_leader",
        "gauge",
        "1 while this server holds the leader lease.",
    );
    let server = label_value(ha.server);
    let _ = writeln!(
        out,
        "saltpeter_ha_leader{{server=\"{server}\",role=\"{}\"}} {}",
        ha.role,
        u8::from(ha.leader)
    );
    header(
        out,
        "saltpeter_ha_lease_holder",
        "gauge",
        "The server holding the leader lease, as this server last read it.",
    );
    if let Some(holder) = ha.holder {
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

/// Whether the database stores, what failed to be written, and the stalls liveness
/// did not count (`health/storage.rs`, `health/liveness.rs`), as handed in.
fn storage_metrics(g: &Gauges, out: &mut String) {
    header(
        out,
        "saltpeter_storage_trouble",
        "gauge",
        "1 while the database does not store (a full disk, a database out of reach, a \
         call db did not answer in time); outcomes wait with their wrappers meanwhile.",
    );
    let trouble = u8::from(g.storage_trouble);
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
        g.db_write_failures
    );
    header(
        out,
        "saltpeter_slots_refused_total",
        "counter",
        "Slots whose run could not be recorded since start (recorded as skipped once the \
         database stores again).",
    );
    let _ = writeln!(out, "saltpeter_slots_refused_total {}", g.slots_refused);
    header(
        out,
        "saltpeter_outcomes_unstored",
        "gauge",
        "Target outcomes decided and not stored yet (their wrappers keep them).",
    );
    let _ = writeln!(out, "saltpeter_outcomes_unstored {}", g.outcomes_unstored);
    header(
        out,
        "saltpeter_stalls_total",
        "counter",
        "Stalls of main or the hub (no tick for seconds) since start; wrappers' silence \
         across them is not counted.",
    );
    let _ = writeln!(out, "saltpeter_stalls_total {}", g.stalls);
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
        render_watch(&m, &outbox, 0, &mut out);
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
        render_watch(&m, &Outbox::default(), 0, &mut out);
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

    #[test]
    fn the_other_parts_gauges_are_rendered_as_handed_in() {
        let config = crate::config::check_yaml(
            "j:\n  schedule: '0 * * * *'\n  command: 'true'\n  targets: a\n",
            chrono::Utc::now(),
        );
        let m = MainMetrics::default();
        let mut outbox = Outbox::default();
        outbox.counted(1, Some(1_000));
        let mut g = Gauges {
            config: &config,
            publishes: 4,
            deployments: 2,
            prestage_leads: vec![("j", 1.5)],
            wrappers_connected: 3,
            runs_in_flight: 1,
            targets_suspended: 1,
            targets_throttled: 0,
            ha: None,
            storage_trouble: true,
            db_write_failures: 7,
            slots_refused: 0,
            outcomes_unstored: 2,
            stalls: 1,
            outbox: &outbox,
            now: 3_500,
        };
        let text = render(&m, &g);
        for line in [
            "saltpeter_salt_launch_publishes_total 4\n",
            "saltpeter_wrapper_deployments_total 2\n",
            "saltpeter_prestage_lead_seconds{job=\"j\"} 1.5\n",
            "saltpeter_wrappers_connected 3\n",
            "saltpeter_targets_suspended 1\n",
            "saltpeter_jobs 1\n",
            "saltpeter_notify_outbox_oldest_seconds 2.5\n",
            "saltpeter_storage_trouble 1\n",
            "saltpeter_db_write_failures_total 7\n",
            "saltpeter_outcomes_unstored 2\n",
            "saltpeter_stalls_total 1\n",
        ] {
            assert!(text.contains(line), "missing `{line}` in:\n{text}");
        }
        assert!(
            !text.contains("saltpeter_ha_"),
            "a lone server has no lease"
        );
        g.ha = Some(HaGauges {
            server: "s1",
            role: "standby",
            leader: false,
            holder: Some("s2"),
            takeovers: 0,
        });
        let text = render(&m, &g);
        assert!(text.contains("saltpeter_ha_leader{server=\"s1\",role=\"standby\"} 0\n"));
        assert!(text.contains("saltpeter_ha_lease_holder{server=\"s2\"} 1\n"));
    }
}
