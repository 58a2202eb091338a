//! Minion-controlled text against a real Salt master (the shared testbed): a launch that
//! fails with 2 MB of hostile stderr, and a minion id that reads as a `salt` option.

use std::os::unix::fs::PermissionsExt;

use crate::hostile_text::{assert_no_forged_lines, hostile_launcher, log_len};
use crate::salt::{salt_daemon, testbed};
use crate::util::*;

/// The minion these tests launch on (minion-04 is the one other tests stop).
const MINION: &str = "minion-02";

#[test]
fn a_salt_launch_failing_with_hostile_stderr_logs_escaped_clipped_lines() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = std::env::var("SALT_CONFIG_DIR").expect("SALT_CONFIG_DIR");
    // The minion runs this "wrapper" (no deployment): it fails with 900 KB on stderr,
    // which Salt carries back in `cmd.run_all`'s return (a return over the master's
    // `max_event_size`, 1 MiB, would reach the daemon as `VALUE_TRIMMED`).
    let dir = tempfile::Builder::new()
        .prefix("hostile-")
        .tempdir_in(root.join("var"))
        .expect("tempdir");
    let launcher = hostile_launcher(dir.path(), 900_000);
    let jobs = format!(
        "saltpeter_config:\n  wrapper_deploy: false\n\
         saltbroken:\n  schedule: '@yearly'\n  targets: {MINION}\n  command: 'true'\n  \
         wrapper_path: {launcher}\n"
    );
    let d = salt_daemon(&root, &bin, &config_dir, 5, &jobs);
    let before = log_len(&d);
    const LAUNCHES: u64 = 2;
    for _ in 0..LAUNCHES {
        let (run, code) = d.run_wait("saltbroken");
        assert_ne!(code, 0, "{run}");
        assert_eq!(target(&run, MINION)["exit_code"], 254, "{run}");
    }
    let per_launch = (log_len(&d) - before) / LAUNCHES;
    println!("log growth per hostile failed salt launch: {per_launch} bytes");
    assert!(
        per_launch < 32 * 1024,
        "{per_launch} bytes of log per failed launch"
    );
    let log = d.log_text();
    assert_no_forged_lines(&log);
    assert!(
        log.contains("launch broke\\n1999-09-09"),
        "{}",
        d.log_tail(20)
    );
    let failed = d.ctl_json(&["events", "--kind", "launch_failed"]);
    for e in failed.as_array().cloned().unwrap_or_default() {
        let message = e["message"].as_str().unwrap_or("");
        assert!(message.contains("launch broke"), "{message}");
        assert!(message.len() < 8 * 1024, "a {} byte event", message.len());
    }
}

#[test]
fn a_minion_id_is_never_a_salt_option_nor_a_forged_log_line() {
    let Some((root, bin, _)) = testbed() else {
        return;
    };
    let config_dir = std::env::var("SALT_CONFIG_DIR").expect("SALT_CONFIG_DIR");
    let dir = tempfile::Builder::new()
        .prefix("inject-")
        .tempdir_in(root.join("var"))
        .expect("tempdir");
    // `salt` as the daemon sees it: the real one, run in `dir`, except that a ping also
    // answers for a minion whose id is a `salt` option writing a file (as a minion so
    // named, or a forged row of another server, would put it first in a launch's or a
    // deployment's list; Salt accepts the id: it refuses only `/`, `\` and NUL, and a
    // list holding an invalid id matches nothing), and for one whose id would forge a
    // log line.
    let hostile = "--out-file=injected";
    let forging = format!("evil\n{} id\u{1b}]0;t\u{7}", crate::hostile_text::FORGED);
    let pings = dir.path().join("pings");
    let answers: Vec<String> = [hostile, forging.as_str(), MINION]
        .iter()
        .map(|m| serde_json::json!({ *m: true }).to_string())
        .collect();
    std::fs::write(&pings, answers.join("\n") + "\n").expect("write the pings");
    let salt = dir.path().join("salt");
    std::fs::write(
        &salt,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = test.ping ]; then\n    \
             exec cat '{}'\n  fi\ndone\ncd '{}' && exec {bin} \"$@\"\n",
            pings.display(),
            dir.path().display()
        ),
    )
    .expect("write salt");
    std::fs::set_permissions(&salt, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let jobs = format!(
        "saltpeter_config:\n  salt_bridge: false\n\
         injected:\n  schedule: '@yearly'\n  targets: {MINION}\n  command: 'echo ran'\n"
    );
    let d = salt_daemon(&root, &salt.to_string_lossy(), &config_dir, 5, &jobs);
    let (run, _) = d.run_wait("injected");
    let written: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("injected"))
        .collect();
    assert!(
        written.is_empty(),
        "salt wrote {written:?}: the id was taken as an option"
    );
    // The real minion was deployed to and ran; the other name was a name, not an option.
    assert_eq!(
        target(&run, MINION)["exit_code"],
        0,
        "{run}\n{}",
        d.log_tail(40)
    );
    assert_ne!(target(&run, hostile)["exit_code"], 0, "{run}");
    // The id that would forge a line is no target: it shows, escaped, as unreachable.
    let shown = forging.escape_default().to_string();
    assert_eq!(target(&run, &shown)["exit_code"], 255, "{run}");
    assert_no_forged_lines(&d.log_text());
}
