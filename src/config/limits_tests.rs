//! The resource limit keys of a job: read, shown, and every bad value named with its
//! key and position (the job is then disabled alone).

use super::tests::{MINIMAL, job, load, tempdir, write};
use crate::wire::limits::{IoClass, IoNice, Limits};

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
            matches!(config.jobs.get("backup"), Some(super::JobEntry::Invalid(_))),
            "{line}: the job is still valid"
        );
    }
}
