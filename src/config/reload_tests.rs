//! Tests across files and reloads: kept versions, duplicates, merging, fingerprints.

use super::tests::{MINIMAL, job, load, messages, now, tempdir, write};
use super::*;

#[test]
fn a_file_with_a_syntax_error_keeps_its_previous_version() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    write(
        dir.path(),
        "b.yaml",
        "other:\n  schedule: '@daily'\n  command: x\n  targets: y\n",
    );
    let first = load(dir.path(), None);
    assert!(first.diagnostics.is_empty());

    write(dir.path(), "a.yaml", "backup:\n  min: [1\n  hour: 2\n");
    let second = load(dir.path(), Some(&first));
    assert_eq!(job(&second, "backup").command, "/usr/local/bin/backup");
    job(&second, "other");
    let path = dir.path().join("a.yaml");
    assert_eq!(
        second.files[&path].state,
        FileState::Failed {
            kept_previous: true
        }
    );
    let errors = messages(&second, Severity::Error);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with(&format!("{}:", path.display())),
        "{errors:?}"
    );
    assert!(
        errors[0].contains("YAML syntax error")
            && errors[0].ends_with("the previous version of this file stays in effect"),
        "{errors:?}"
    );

    // Still broken at the next reload: the good version is carried forward again.
    let third = load(dir.path(), Some(&second));
    job(&third, "backup");
    // Without a previous load there is nothing to keep.
    let fresh = load(dir.path(), None);
    assert!(!fresh.jobs.contains_key("backup"));
    assert_eq!(
        fresh.files[&path].state,
        FileState::Failed {
            kept_previous: false
        }
    );
}

#[test]
fn a_job_name_in_two_files_is_an_error_naming_both() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    write(dir.path(), "b.yml", &format!("# comment\n{MINIMAL}"));
    let config = load(dir.path(), None);
    let Some(JobEntry::Invalid(dup)) = config.jobs.get("backup") else {
        panic!("duplicate must be invalid");
    };
    assert_eq!(dup.errors.len(), 2);
    let errors = messages(&config, Severity::Error);
    assert_eq!(errors.len(), 2);
    for e in &errors {
        assert!(
            e.contains("a.yaml (line 1)") && e.contains("b.yml (line 2)"),
            "{e}"
        );
    }
    assert!(errors[0].starts_with(&dir.path().join("a.yaml").display().to_string()));
    assert!(errors[1].starts_with(&dir.path().join("b.yml").display().to_string()));
}

#[test]
fn yml_files_are_read_and_others_ignored() {
    let dir = tempdir();
    write(dir.path(), "one.yml", MINIMAL);
    write(
        dir.path(),
        "two.yaml",
        "second:\n  schedule: '@daily'\n  command: x\n  targets: y\n",
    );
    write(dir.path(), "notes.txt", "not: [yaml");
    write(dir.path(), ".hidden.yaml", "not: [yaml");
    write(dir.path(), "empty.yaml", "");
    let config = load(dir.path(), None);
    assert!(!config.has_errors(), "{:#?}", config.diagnostics);
    assert_eq!(&*job(&config, "backup").group, "one");
    assert_eq!(&*job(&config, "second").group, "two");
    assert_eq!(config.files.len(), 3);
}

#[test]
fn saltpeter_config_merges_across_files_and_keeps_good_values() {
    let dir = tempdir();
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  timezone: Europe/Berlin\n  heartbeat: 7\n",
    );
    write(
        dir.path(),
        "b.yaml",
        "saltpeter_config:\n  timezone: Europe/Paris\n  api_ws_port: 9000\n",
    );
    let first = load(dir.path(), None);
    assert_eq!(first.saltpeter.timezone, chrono_tz::Europe::Paris);
    assert_eq!(
        (first.saltpeter.heartbeat_s, first.saltpeter.api_ws_port),
        (7, 9000)
    );
    let warnings = messages(&first, Severity::Warning);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains(
            "b.yaml:2:3: `saltpeter_config.timezone` is also set, to a different value, in"
        ),
        "{warnings:?}"
    );

    write(
        dir.path(),
        "b.yaml",
        "saltpeter_config:\n  timezone: Mars/Olympus\n  api_ws_port: 9000\n",
    );
    let second = load(dir.path(), Some(&first));
    assert_eq!(second.saltpeter.timezone, chrono_tz::Europe::Paris);
    let errors = messages(&second, Severity::Error);
    assert!(
        errors.len() == 1
            && errors[0].contains("unknown time zone `Mars/Olympus`")
            && errors[0].ends_with("its previous value is kept"),
        "{errors:?}"
    );
    assert!(
        first
            .saltpeter
            .startup_only_changes(&second.saltpeter)
            .is_empty()
    );
    let fresh = load(dir.path(), None);
    assert_eq!(fresh.saltpeter.timezone, chrono_tz::Tz::UTC);
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let dir = tempdir();
    let missing = dir.path().join("nope");
    let err = match check_dir(&missing, now()) {
        Ok(_) => panic!("missing dir loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with(&format!(
            "could not read configuration directory {}:",
            missing.display()
        )),
        "{err}"
    );
    write(dir.path(), "file.yaml", "");
    let not_dir = check_dir(&dir.path().join("file.yaml"), now())
        .err()
        .map(|e| e.to_string());
    assert!(not_dir.is_some_and(|m| m.contains("is not a directory")));
}

#[test]
fn changes_on_disk_are_detected_by_fingerprint() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    let config = load(dir.path(), None);
    assert!(matches!(config.changed_on_disk(), Ok(false)));
    write(dir.path(), "a.yaml", &format!("{MINIMAL}  splay: 1\n"));
    assert!(matches!(config.changed_on_disk(), Ok(true)));
    let reloaded = load(dir.path(), Some(&config));
    assert!(matches!(reloaded.changed_on_disk(), Ok(false)));
    write(dir.path(), "new.yml", "");
    assert!(matches!(reloaded.changed_on_disk(), Ok(true)));
}

/// What a load means, for comparing an incremental reload with a load from scratch.
fn meaning(config: &LoadedConfig) -> Vec<String> {
    let mut out: Vec<String> = config
        .jobs
        .values()
        .map(|e| match e {
            JobEntry::Valid(j) => format!(
                "{} {} {} {} {}",
                j.name,
                j.schedule.describe(),
                j.timezone,
                j.command,
                j.file.display()
            ),
            JobEntry::Invalid(bad) => format!("{} invalid", bad.name),
        })
        .collect();
    out.extend(config.diagnostics.iter().map(ToString::to_string));
    out
}

#[test]
fn an_incremental_reload_reuses_unchanged_files_and_means_the_same() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &format!("{MINIMAL}  colour: red\n"));
    write(
        dir.path(),
        "b.yaml",
        "other:\n  schedule: '0 3 * * *'\n  command: x\n  targets: y\n",
    );
    let first = load(dir.path(), None);
    assert_eq!(messages(&first, Severity::Warning).len(), 1);

    // Nothing changed: the same parses, the same jobs and warnings.
    let second = load(dir.path(), Some(&first));
    let parse = |c: &LoadedConfig, f: &str| {
        c.files
            .get(&dir.path().join(f))
            .and_then(|s| s.content.as_ref().map(|c| c.id))
    };
    let same_tree = |a: &LoadedConfig, b: &LoadedConfig, f: &str| match (parse(a, f), parse(b, f)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    assert!(same_tree(&first, &second, "a.yaml"));
    assert_eq!(meaning(&second), meaning(&first));

    // One file changed: only it is read again; the other keeps its warning.
    write(
        dir.path(),
        "b.yaml",
        "other:\n  schedule: '0 4 * * *'\n  command: z\n  targets: y\n",
    );
    let third = load(dir.path(), Some(&second));
    assert!(same_tree(&second, &third, "a.yaml"));
    assert!(!same_tree(&second, &third, "b.yaml"));
    assert_eq!(job(&third, "other").command, "z");
    assert_eq!(meaning(&third), meaning(&load(dir.path(), None)));

    // A default the jobs inherit changed: every job is validated again.
    write(
        dir.path(),
        "c.yaml",
        "saltpeter_config:\n  timezone: Europe/Berlin\n",
    );
    let fourth = load(dir.path(), Some(&third));
    assert_eq!(job(&fourth, "backup").timezone, chrono_tz::Europe::Berlin);
    assert_eq!(job(&fourth, "other").timezone, chrono_tz::Europe::Berlin);
    assert_eq!(meaning(&fourth), meaning(&load(dir.path(), None)));

    // A job moved to another file (a duplicate for a moment, then alone) is re-read.
    write(
        dir.path(),
        "d.yaml",
        "other:\n  schedule: '0 5 * * *'\n  command: moved\n  targets: y\n",
    );
    let fifth = load(dir.path(), Some(&fourth));
    assert!(matches!(
        fifth.jobs.get("other"),
        Some(JobEntry::Invalid(_))
    ));
    std::fs::remove_file(dir.path().join("b.yaml")).ok();
    let sixth = load(dir.path(), Some(&fifth));
    assert_eq!(job(&sixth, "other").command, "moved");
    assert_eq!(meaning(&sixth), meaning(&load(dir.path(), None)));
}

#[test]
fn settings_alone_match_a_full_load() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    write(
        dir.path(),
        "b.yaml",
        "saltpeter_config:\n  machines_ws_port: 9999\n  timezone: Europe/Berlin\n",
    );
    write(dir.path(), "c.yml", "saltpeter_config:\n  heartbeat: 3\n");
    write(dir.path(), "d.yaml", "broken: [\n");
    let settings = match load_settings(dir.path()) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(settings, load(dir.path(), None).saltpeter);
    assert_eq!((settings.machines_ws_port, settings.heartbeat_s), (9999, 3));
}

#[test]
fn settings_read_once_at_start_are_reported_as_start_only() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", "saltpeter_config:\n  heartbeat: 5\n");
    let first = load(dir.path(), None);
    write(
        dir.path(),
        "a.yaml",
        "saltpeter_config:\n  heartbeat: 5\n  hello_timeout: 20\n  max_message_bytes: 2048\n  \
         database_max_size: 1000000\n",
    );
    let second = load(dir.path(), Some(&first));
    let changes = first.saltpeter.startup_only_changes(&second.saltpeter);
    for key in ["hello_timeout", "max_message_bytes", "database_max_size"] {
        assert!(STARTUP_ONLY_KEYS.contains(&key), "{key}");
        assert!(changes.contains(&key), "{key} not reported: {changes:?}");
    }
}

#[test]
fn a_file_over_the_size_limit_is_an_error_and_its_last_good_version_stays() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    let first = load(dir.path(), None);
    job(&first, "backup");

    let mut big = String::from(MINIMAL);
    let filler = format!("# {}\n", "x".repeat(1000));
    while (big.len() as u64) <= MAX_FILE_BYTES {
        big.push_str(&filler);
    }
    write(dir.path(), "a.yaml", &big);
    let second = load(dir.path(), Some(&first));
    job(&second, "backup");
    let path = dir.path().join("a.yaml");
    let errors = messages(&second, Severity::Error);
    assert!(
        errors.len() == 1
            && errors[0].starts_with(&format!("{}:0:0:", path.display()))
            && errors[0].contains("larger than the limit of 4 MiB")
            && errors[0].ends_with("the previous version of this file stays in effect"),
        "{errors:?}"
    );
    assert_eq!(
        second.files[&path].state,
        FileState::Failed {
            kept_previous: true
        }
    );
}

/// `load_parsed` with the files `parse_changed` reads after `previous`, less `reread`.
fn load_round(dir: &Path, previous: &LoadedConfig, reread: &BTreeSet<PathBuf>) -> Load {
    let mut known = previous.reusable_fingerprints();
    known.retain(|path, _| !reread.contains(path));
    let parsed = match parse_changed(dir, &known, None) {
        Ok(parsed) => parsed,
        Err(e) => panic!("{e}"),
    };
    load_parsed(dir, parsed, Some(previous), now())
}

#[test]
fn a_load_keeps_no_job_mappings_and_rereads_unchanged_files_when_their_defaults_change() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    write(
        dir.path(),
        "b.yaml",
        "saltpeter_config:\n  heartbeat: 3\nother:\n  schedule: '0 3 * * *'\n  command: x\n  targets: y\n",
    );
    let first = load(dir.path(), None);
    // Only the settings and the keys are kept of each file.
    for status in first.files.values() {
        let content = status.content.as_ref().expect("content kept");
        assert!(content.is_stripped() && content.bodies.is_empty());
    }
    let b = &first.files[&dir.path().join("b.yaml")];
    assert_eq!(b.content.as_ref().map(|c| c.sections.len()), Some(1));

    // A change that leaves the defaults alone needs nothing read again.
    write(
        dir.path(),
        "c.yaml",
        "third:\n  schedule: '@daily'\n  command: z\n  targets: y\n",
    );
    let Load::Loaded(second) = load_round(dir.path(), &first, &BTreeSet::new()) else {
        panic!("no file should be read again");
    };
    assert_eq!(job(&second, "backup").command, "/usr/local/bin/backup");

    // A default every job inherits changed: the unchanged files are asked for again.
    write(
        dir.path(),
        "d.yaml",
        "saltpeter_config:\n  timezone: Europe/Berlin\n",
    );
    let reread = match load_round(dir.path(), &second, &BTreeSet::new()) {
        Load::Reread(files) => files,
        Load::Loaded(_) => panic!("the jobs of a.yaml, b.yaml and c.yaml need their mappings"),
    };
    let expected: BTreeSet<PathBuf> = ["a.yaml", "b.yaml", "c.yaml"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    assert_eq!(reread, expected);
    let Load::Loaded(third) = load_round(dir.path(), &second, &reread) else {
        panic!("every file was read");
    };
    for name in ["backup", "other", "third"] {
        assert_eq!(
            job(&third, name).timezone,
            chrono_tz::Europe::Berlin,
            "{name}"
        );
    }
    assert_eq!(third.saltpeter.heartbeat_s, 3);
    assert_eq!(third.diagnostics, load(dir.path(), None).diagnostics);
}

#[test]
fn a_broken_file_keeps_its_jobs_as_validated_when_the_defaults_change() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", MINIMAL);
    let first = load(dir.path(), None);
    write(dir.path(), "a.yaml", "backup:\n  min: [1\n");
    write(
        dir.path(),
        "b.yaml",
        "saltpeter_config:\n  timezone: Europe/Berlin\n",
    );
    let second = load(dir.path(), Some(&first));
    // Its last good version stays in effect as it was validated, with the old timezone.
    assert_eq!(
        job(&second, "backup").timezone,
        job(&first, "backup").timezone
    );
    assert_eq!(messages(&second, Severity::Error).len(), 1);
    // Fixed: read and validated with the new defaults.
    write(dir.path(), "a.yaml", MINIMAL);
    let third = load(dir.path(), Some(&second));
    assert_eq!(job(&third, "backup").timezone, chrono_tz::Europe::Berlin);
    assert!(messages(&third, Severity::Error).is_empty());
}
