//! The keys of the roadmap's features: resource limits (`nice`, `ionice`, `memory_max`,
//! `cpu_quota`, `tasks_max`), suspension (`timeout_counts_suspended`), date ranges
//! (`active_from`, `active_until`) and throttling (`max_running_per_machine`,
//! `max_runs_in_flight`): read, shown, and every bad value named with its key and
//! position (the job is then disabled alone).

use super::resources::{IoClass, IoNice, Limits};
use super::tests::{MINIMAL, job, load, messages, tempdir, write};
use super::{JobEntry, Severity};

#[test]
fn limits_are_read_and_shown() {
    let dir = tempdir();
    let text = MINIMAL.to_string()
        + "  nice: -5\n  ionice: best-effort:7\n  memory_max: 512M\n  cpu_quota: 150%\n  \
           tasks_max: 64\n";
    write(dir.path(), "nightly.yaml", &text);
    let config = load(dir.path(), None);
    assert!(config.diagnostics.is_empty(), "{:#?}", config.diagnostics);
    let j = job(&config, "backup");
    assert_eq!(
        j.limits,
        Limits {
            nice: Some(-5),
            ionice: Some(IoNice {
                class: IoClass::BestEffort,
                level: 7
            }),
            memory_max: Some(512 << 20),
            cpu_quota: Some(150),
            tasks_max: Some(64),
        }
    );
    let shown = j.redacted_json();
    assert_eq!(shown["memory_max"], 512u64 << 20);
    assert_eq!(shown["cpu_quota"], "150%");
    assert_eq!(shown["ionice"], "best-effort:7");
    // A bare number is a percentage too, and a job without limits has none.
    write(
        dir.path(),
        "nightly.yaml",
        &(MINIMAL.to_string() + "  cpu_quota: 50\n"),
    );
    let config = load(dir.path(), None);
    assert_eq!(job(&config, "backup").limits.cpu_quota, Some(50));
    write(dir.path(), "nightly.yaml", MINIMAL);
    assert!(job(&load(dir.path(), None), "backup").limits.is_empty());
}

#[test]
fn bad_limits_are_errors_naming_the_key_and_line() {
    for (line, key) in [
        ("nice: 20", "nice"),
        ("nice: lots", "nice"),
        ("ionice: fast", "ionice"),
        ("ionice: idle:3", "ionice"),
        ("memory_max: 12X", "memory_max"),
        ("memory_max: 1000", "memory_max"),
        ("cpu_quota: 0%", "cpu_quota"),
        ("cpu_quota: half", "cpu_quota"),
        ("tasks_max: 0", "tasks_max"),
        ("tasks_max: -1", "tasks_max"),
    ] {
        let dir = tempdir();
        write(dir.path(), "nightly.yaml", &format!("{MINIMAL}  {line}\n"));
        let config = load(dir.path(), None);
        let found = config.diagnostics.iter().find(|d| {
            let text = d.to_string();
            text.contains(&format!("`{key}`")) && text.contains("nightly.yaml:")
        });
        assert!(found.is_some(), "{line}: {:#?}", config.diagnostics);
        assert!(
            matches!(config.jobs.get("backup"), Some(JobEntry::Invalid(_))),
            "{line}: the job is still valid"
        );
    }
}

#[test]
fn timeout_counts_suspended_is_a_boolean() {
    let dir = tempdir();
    let text = MINIMAL.to_string() + "  timeout_counts_suspended: false\n";
    write(dir.path(), "nightly.yaml", &text);
    let config = load(dir.path(), None);
    assert!(config.diagnostics.is_empty(), "{:#?}", config.diagnostics);
    assert!(!job(&config, "backup").timeout_counts_suspended);
    let text = MINIMAL.to_string() + "  timeout_counts_suspended: sometimes\n";
    write(dir.path(), "nightly.yaml", &text);
    let config = load(dir.path(), None);
    assert!(
        config
            .diagnostics
            .iter()
            .any(|d| d.to_string().contains("timeout_counts_suspended")
                || d.to_string().contains("sometimes")),
        "{:#?}",
        config.diagnostics
    );
}

#[test]
fn active_ranges_are_read_in_the_job_zone_and_checked() {
    let dir = tempdir();
    write(
        dir.path(),
        "ranged.yaml",
        "\
season:
  schedule: '0 6 * * *'
  timezone: Europe/Berlin
  active_from: 2026-12-01
  active_until: '2027-02-28 18:00'
  command: 'true'
  targets: a
reversed:
  schedule: '0 6 * * *'
  active_from: 2027-01-02
  active_until: 2027-01-01
  command: 'true'
  targets: a
garbled:
  schedule: '0 6 * * *'
  active_until: soon
  command: 'true'
  targets: a
",
    );
    let config = load(dir.path(), None);
    let season = job(&config, "season");
    let range = season.schedule.range().cloned().unwrap_or_default();
    assert_eq!(
        range.from.map(|t| t.to_rfc3339()),
        Some("2026-11-30T23:00:00+00:00".to_string())
    );
    assert_eq!(
        range.until.map(|t| t.to_rfc3339()),
        Some("2027-02-28T17:00:00+00:00".to_string())
    );
    assert_eq!(
        season.redacted_json()["active_from"],
        serde_json::json!("2026-12-01")
    );
    let errors = messages(&config, Severity::Error);
    assert!(
        errors.iter().any(|e| e.contains("ranged.yaml:10:")
            && e.contains("job `reversed`")
            && e.contains("is after `active_until`")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("job `garbled`") && e.contains("expected a date")),
        "{errors:?}"
    );
    assert!(matches!(
        config.jobs.get("reversed"),
        Some(JobEntry::Invalid(_))
    ));
    // A range that has ended is valid, with a warning.
    write(
        dir.path(),
        "ranged.yaml",
        "old:\n  schedule: '0 6 * * *'\n  active_until: 2020-01-01\n  command: 'true'\n  \
         targets: a\n",
    );
    let config = load(dir.path(), None);
    assert!(job(&config, "old").schedule.range().is_some());
    let warnings = messages(&config, Severity::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("range ended")),
        "{warnings:?}"
    );
}

#[test]
fn throttling_caps_take_a_number_or_a_default_with_machine_globs() {
    let dir = tempdir();
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  max_runs_in_flight: 4\n  max_running_per_machine:\n    \
         default: 3\n    machines:\n      'db*': 1\n      build01: 0\n",
    );
    let config = load(dir.path(), None);
    let s = &config.saltpeter;
    assert_eq!(s.max_runs_in_flight, Some(4));
    let caps = &s.max_running_per_machine;
    assert_eq!(caps.cap_for("db07"), Some(1));
    assert_eq!(caps.cap_for("build01"), None, "0: no limit for it");
    assert_eq!(caps.cap_for("web1"), Some(3));
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  max_running_per_machine: 2\n  max_runs_in_flight: 0\n",
    );
    let config = load(dir.path(), None);
    assert_eq!(config.saltpeter.max_runs_in_flight, None);
    assert_eq!(
        config.saltpeter.max_running_per_machine.cap_for("any"),
        Some(2)
    );
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  max_running_per_machine: {most: 2}\n",
    );
    let config = load(dir.path(), None);
    let errors = messages(&config, Severity::Error);
    assert!(
        errors.iter().any(|e| e.contains("not `most`")),
        "{errors:?}"
    );
    assert!(!config.saltpeter.max_running_per_machine.is_set());
}

#[test]
fn a_jobs_queue_is_bounded_by_default_and_the_bound_must_be_positive() {
    let dir = tempdir();
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  max_runs_in_flight: 4\n",
    );
    assert_eq!(load(dir.path(), None).saltpeter.max_queued_runs_per_job, 5);
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  max_queued_runs_per_job: 2\n",
    );
    assert_eq!(load(dir.path(), None).saltpeter.max_queued_runs_per_job, 2);
    for bad in ["0", "-1", "lots"] {
        write(
            dir.path(),
            "a.yaml",
            &format!("saltpeter_config:\n  max_queued_runs_per_job: {bad}\n"),
        );
        let config = load(dir.path(), None);
        let errors = messages(&config, Severity::Error);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("max_queued_runs_per_job") && e.contains("a.yaml:2:")),
            "{bad}: {errors:?}"
        );
        assert_eq!(
            config.saltpeter.max_queued_runs_per_job, 5,
            "{bad}: the default"
        );
    }
}
