//! Text from outside on its way into the log, events, the API and a terminal: a failed
//! launch's stderr, configuration strings (job names, target names), webhook URLs
//! (docs/security.md, "Text from outside in the log" and "Webhook URLs").

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use crate::util::*;

/// What a forged log line starts with (a date the log never writes: the tests do not
/// depend on the clock).
pub(crate) const FORGED: &str = "1999-09-09T09:09:09Z ERROR saltpeter FORGED-LINE";

/// A launch command that fails with `size` bytes of hostile text on stderr: a forged log
/// line, an OSC title and ANSI colour, a bidi override, then `size` bytes on one line.
pub(crate) fn hostile_launcher(dir: &std::path::Path, size: usize) -> String {
    let path = dir.join("hostile-wrapper");
    let script = format!(
        "#!/bin/sh\nprintf 'launch broke\\n{FORGED} one\\n\\033]0;pwned\\007\\033[31mred\\342\\200\\256txt\\n' >&2\n\
         head -c {size} /dev/zero | tr '\\0' 'x' >&2\nprintf '\\n{FORGED} two\\n' >&2\nexit 1\n"
    );
    std::fs::write(&path, script).expect("write the launcher");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_string_lossy().into_owned()
}

pub(crate) fn log_len(d: &Daemon) -> u64 {
    std::fs::metadata(&d.log).map(|m| m.len()).unwrap_or(0)
}

/// No line of `text` is forged, drives a terminal or reorders text.
pub(crate) fn assert_no_forged_lines(text: &str) {
    for line in text.lines() {
        assert!(
            !line.starts_with(FORGED) && !line.starts_with("\u{1b}"),
            "a forged line: {}",
            &line[..line.len().min(300)]
        );
    }
    assert!(!text.contains('\u{1b}'), "a raw ESC reached the text");
    assert!(!text.contains('\u{7}'), "a raw BEL reached the text");
    assert!(
        !text.contains('\u{202e}'),
        "a raw bidi override reached the text"
    );
}

#[test]
fn a_local_launch_failing_with_hostile_stderr_logs_escaped_clipped_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let launcher = hostile_launcher(dir.path(), 2_000_000);
    let jobs = format!(
        "broken:\n  schedule: '@yearly'\n  targets: [h1]\n  command: 'true'\n  \
         wrapper_path: {launcher}\n"
    );
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs)]);
    let before = log_len(&d);
    const LAUNCHES: u64 = 3;
    for _ in 0..LAUNCHES {
        let (run, code) = d.run_wait("broken");
        assert_eq!(code, 1, "{run}");
        assert_eq!(target(&run, "h1")["exit_code"], 254, "{run}");
    }
    // The cause is recorded, escaped and clipped.
    let failed = d.ctl_json(&["events", "--kind", "launch_failed"]);
    let failed = failed.as_array().cloned().unwrap_or_default();
    assert_eq!(failed.len() as u64, LAUNCHES, "{failed:?}");
    for e in &failed {
        let message = e["message"].as_str().unwrap_or("");
        assert!(message.contains("launch broke"), "{message}");
        assert!(message.len() < 8 * 1024, "a {} byte event", message.len());
    }
    let per_launch = (log_len(&d) - before) / LAUNCHES;
    println!("log growth per hostile failed local launch: {per_launch} bytes");
    assert!(
        per_launch < 24 * 1024,
        "{per_launch} bytes of log per failed launch"
    );
    let log = d.log_text();
    assert_no_forged_lines(&log);
    // Escaped, not dropped: the reader sees what the launcher said.
    assert!(
        log.contains("launch broke\\n1999-09-09"),
        "{}",
        d.log_tail(20)
    );
    assert!(log.contains("\\u{1b}]0;pwned\\u{7}"), "{}", d.log_tail(20));
    let events = d.ctl_json(&["events", "--limit", "200"]).to_string();
    assert!(events.len() < 64 * 1024, "{} bytes of events", events.len());
}

#[test]
fn hostile_configuration_strings_are_refused_and_printed_escaped() {
    // A job name with a newline and ANSI/OSC escapes, one with a bidi override, and a
    // local target name with control characters.
    let jobs = "\"evil\\n1999-09-09T09:09:09Z ERROR saltpeter FORGED-LINE\\e]0;t\\a\\e[31m\":\n  \
                schedule: '@yearly'\n  targets: [a]\n  command: 'true'\n\
                \"gnp\\u202Eexe\":\n  schedule: '@yearly'\n  targets: [a]\n  command: 'true'\n\
                badtarget:\n  schedule: '@yearly'\n  executor: local\n  \
                targets:\n    - fine\n    - \"bad\\nname\\e[2J\"\n  command: 'true'\n\
                good:\n  schedule: '@yearly'\n  targets: [a]\n  command: 'true'\n";
    // `config check` prints each problem on one line, escaped, with its file and line.
    let (ok, text) = config_check("jobs.yaml", jobs);
    assert!(!ok, "{text}");
    assert_no_forged_lines(&text);
    assert!(text.contains("evil\\n1999-09-09"), "{text}");
    assert!(text.contains("gnp\\u{202e}exe"), "{text}");
    let target_error = text
        .lines()
        .find(|l| l.contains("bad\\nname"))
        .unwrap_or_else(|| panic!("no error for the target name: {text}"));
    assert!(target_error.contains("jobs.yaml:14:"), "{target_error}");
    assert!(
        target_error.contains("control, escape or bidi"),
        "{target_error}"
    );
    assert!(
        text.contains("4 jobs (1 valid)") || text.contains("(1 valid)"),
        "{text}"
    );

    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let log = d.log_text();
    assert_no_forged_lines(&log);
    assert!(log.contains("evil\\n1999-09-09"), "{log}");
    // `saltpeterctl status` lists the configuration errors escaped.
    let status = d.ctl(&["status"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert_no_forged_lines(&status);
    assert!(status.contains("config error:"), "{status}");
    assert!(status.contains("evil\\n1999-09-09"), "{status}");
    // Only the good job runs; the others are refused, never launched.
    let jobs = d.ctl_json(&["jobs"]).to_string();
    assert!(!jobs.contains("\\u001b"), "{jobs}");
    let (_, code) = d.run_wait("good");
    assert_eq!(code, 0);
    let refused = d.ctl(&["run", "badtarget"]);
    assert!(!refused.status.success());
}

/// A receiver that answers every request with 500 and remembers the request lines.
fn failing_receiver(listener: TcpListener) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // The head and a body of Content-Length bytes.
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            out.lock()
                .unwrap()
                .push(text.lines().next().unwrap_or("").to_string());
            let _ = stream.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    seen
}

#[test]
fn a_failing_webhook_never_shows_its_path_or_query() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = failing_receiver(listener);
    let path = "/services/T0/B0/PATHTOKEN-9f8e7d";
    let jobs = format!(
        "hooked:\n  schedule: '@yearly'\n  targets: [w1]\n  command: 'exit 1'\n  notify:\n    \
         webhook: http://127.0.0.1:{port}{path}?token=QUERYTOKEN-1a2b\n"
    );
    let (d, api) = crate::api::start(&jobs);
    d.run_wait("hooked");
    // The receiver got the POST at its real path.
    wait_until("the webhook's POST", HANG, || {
        let s = seen.lock().unwrap();
        s.iter().any(|l| l.contains("PATHTOKEN")).then_some(())
    });
    let failed = wait_until("the notification_failed event", HANG, || {
        let v = d.ctl_json(&["events", "--kind", "notification_failed"]);
        (v.as_array().is_some_and(|a| !a.is_empty())).then_some(v)
    });
    let shown = format!("http://127.0.0.1:{port}/…");
    assert!(failed.to_string().contains(&shown), "{failed}");
    let secrets = ["PATHTOKEN", "QUERYTOKEN"];
    let mut places = vec![
        ("the log", d.log_text()),
        (
            "events",
            d.ctl_json(&["events", "--limit", "500"]).to_string(),
        ),
        (
            "saltpeterctl deliveries",
            d.ctl_json(&["deliveries"]).to_string(),
        ),
        (
            "saltpeterctl show",
            d.ctl_json(&["show", "hooked"]).to_string(),
        ),
    ];
    for api_path in ["/api/v1/deliveries", "/api/v1/jobs/hooked"] {
        let resp = crate::api::get(api, api_path);
        assert_eq!(resp.status, 200, "{api_path}: {}", resp.text());
        places.push((api_path, resp.text()));
    }
    for (place, text) in &places {
        for secret in secrets {
            assert!(!text.contains(secret), "{place} shows {secret}: {text}");
        }
    }
    let deliveries = d.ctl_json(&["deliveries"]);
    assert_eq!(deliveries[0]["destination"], shown.as_str(), "{deliveries}");
}
