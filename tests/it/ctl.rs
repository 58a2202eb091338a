//! `saltpeterctl` without and with a daemon: config check, usage errors, reload, logging.

use std::process::Command;
use std::time::Duration;

use crate::util::*;

fn ctl(args: &[&str]) -> std::process::Output {
    Command::new(CTL).args(args).output().expect("saltpeterctl")
}

#[test]
fn config_check_reports_file_line_column_and_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("web.yaml"),
        "good:\n  schedule: '@daily'\n  targets: a\n  command: 'true'\n\
         bad:\n  min: 0\n  hour: 25\n  dom: '*'\n  mon: '*'\n  dow: '*'\n  targets: a\n  command: x\n",
    )
    .expect("write");
    let out = ctl(&["config", "check", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("web.yaml:7:9:"), "{text}");
    assert!(text.contains("`hour`"), "{text}");
    let out = ctl(&["--json", "config", "check", path_str(dir.path())]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], false);
    assert_eq!(v["valid_jobs"], 1);

    std::fs::write(
        dir.path().join("web.yaml"),
        "good:\n  schedule: '@daily'\n  targets: a\n  command: 'true'\n",
    )
    .expect("write");
    assert_eq!(
        ctl(&["config", "check", path_str(dir.path())])
            .status
            .code(),
        Some(0)
    );
    let out = ctl(&["config", "check", "/nonexistent/saltpeter"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/saltpeter"));
    // The shipped quick start is valid.
    let quickstart = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart");
    assert_eq!(ctl(&["config", "check", quickstart]).status.code(), Some(0));
}

#[test]
fn usage_and_connection_errors_are_one_line_exit_2() {
    let out = ctl(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = ctl(&["runs", "--limit", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    let out = ctl(&["--socket", "/nonexistent/admin.sock", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/admin.sock"), "{err}");
    // $SALTPETER_SOCKET is used when --socket is absent.
    let out = Command::new(CTL)
        .env("SALTPETER_SOCKET", "/nonexistent/other.sock")
        .arg("status")
        .output()
        .expect("saltpeterctl");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/other.sock"));
}

#[test]
fn config_changes_are_picked_up_and_bad_files_keep_their_jobs() {
    let d = Daemon::start(&[(
        "web.yaml",
        "first:\n  schedule: '@daily'\n  targets: a\n  command: 'true'\n",
    )]);
    let names = |d: &Daemon| -> Vec<String> {
        d.ctl_json(&["jobs"])
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["name"].as_str().expect("name").to_string())
            .collect()
    };
    assert_eq!(names(&d), vec!["first"]);
    d.write_config(
        "more.yml",
        "second:\n  schedule: '@daily'\n  targets: a\n  command: 'true'\n",
    );
    wait_until("second job loaded", HANG, || {
        names(&d).contains(&"second".to_string()).then_some(())
    });
    // A syntax error: the file's jobs keep their last good version, the error is shown.
    d.write_config("web.yaml", "first: [unclosed\n");
    wait_until("error visible in status", HANG, || {
        let status = d.ctl_json(&["status"]);
        (!status["config_errors"].as_array()?.is_empty()).then_some(())
    });
    assert!(names(&d).contains(&"first".to_string()));
    // SIGHUP and `reload` both work.
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let out = d.ctl(&["reload"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("reloaded"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(d.log_text().contains("SIGHUP"));
}

#[test]
fn journald_lines_carry_priority_and_role_without_timestamp() {
    let mut d = Daemon::prepare(&[]);
    let log = std::fs::File::create(&d.log).expect("log");
    let child = d
        .command()
        .env("JOURNAL_STREAM", "8:12345")
        .stdout(log.try_clone().expect("clone"))
        .stderr(log)
        .spawn()
        .expect("spawn");
    d.child = Some(child);
    d.wait_ready();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_exit();
    let text = d.log_text();
    let roles = ["supervisor", "hub", "main", "db", "blocking"];
    for line in text.lines() {
        let rest = line
            .strip_prefix('<')
            .and_then(|l| l.split_once('>'))
            .unwrap_or_else(|| panic!("no priority prefix: {line}"));
        assert!(rest.0.parse::<u8>().is_ok_and(|p| p <= 7), "{line}");
        assert!(
            roles.iter().any(|r| rest.1.starts_with(&format!("{r}: "))),
            "no role: {line}"
        );
        assert!(
            !rest.1.contains("T0") || !rest.1.contains("Z "),
            "timestamp in {line}"
        );
    }
    assert!(text.contains("<6>supervisor: ready"), "{text}");
}
