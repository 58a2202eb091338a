//! The per-job and watch series of `/metrics` against a real daemon: targets by how they
//! ended, lateness, the notification outbox, missed slots after a restart; a job removed
//! from the configuration drops out and comes back with its counts.

use std::time::Duration;

use super::*;

fn metrics(port: u16) -> String {
    let resp = get(port, "/metrics");
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

/// The value of `series` (its name and labels as served), if served.
fn sample(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
}

fn jobs(hook_port: u16, with_ghost: bool) -> String {
    let mut yaml = format!(
        "mixed:\n  schedule: '@yearly'\n  targets: [ok1, bad1]\n  \
         command: 'test \"$SP_MACHINE\" = ok1'\n  notify:\n    \
         webhook: http://127.0.0.1:{hook_port}/hook\n\
         ticking:\n  schedule: '*/2 * * * * *'\n  targets: [t1]\n  command: 'true'\n"
    );
    if with_ghost {
        yaml.push_str(
            "ghost:\n  schedule: '@yearly'\n  targets: [g]\n  wrapper_path: /bin/true\n  \
             command: 'echo never'\n",
        );
    }
    yaml
}

#[test]
fn metrics_count_targets_by_result_lateness_and_the_outbox_per_configured_job() {
    // Nobody listens there: the failure notification fails and stays pending.
    let hook_port = free_port();
    let (d, port) = start(&jobs(hook_port, true));
    let mixed = post(port, "/api/v1/jobs/mixed/run", b"").json()["run"]
        .as_u64()
        .expect("run");
    assert_eq!(d.wait_run_final(mixed)["state"], "partial");
    let ghost = post(port, "/api/v1/jobs/ghost/run", b"").json()["run"]
        .as_u64()
        .expect("run");
    assert_eq!(d.wait_run_final(ghost)["state"], "failed");
    d.wait_final_runs("ticking", 1);

    let text = wait_until("the failed delivery counted", HANG, || {
        let text = metrics(port);
        (sample(
            &text,
            "saltpeter_notify_deliveries_total{result=\"failed\"}",
        )? >= 1.0)
            .then_some(text)
    });
    for (series, want) in [
        (
            "saltpeter_job_runs_total{job_name=\"mixed\",state=\"partial\"}",
            1.0,
        ),
        (
            "saltpeter_job_targets_total{job_name=\"mixed\",result=\"succeeded\"}",
            1.0,
        ),
        (
            "saltpeter_job_targets_total{job_name=\"mixed\",result=\"failed\"}",
            1.0,
        ),
        (
            "saltpeter_job_targets_total{job_name=\"ghost\",result=\"wrapper_failed\"}",
            1.0,
        ),
        ("saltpeter_targets_total{result=\"wrapper_failed\"}", 1.0),
        ("saltpeter_targets_total{result=\"failed\"}", 1.0),
        ("saltpeter_targets_total{result=\"lost\"}", 0.0),
        (
            "saltpeter_notify_deliveries_total{result=\"delivered\"}",
            0.0,
        ),
        ("saltpeter_notify_outbox_pending", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series} in:\n{text}");
    }
    assert!(
        sample(&text, "saltpeter_notify_outbox_oldest_seconds").is_some_and(|s| s >= 0.0),
        "{text}"
    );
    assert!(
        sample(&text, "saltpeter_slots_missed_total").is_some(),
        "{text}"
    );
    // Lateness is a scheduled run's: none for the jobs run by hand.
    let lateness = sample(
        &text,
        "saltpeter_job_last_lateness_seconds{job_name=\"ticking\"}",
    );
    assert!(
        lateness.is_some_and(|s| (0.0..30.0).contains(&s)),
        "{lateness:?} in:\n{text}"
    );
    assert_eq!(
        sample(
            &text,
            "saltpeter_job_last_lateness_seconds{job_name=\"mixed\"}"
        ),
        None
    );

    // Removed from the configuration: its series go; the daemon-wide counts stay.
    d.write_config("jobs.yaml", &jobs(hook_port, false));
    let text = wait_until("ghost's series gone", HANG, || {
        let text = metrics(port);
        (!text.contains("job_name=\"ghost\"")).then_some(text)
    });
    assert_eq!(
        sample(&text, "saltpeter_targets_total{result=\"wrapper_failed\"}"),
        Some(1.0)
    );
    // Configured again: back with what it had counted since start.
    d.write_config("jobs.yaml", &jobs(hook_port, true));
    wait_until("ghost's series back", HANG, || {
        let text = metrics(port);
        let series = "saltpeter_job_targets_total{job_name=\"ghost\",result=\"wrapper_failed\"}";
        (sample(&text, series)? == 1.0).then_some(())
    });
}

#[test]
fn slots_missed_while_down_are_counted_per_job_and_in_all() {
    let jobs = "every:\n  schedule: '* * * * * *'\n  overlap: allow\n  targets: [e]\n  \
                command: 'true'\n";
    let mut d = Daemon::start(&[("01-api.yaml", &api_config("")), ("jobs.yaml", jobs)]);
    d.wait_final_runs("every", 2);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit().success());
    std::thread::sleep(Duration::from_secs(4));
    d.spawn();
    d.wait_ready();
    let port = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    // Every missed slot is recorded as a skipped run with reason `missed: ...` (fewer
    // than `missed_record_limit`), and counted once.
    wait_until("the missed slots recorded and counted", HANG, || {
        let recorded = d
            .runs("every")
            .iter()
            .filter(|r| {
                r["reason"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("missed:"))
            })
            .count() as f64;
        let text = metrics(port);
        let per_job = sample(
            &text,
            "saltpeter_job_slots_missed_total{job_name=\"every\"}",
        )?;
        let all = sample(&text, "saltpeter_slots_missed_total")?;
        (recorded >= 3.0 && per_job == recorded && all == recorded).then_some(())
    });
}
