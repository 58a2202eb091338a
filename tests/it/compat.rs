//! Compatibility: job files written as the original Python Saltpeter's examples write them
//! (`tests/compat/original/`) load without errors and mean what they meant there, with a
//! warning for each key that has no effect here. Deliberate differences (docs/
//! configuration.md): `hard_timeout` is read as `timeout` when that is absent, and
//! `timeout: 0` means no limit.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use saltpeter::config::{Executor, Job, JobEntry, LoadedConfig, Overlap, Severity, TargetType};

use crate::util::*;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/compat/original")
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn load() -> LoadedConfig {
    saltpeter::config::check_dir(&dir(), at("2026-11-25T10:00:00Z")).expect("load the examples")
}

fn job<'a>(config: &'a LoadedConfig, name: &str) -> &'a Job {
    match config.jobs.get(name) {
        Some(JobEntry::Valid(job)) => job,
        other => panic!("{name}: {other:?}"),
    }
}

/// The next `n` firings after `from`, as RFC 3339 UTC.
fn fires(job: &Job, from: &str, n: usize) -> Vec<String> {
    job.schedule
        .upcoming(at(from), n)
        .iter()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect()
}

#[test]
fn the_original_examples_load_with_the_same_meaning() {
    let config = load();
    let errors: Vec<String> = config
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(config.jobs.len(), 9);
    // Only keys that do nothing here are warned about, each where it is written.
    let legacy = [
        "soft_timeout",
        "hard_timeout",
        "utc",
        "lockfile",
        "wrapper_loglevel",
        "wrapper_logdir",
        "logdir",
        "allow_overlap",
        "default_wrapper_loglevel",
        "default_wrapper_logdir",
    ];
    for d in &config.diagnostics {
        assert!(
            legacy.iter().any(|k| d.message.contains(&format!("`{k}`"))),
            "unexpected warning: {d}"
        );
        assert!(d.line > 0, "{d}");
    }

    // Every 15 s in hours 1-23, in UTC like the original; two random compound matches.
    let j = job(&config, "touch_marker");
    assert_eq!(&*j.group, "webservers");
    assert_eq!(j.timezone, chrono_tz::Tz::UTC);
    assert_eq!(
        fires(j, "2026-11-25T23:59:50Z", 3),
        [
            "2026-11-26T01:00:00Z",
            "2026-11-26T01:00:15Z",
            "2026-11-26T01:00:30Z"
        ]
    );
    assert_eq!(j.target_expr, "G@roles:webserver or G@host:web1");
    assert_eq!(j.target_type, TargetType::Compound);
    assert_eq!(j.number_of_targets, Some(2));
    assert_eq!(
        (j.cwd.as_deref(), j.user.as_deref()),
        (Some("/home/deploy"), Some("deploy"))
    );
    assert_eq!(
        (j.timeout_s, j.overlap, j.executor.clone()),
        (3600, Overlap::Forbid, Executor::Salt)
    );
    assert!(j.enabled);
    // Defaults from saltpeter_config, as in the original.
    assert_eq!(j.server_host.as_deref(), Some("saltpeter.example"));
    assert_eq!(
        j.wrapper_path.as_deref(),
        Some("/usr/local/bin/sp_wrapper.py")
    );

    let j = job(&config, "slow_probe");
    assert_eq!(
        fires(j, "2026-11-25T10:00:00Z", 2),
        ["2026-11-25T10:00:05Z", "2026-11-25T10:00:20Z"]
    );
    assert_eq!(j.timeout_s, 7, "hard_timeout read as timeout");

    let j = job(&config, "everywhere");
    assert_eq!(
        fires(j, "2026-11-25T23:59:50Z", 2),
        ["2026-11-26T00:00:00Z", "2026-11-26T00:00:15Z"]
    );
    assert_eq!(
        (j.target_expr.as_str(), j.target_type),
        ("*", TargetType::Glob)
    );

    // `sec: '*'` with `min: '*/2'`: every second of every even minute; 0 targets = all.
    for name in ["disk_check", "load_check"] {
        let j = job(&config, name);
        assert_eq!(&*j.group, "monitoring");
        assert_eq!(
            fires(j, "2026-11-25T10:01:58Z", 3),
            [
                "2026-11-25T10:02:00Z",
                "2026-11-25T10:02:01Z",
                "2026-11-25T10:02:02Z"
            ]
        );
        assert_eq!(
            fires(j, "2026-11-25T10:02:59Z", 1),
            ["2026-11-25T10:04:00Z"]
        );
        assert_eq!(j.number_of_targets, None);
        assert_eq!(j.timeout_s, 120);
    }

    // Maintenance next to jobs.
    assert!(!config.maintenance.global);
    assert_eq!(
        config.maintenance.machines.iter().collect::<Vec<_>>(),
        ["db01.example.com", "db02.example.com"]
    );
    let j = job(&config, "nightly_backup");
    assert_eq!(
        fires(j, "2026-11-25T10:00:00Z", 1),
        ["2026-11-26T02:00:00Z"]
    );
    assert_eq!((j.timeout_s, j.target_type), (3600, TargetType::Glob));
    let j = job(&config, "cache_cleanup");
    assert_eq!(
        fires(j, "2026-11-25T10:00:00Z", 1),
        ["2026-11-26T03:30:00Z"]
    );
    assert_eq!((j.timeout_s, j.target_expr.as_str()), (1800, "web*"));

    // The README's keys.
    let j = job(&config, "reports");
    assert_eq!(
        fires(j, "2026-11-25T10:00:00Z", 1),
        ["2026-12-01T06:00:00Z"]
    );
    assert_eq!(j.timeout_s, 0, "no limit");
    assert_eq!(j.batch_size, Some(1));
    assert_eq!(j.overlap, Overlap::Allow);
    assert_eq!(j.target_type, TargetType::List);
    assert_eq!(j.server_host.as_deref(), Some("sp-internal.example"));
    assert_eq!(j.wrapper_path.as_deref(), Some("/opt/sp_wrapper"));
    let env: Vec<(&str, &str)> = j
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [
            ("REPORT_FORMAT", "pdf"),
            ("RETRIES", "3"),
            ("VERBOSE", "True")
        ],
        "values as the original's str() made them"
    );
    let j = job(&config, "weekday_sync");
    assert_eq!(
        fires(j, "2026-11-25T10:00:00Z", 2),
        ["2027-01-01T08:00:30Z", "2027-01-01T08:10:30Z"]
    );
    assert_eq!(j.target_type, TargetType::Grain);
    assert_eq!(
        j.overlap,
        Overlap::Forbid,
        "only the exact phrase allows overlap"
    );

    assert!(!config.saltpeter.debug);
}

#[test]
fn saltpeterctl_checks_the_original_examples_without_errors() {
    let out = std::process::Command::new(CTL)
        .args(["--json", "config", "check"])
        .arg(dir())
        .output()
        .expect("run saltpeterctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], true);
    assert_eq!(
        (v["jobs"].as_u64(), v["valid_jobs"].as_u64()),
        (Some(9), Some(9))
    );
}
