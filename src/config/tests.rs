use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};

use super::*;

pub(super) fn now() -> DateTime<Utc> {
    match Utc.with_ymd_and_hms(2026, 11, 25, 12, 0, 0) {
        chrono::LocalResult::Single(t) => t,
        _ => panic!("bad test date"),
    }
}

pub(super) fn write(dir: &Path, name: &str, text: &str) {
    if let Err(e) = std::fs::write(dir.join(name), text) {
        panic!("write {name}: {e}");
    }
}

pub(super) fn tempdir() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

pub(super) fn load(dir: &Path, previous: Option<&LoadedConfig>) -> LoadedConfig {
    match load_dir(dir, previous, now()) {
        Ok(c) => c,
        Err(e) => panic!("load_dir: {e}"),
    }
}

pub(super) fn job<'a>(config: &'a LoadedConfig, name: &str) -> &'a Job {
    match config.jobs.get(name) {
        Some(JobEntry::Valid(job)) => job,
        other => panic!("job {name} not valid: {other:?}\n{:#?}", config.diagnostics),
    }
}

pub(super) fn messages(config: &LoadedConfig, severity: Severity) -> Vec<String> {
    config
        .diagnostics
        .iter()
        .filter(|d| d.severity == severity)
        .map(ToString::to_string)
        .collect()
}

pub(super) const MINIMAL: &str = "\
backup:
  min: 30
  hour: 2
  dom: '*'
  mon: '*'
  dow: '*'
  command: /usr/local/bin/backup
  targets: 'db*'
";

#[test]
fn a_minimal_job_gets_every_default() {
    let dir = tempdir();
    write(dir.path(), "nightly.yaml", MINIMAL);
    let config = load(dir.path(), None);
    assert!(config.diagnostics.is_empty(), "{:#?}", config.diagnostics);
    let j = job(&config, "backup");
    assert_eq!(&*j.group, "nightly");
    assert_eq!(j.line, 1);
    assert_eq!(j.schedule.describe(), "0 30 2 * * * *");
    assert_eq!(j.timezone, chrono_tz::Tz::UTC);
    assert_eq!(j.targets, ["db*"]);
    assert_eq!(j.target_expr, "db*");
    assert_eq!(j.target_type, TargetType::Glob);
    assert_eq!(j.executor, Executor::Salt);
    assert_eq!((j.user.as_deref(), j.cwd.as_deref()), (None, None));
    assert!(j.env.is_empty());
    assert_eq!((j.timeout_s, j.kill_grace_s), (3600, 10));
    assert_eq!((j.number_of_targets, j.batch_size), (None, None));
    assert_eq!(
        (j.overlap, j.missed, j.missed_deadline_s),
        (Overlap::Forbid, Missed::Skip, 3600)
    );
    assert_eq!((j.splay_s, j.enabled), (0, true));
    assert!(
        j.timeout_counts_suspended,
        "the timeout counts while suspended"
    );
    assert_eq!(
        j.output_limit,
        OutputLimit {
            head_bytes: MIB,
            tail_bytes: MIB
        }
    );
    assert_eq!(
        (j.wrapper_path.as_deref(), j.server_host.as_deref()),
        (None, None)
    );

    let s = &config.saltpeter;
    assert_eq!(*s, SaltpeterConfig::default());
    assert!(!s.api_ws && !s.debug);
    assert!(s.wrapper_deploy);
    assert_eq!(
        (s.api_ws_port, s.api_ws_bind_addr.as_str()),
        (8888, "127.0.0.1")
    );
    assert_eq!(
        (s.machines_ws_port, s.machines_ws_bind_addr.as_str()),
        (8889, "0.0.0.0")
    );
    assert_eq!(
        (s.heartbeat_s, s.pickup_timeout_s, s.hello_timeout_s),
        (5, 30, 10)
    );
    assert_eq!(
        (s.max_message_bytes, s.max_connections_per_addr),
        (MIB, 256)
    );
    assert_eq!(config.maintenance, Maintenance::default());
    assert!(!config.has_errors());
}

#[test]
fn every_key_is_read_and_saltpeter_config_gives_defaults() {
    let dir = tempdir();
    write(
        dir.path(),
        "all.yaml",
        "\
saltpeter_config:
  timezone: Europe/Berlin
  executor: local
  default_wrapper_path: /opt/sp/wrapper
  default_saltpeter_server_host: hub.example
  api_ws: yes
  api_token: s3cret-token
  wrapper_deploy: no
report:
  schedule: '*/10 * * * *'
  command: |
    echo one
    echo two
  targets: [web1, web2]
  target_type: list
  executor: salt
  user: nobody
  cwd: /tmp
  env: {A: 1, B: yes, C: 'yes', D: text}
  timeout: 0
  kill_grace: 3
  number_of_targets: 1
  batch_size: 0
  overlap: allow
  missed: latest
  missed_deadline: 600
  splay: 5
  enabled: off
  output_limit: {head: 100, tail: 200}
  wrapper_path: /usr/bin/w
  saltpeter_server_host: other.example
  timezone: America/New_York
inherit:
  schedule: '@hourly'
  command: 'true'
  targets: a, b ,c
",
    );
    let config = load(dir.path(), None);
    assert!(config.diagnostics.is_empty(), "{:#?}", config.diagnostics);
    assert!(config.saltpeter.api_ws);
    assert!(!config.saltpeter.wrapper_deploy);
    assert_eq!(
        config.saltpeter.api_token.as_ref().map(Secret::expose),
        Some("s3cret-token")
    );
    assert!(!format!("{:?}", config.saltpeter).contains("s3cret"));

    let r = job(&config, "report");
    assert_eq!(r.command, "echo one\necho two\n");
    assert_eq!(
        (r.targets.clone(), r.target_expr.as_str()),
        (vec!["web1".to_string(), "web2".to_string()], "web1,web2")
    );
    assert_eq!(
        (r.target_type, r.executor.clone()),
        (TargetType::List, Executor::Salt)
    );
    assert_eq!(
        (r.user.as_deref(), r.cwd.as_deref()),
        (Some("nobody"), Some("/tmp"))
    );
    let env: Vec<(&str, &str)> = r
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [("A", "1"), ("B", "True"), ("C", "yes"), ("D", "text")]
    );
    assert_eq!(
        (
            r.timeout_s,
            r.kill_grace_s,
            r.number_of_targets,
            r.batch_size
        ),
        (0, 3, Some(1), None)
    );
    assert_eq!(
        (r.overlap, r.missed, r.missed_deadline_s, r.splay_s),
        (Overlap::Allow, Missed::Latest, 600, 5)
    );
    assert!(!r.enabled);
    assert_eq!(
        r.output_limit,
        OutputLimit {
            head_bytes: 100,
            tail_bytes: 200
        }
    );
    assert_eq!(r.wrapper_path.as_deref(), Some("/usr/bin/w"));
    assert_eq!(r.server_host.as_deref(), Some("other.example"));
    assert_eq!(r.timezone, chrono_tz::America::New_York);

    let i = job(&config, "inherit");
    assert_eq!(i.timezone, chrono_tz::Europe::Berlin);
    assert_eq!(i.schedule.timezone(), chrono_tz::Europe::Berlin);
    assert_eq!(i.executor, Executor::Local);
    assert_eq!(i.targets, ["a", "b", "c"]);
    assert_eq!(i.target_expr, "a, b ,c");
    assert_eq!(i.wrapper_path.as_deref(), Some("/opt/sp/wrapper"));
    assert_eq!(i.server_host.as_deref(), Some("hub.example"));
}

#[test]
fn one_bad_job_is_disabled_alone_with_its_position() {
    let dir = tempdir();
    let text = format!(
        "{MINIMAL}broken:\n  min: 0\n  hour: 25\n  dom: '*'\n  mon: '*'\n  dow: '*'\n  command: x\n  targets: y\nlast:\n  schedule: '@daily'\n  command: x\n  targets: y\n"
    );
    write(dir.path(), "jobs.yaml", &text);
    let config = load(dir.path(), None);
    job(&config, "backup");
    job(&config, "last");
    let Some(JobEntry::Invalid(bad)) = config.jobs.get("broken") else {
        panic!("broken should be invalid: {:?}", config.jobs.get("broken"));
    };
    assert_eq!((bad.group.as_str(), bad.line), ("jobs", 9));
    let path = dir.path().join("jobs.yaml");
    let expected = format!(
        "{}:11:9: field `hour`: 25 is out of range 0-23",
        path.display()
    );
    assert_eq!(messages(&config, Severity::Error), [expected.as_str()]);
    assert_eq!(
        bad.errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [expected]
    );
    assert_eq!(config.diagnostics[0].job.as_deref(), Some("broken"));
    assert!(config.has_errors());
}

#[test]
fn missing_keys_never_firing_and_wrong_types_are_errors() {
    let dir = tempdir();
    write(
        dir.path(),
        "bad.yaml",
        "\
nothing:
  command: x
feb30:
  schedule: '0 0 30 2 *'
  command: x
  targets: y
typed:
  schedule: '@daily'
  command: x
  targets: y
  timeout: 1h
  enabled: maybe
  target_type: regex
both:
  schedule: '@daily'
  hour: 1
  command: x
  targets: y
",
    );
    let config = load(dir.path(), None);
    let errors = messages(&config, Severity::Error).join("\n");
    assert!(errors.contains("bad.yaml:1:1: missing required keys `min`, `hour`, `dom`, `mon`, `dow` (or give `schedule`)"), "{errors}");
    assert!(
        errors.contains("bad.yaml:1:1: missing required key `targets`"),
        "{errors}"
    );
    assert!(
        errors.contains(":4:13: schedule `0 0 0 30 2 * *` in UTC never fires after"),
        "{errors}"
    );
    assert!(
        errors.contains(":11:12: expected a whole number, found `1h` (a number of seconds)"),
        "{errors}"
    );
    assert!(
        errors.contains(":12:12: expected true or false"),
        "{errors}"
    );
    assert!(
        errors.contains(":13:16: `regex` is not one of: glob, pcre, list"),
        "{errors}"
    );
    assert!(
        errors.contains(":15:13: give either `schedule` or the fields"),
        "{errors}"
    );
    assert!(config.jobs.values().all(|e| e.job().is_none()));
    assert_eq!(config.jobs.len(), 4);
}

#[test]
fn an_unquoted_star_gets_a_hint() {
    let dir = tempdir();
    write(
        dir.path(),
        "star.yaml",
        "job:\n  min: 0\n  hour: 1\n  dom: '*'\n  mon: '*'\n  dow: *\n",
    );
    let config = load(dir.path(), None);
    let errors = messages(&config, Severity::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(":6:") && errors[0].contains("quote it"),
        "{errors:?}"
    );
}

#[test]
fn unknown_keys_warn_with_a_suggestion() {
    let dir = tempdir();
    write(
        dir.path(),
        "w.yaml",
        &format!(
            "{MINIMAL}  taget_type: list\n  colour: blue\nsaltpeter_config:\n  api_ws_prot: 1\n"
        ),
    );
    let config = load(dir.path(), None);
    assert!(!config.has_errors());
    assert_eq!(job(&config, "backup").target_type, TargetType::Glob);
    let warnings = messages(&config, Severity::Warning);
    let path = dir.path().join("w.yaml");
    assert_eq!(
        warnings,
        [
            format!(
                "{}:9:3: unknown key `taget_type` (did you mean `target_type`?); it is ignored",
                path.display()
            ),
            format!(
                "{}:10:3: unknown key `colour`; it is ignored",
                path.display()
            ),
            format!(
                "{}:12:3: unknown saltpeter_config key `api_ws_prot` (did you mean `api_ws_port`?); it is ignored",
                path.display()
            ),
        ]
    );
}

#[test]
fn deprecated_keys_are_accepted_with_warnings() {
    let dir = tempdir();
    write(
        dir.path(),
        "old.yaml",
        &format!(
            "{MINIMAL}  hard_timeout: 120\n  soft_timeout: 60\n  utc: false\n  use_wrapper: true\n  lockfile: /tmp/x\n  wrapper_loglevel: debug\n  allow_overlap: 'i know what i am doing!'\n  group: other\nsaltpeter_config:\n  logdir: /var/log/saltpeter\n  elasticsearch: http://es:9200\n  opensearch: ''\n"
        ),
    );
    let config = load(dir.path(), None);
    assert!(!config.has_errors(), "{:#?}", config.diagnostics);
    let j = job(&config, "backup");
    assert_eq!((j.timeout_s, j.overlap), (120, Overlap::Allow));
    let warnings = messages(&config, Severity::Warning).join("\n");
    for needle in [
        "`hard_timeout` is deprecated",
        "`soft_timeout` has no effect",
        "`utc` has no effect",
        "`lockfile` has no effect",
        "`wrapper_loglevel` has no effect",
        "`group` is always the file name (`old`)",
    ] {
        assert!(warnings.contains(needle), "missing {needle} in\n{warnings}");
    }
    assert_eq!(
        config.saltpeter.logs.logdir.as_deref(),
        Some(std::path::Path::new("/var/log/saltpeter"))
    );
    assert_eq!(config.saltpeter.logs.exports().len(), 1);
    assert!(
        !warnings.contains("use_wrapper") && !warnings.contains("opensearch"),
        "{warnings}"
    );
}

#[test]
fn yaml_1_1_booleans_load() {
    let dir = tempdir();
    write(
        dir.path(),
        "b.yaml",
        &format!(
            "{MINIMAL}  enabled: no\nsaltpeter_config:\n  api_ws: yes\n  debug: On\nsaltpeter_maintenance:\n  global: off\n  machines: [db01, db02]\n"
        ),
    );
    let config = load(dir.path(), None);
    assert!(config.diagnostics.is_empty(), "{:#?}", config.diagnostics);
    assert!(!job(&config, "backup").enabled);
    assert!(config.saltpeter.api_ws && config.saltpeter.debug);
    assert!(!config.maintenance.global);
    assert_eq!(
        config.maintenance.machines.iter().collect::<Vec<_>>(),
        ["db01", "db02"]
    );
}

#[test]
fn schedule_string_and_fields_give_the_same_schedule() {
    let dir = tempdir();
    write(dir.path(), "s.yaml", "\
by_fields: {sec: 15, min: '*/5', hour: 8-18, dom: '?', mon: jan-jun, dow: mon-fri, year: '*', command: x, targets: y}
by_string: {schedule: '15 */5 8-18 ? jan-jun mon-fri *', command: x, targets: y}
");
    let config = load(dir.path(), None);
    let a = job(&config, "by_fields").schedule.describe();
    assert_eq!(a, "15 */5 8-18 * 1-6 1-5 *");
    assert_eq!(job(&config, "by_string").schedule.describe(), a);
}

#[test]
fn env_values_never_print() {
    let dir = tempdir();
    write(
        dir.path(),
        "e.yaml",
        &format!("{MINIMAL}  env:\n    DB_PASSWORD: hunter2-secret\n"),
    );
    let config = load(dir.path(), None);
    let j = job(&config, "backup");
    assert_eq!(j.env["DB_PASSWORD"], "hunter2-secret");
    let debug = format!("{j:?} {:?}", config.jobs);
    assert!(
        !debug.contains("hunter2") && debug.contains("DB_PASSWORD"),
        "{debug}"
    );
    let json = j.redacted_json();
    assert_eq!(json["env"]["DB_PASSWORD"], "***");
    assert!(!json.to_string().contains("hunter2"));
    assert_eq!(json["schedule"], "0 30 2 * * * *");
}

#[test]
fn database_url_servers_and_server_name_are_read_and_the_url_never_prints() {
    let dir = tempdir();
    write(
        dir.path(),
        "ha.yaml",
        "saltpeter_config:\n  database_url: postgres://sp:hunter2@db/sp?sslmode=require\n  \
         server_name: cron-a\n  servers: [ws://a:8889, 'wss://b:8889#sha256=00']\n",
    );
    let config = load(dir.path(), None);
    let sp = &config.saltpeter;
    assert_eq!(
        sp.database_url.as_ref().map(|u| u.expose()),
        Some("postgres://sp:hunter2@db/sp?sslmode=require")
    );
    assert_eq!(sp.server_name.as_deref(), Some("cron-a"));
    assert_eq!(sp.servers, ["ws://a:8889", "wss://b:8889#sha256=00"]);
    assert!(!format!("{sp:?}").contains("hunter2"));

    let bad = tempdir();
    write(
        bad.path(),
        "ha.yaml",
        "saltpeter_config:\n  database_url: mysql://u:hunter2@db/x\n  servers: [http://a]\n",
    );
    let config = load(bad.path(), None);
    let all: Vec<String> = config.diagnostics.iter().map(|d| d.to_string()).collect();
    let text = all.join("\n");
    assert!(
        text.contains("database_url") && text.contains("ha.yaml:2"),
        "{text}"
    );
    assert!(text.contains("servers"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(config.saltpeter.database_url.is_none(), "SQLite stays");
}

#[test]
fn anchors_and_merge_keys_work_like_pyyaml() {
    let dir = tempdir();
    write(
        dir.path(),
        "m.yaml",
        "\
defaults: &defaults
  schedule: '@daily'
  targets: 'web*'
  command: base
one:
  <<: *defaults
  command: own
two:
  <<: *defaults
",
    );
    let config = load(dir.path(), None);
    assert_eq!(job(&config, "one").command, "own");
    assert_eq!(job(&config, "two").command, "base");
    assert_eq!(job(&config, "two").target_expr, "web*");
}
