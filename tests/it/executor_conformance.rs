//! `saltpeterctl executor test` against real plugins, no daemon: the Python example
//! (examples/executors) passes every check; each broken plugin of
//! tests/fixtures/executors fails with its breach named, quickly, and leaves no process
//! of its group behind; a missing or non-executable file and a sha256 pin that does not
//! match fail before anything runs. The runner keeps at most 8 MiB of a 100 MB flood.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use saltpeter::executor::protocol::{Op, read_output, request_line};
use saltpeter::executor::spec::{self, PluginSpec};
use saltpeter::executor::{MAX_STDOUT, runner};
use serde_json::{Value, json};

use crate::util::*;

/// How long any one `executor test` may take: the hanging plugin's 10 s deadline and
/// ample room (only a hang gets near it).
const BOUND: Duration = Duration::from_secs(60);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn pyexec() -> PathBuf {
    repo("examples/executors/saltpeter-executor-pyexec")
}

fn fixture(name: &str) -> PathBuf {
    repo("tests/fixtures/executors").join(format!("saltpeter-executor-{name}"))
}

struct Report {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `saltpeterctl executor test PATH ARGS...`, which must end within [`BOUND`].
fn conformance(path: &Path, args: &[&str]) -> Report {
    let child = Command::new(CTL)
        .args(["executor", "test"])
        .arg(path)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start saltpeterctl");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    wait_until("saltpeterctl executor test to end", BOUND, || {
        (!alive(pid)).then_some(())
    });
    let out = waiter
        .join()
        .expect("the waiting thread")
        .expect("saltpeterctl's output");
    Report {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn python3_present() {
    let present = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        present,
        "python3 is missing (Debian: python3; scripts/install-test-deps installs it)"
    );
}

/// No process runs `what` (a plugin's path, a marker of its children) any more.
fn none_left(what: &str) {
    wait_until(
        &format!("no process running {what} left"),
        Duration::from_secs(30),
        || pids_with(what).is_empty().then_some(()),
    );
}

#[test]
fn the_python_example_passes_every_check() {
    python3_present();
    let path = pyexec();
    let config = r#"{"machines": ["web1", "web2", "db1"], "down": ["db1"]}"#;
    let r = conformance(
        &path,
        &["--config", config, "--target", "web*,db1", "--launch"],
    );
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    for check in [
        "file",
        "name",
        "by_hand",
        "describe",
        "unknown_field",
        "other_version",
        "unknown_op",
        "check_config",
        "unknown_key",
    ] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok {check}"))),
            "{check}: {}",
            r.stdout
        );
    }
    let line = |name: &str| {
        r.stdout
            .lines()
            .find(|l| l.starts_with(&format!("ok {name}:")))
            .unwrap_or_else(|| panic!("no `ok {name}` in {}", r.stdout))
            .to_string()
    };
    assert!(line("resolve").ends_with("web1, web2, db1"), "{}", r.stdout);
    assert!(
        line("ping").contains("web2 reachable") && line("ping").contains("db1 unreachable"),
        "{}",
        r.stdout
    );
    assert!(
        line("launch").contains("web1 launched") && line("launch").contains("db1 unreachable"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("skip kill: no capability `kill`"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("FAIL"), "{}", r.stdout);

    // A list target and explicit machines, read as JSON.
    let out = Command::new(CTL)
        .args(["--json", "executor", "test"])
        .arg(&path)
        .args(["--target", "a,b", "--target-type", "list", "--machine", "a"])
        .output()
        .expect("saltpeterctl");
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["passed"], true, "{report}");
    let resolve = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "resolve"))
        .expect("a resolve check");
    assert_eq!(resolve["verdict"], "ok", "{resolve}");
    assert!(
        resolve["details"]
            .as_str()
            .unwrap_or("")
            .ends_with(": a, b"),
        "{resolve}"
    );
}

/// The walk-through of docs/executors.md is a complete plugin: taken from the document
/// as it is, it passes.
#[test]
fn the_documented_walk_through_plugin_passes() {
    python3_present();
    let doc = std::fs::read_to_string(repo("docs/executors.md")).expect("docs/executors.md");
    let code = doc
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .map(|(code, _)| code)
        .expect("a python block in docs/executors.md");
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("saltpeter-executor-here");
    std::fs::write(&path, code).expect("write the plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let r = conformance(
        &path,
        &["--target", "a,b", "--target-type", "list", "--launch"],
    );
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("ok launch: a launched, b launched"),
        "{}",
        r.stdout
    );
}

#[test]
fn the_python_example_refuses_a_bad_configuration() {
    python3_present();
    let r = conformance(&pyexec(), &["--config", r#"{"machines": "web1"}"#]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("FAIL check_config: config_errors: the configuration given is refused: config.machines: must be a list"),
        "{}",
        r.stdout
    );
}

#[test]
fn each_broken_plugin_fails_with_its_breach_named_and_leaves_nothing() {
    for (name, breach) in [
        ("wrong-protocol", "wrong_protocol"),
        ("garbage", "no_hello"),
        ("no-hello", "no_hello"),
        ("no-result", "no_result"),
        ("after-result", "line_after_result"),
        ("flood", "stdout_too_large"),
        ("hang", "deadline"),
    ] {
        let path = fixture(name);
        let r = conformance(&path, &["--timeout", "5"]);
        assert_eq!(r.code, Some(1), "{name}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("ok file") && r.stdout.contains("ok by_hand"),
            "{name}: {}",
            r.stdout
        );
        assert!(
            r.stdout.contains(&format!("FAIL describe: {breach}: ")),
            "{name}: {}",
            r.stdout
        );
        assert!(r.stdout.contains(": FAILED: "), "{name}: {}", r.stdout);
        if breach == "deadline" {
            // The session ends there rather than wait out a deadline per operation.
            assert!(
                r.stdout
                    .contains("skip ping: an earlier operation was killed at its deadline"),
                "{}",
                r.stdout
            );
        }
        none_left(path_str(&path));
    }
    // The hanging plugin's background child went with its group.
    none_left("sleep 86123");
    none_left("sleep 86124");
}

#[test]
fn a_plugin_that_shows_the_launch_token_fails_token_leak() {
    let path = fixture("leaky");
    let r = conformance(&path, &["--machine", "m1", "--machine", "m2", "--launch"]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout.contains("FAIL launch: token_leak: "),
        "{}",
        r.stdout
    );
    // The report itself never shows a token.
    assert!(!r.stdout.contains("conformance-token-"), "{}", r.stdout);
    assert!(!r.stderr.contains("conformance-token-"), "{}", r.stderr);
    none_left(path_str(&path));
}

#[test]
fn a_missing_or_non_executable_file_fails_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("saltpeter-executor-nowhere");
    let r = conformance(&missing, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!(
            "FAIL file: missing: {} does not exist",
            missing.display()
        )),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("by_hand"), "{}", r.stdout);

    let plain = dir.path().join("saltpeter-executor-plain");
    std::fs::copy(pyexec(), &plain).expect("copy the plugin");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let r = conformance(&plain, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout.contains("FAIL file: not_executable: "),
        "{}",
        r.stdout
    );
    let r = conformance(dir.path(), &[]);
    assert!(
        r.stdout.contains("FAIL file: not_executable: "),
        "{}",
        r.stdout
    );
}

/// The daemon's `--exec-pinned` (which runs the very file it hashed) is not exercised
/// here: this checks the hash (`spec::sha256_file`) against `sha256sum` and the
/// conformance check's pin.
#[test]
fn a_sha256_pin_that_does_not_match_is_refused() {
    let path = fixture("no-result");
    let sum = Command::new("sha256sum")
        .arg(&path)
        .output()
        .expect("sha256sum (coreutils)");
    let expected = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .expect("a hash")
        .to_string();
    assert_eq!(spec::sha256_file(&path), Ok(expected.clone()));
    assert_eq!(spec::check_file(&path), Ok(()));

    let wrong = "0".repeat(64);
    let r = conformance(&path, &["--sha256", &wrong]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!(
            "FAIL file: sha256_mismatch: {} has sha256 {expected}, the pin says {wrong}",
            path.display()
        )),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("describe"), "{}", r.stdout);
    let r = conformance(&path, &["--sha256", &expected.to_uppercase()]);
    assert!(
        r.stdout.contains("ok file: ") && r.stdout.contains("with the pinned sha256"),
        "{}",
        r.stdout
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["--config", "[1]"][..],
        &["--config", "{nope"][..],
        &["--sha256", "abc"][..],
        &["--target-type", "list"][..],
    ] {
        let r = conformance(&pyexec(), args);
        assert_eq!(r.code, Some(2), "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}

#[test]
fn the_runner_keeps_at_most_8_mib_of_a_100_mb_flood() {
    let path = fixture("flood");
    let spec = PluginSpec {
        name: "flood".to_string(),
        path: path.clone(),
        sha256: None,
        config: "{}".to_string(),
        timeout_s: 60,
    };
    let request = request_line(Op::Describe, "flood", &json!({}), json!({}));
    let raw = runner::run(
        spec.command(Path::new(DAEMON)),
        request.as_bytes(),
        spec.deadline(Op::Describe, 0),
    )
    .expect("start the plugin");
    assert_eq!(raw.deadline, None, "drained before its deadline");
    assert!(raw.stdout.len() <= MAX_STDOUT, "{} kept", raw.stdout.len());
    assert!(
        raw.stdout.len() + raw.dropped >= 100_000_000,
        "{} kept, {} dropped",
        raw.stdout.len(),
        raw.dropped
    );
    let reading = read_output(Op::Describe, &raw);
    assert_eq!(
        reading.breach.as_ref().map(|b| b.name()),
        Some("stdout_too_large")
    );
    none_left(path_str(&path));
}
