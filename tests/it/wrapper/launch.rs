//! One `--daemonize` launch command for several runs (`SP_RUN=41,42,43`), as the daemon
//! starts every run due on a minion with one Salt publish: one background wrapper per
//! run, one line per run for the daemon to parse, one hash of the build for all.

use std::collections::BTreeMap;
use std::process::{Command, Output as ProcessOutput, Stdio};
use std::time::{Duration, Instant};

use super::peer::*;
use saltpeter::wire::wrapper::{ServerMsg, Stream, WrapperMsg};

const MINION_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/minion-keys/a.pem"
);

/// The launch command as Salt runs it on a minion, for the runs in `runs`.
fn salt_launch(url: &str, runs: &str, log: &std::path::Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("SP_URL", url)
        .env("SP_RUN", runs)
        .env("SP_WRAPPER_LOG", "debug")
        .env_remove("SP_MACHINE")
        .env_remove("SP_TOKEN")
        .args(["--daemonize", "--minion-id", "minion-1", "--minion-key"])
        .arg(MINION_KEY)
        .args(["--stage-grace", "5", "--log"])
        .arg(log)
        .stdin(Stdio::null());
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The pid of each `run N continues in the background (pid P)` line, by run.
fn announced(out: &ProcessOutput) -> BTreeMap<u64, u32> {
    let stdout = text(&out.stdout);
    stdout
        .lines()
        .map(|line| {
            let rest = line
                .strip_prefix("saltpeter-wrapper: run ")
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            let (run, pid) = rest
                .strip_suffix(')')
                .and_then(|r| r.split_once(" continues in the background (pid "))
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            (run.parse().unwrap(), pid.parse().unwrap())
        })
        .collect()
}

#[test]
fn one_launch_starts_a_wrapper_for_each_run_with_one_build_hash() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wrappers.log");
    let peer = Peer::new();
    let t0 = Instant::now();
    // A duplicate is started once.
    let out = salt_launch(&peer.url(), "41,42,43,42", &log)
        .output()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "the launch waited");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout).lines().count(),
        3,
        "{}",
        text(&out.stdout)
    );
    let pids = announced(&out);
    assert_eq!(pids.keys().copied().collect::<Vec<_>>(), [41, 42, 43]);

    let binary = std::fs::File::open(BIN).unwrap();
    let build = saltpeter::wrapper::sha256_hex(binary).unwrap();
    let mut seen = BTreeMap::new();
    for _ in 0..3 {
        let mut conn = peer.accept();
        let (run, pid) = match conn.next_msg(&mut Output::default()) {
            WrapperMsg::Hello {
                run,
                machine,
                minion_key,
                token,
                pid,
                wrapper_sha256,
                wrapper_path,
                ..
            } => {
                assert_eq!(
                    (machine.as_str(), minion_key, token),
                    ("minion-1", true, None)
                );
                assert_eq!(wrapper_sha256.as_deref(), Some(build.as_str()), "run {run}");
                assert_eq!(wrapper_path.as_deref(), Some(BIN), "run {run}");
                (run, pid)
            }
            other => panic!("expected hello, got {other:?}"),
        };
        // The announced pid is the wrapper that says hello.
        assert_eq!(pids.get(&run), Some(&pid), "run {run}");
        conn.welcome(&job("echo run $SP_RUN"), "k", 0, false);
        let mut output = Output::default();
        conn.collect_until_exited(&mut output);
        assert_eq!(output.text(Stream::Stdout), format!("run {run}\n"));
        conn.send(&ServerMsg::Done {});
        assert!(seen.insert(run, pid).is_none(), "run {run} connected twice");
    }
    assert_eq!(seen, pids);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pids.values().all(|&pid| process_gone(pid as i32)) {
        assert!(
            Instant::now() < deadline,
            "a wrapper did not exit after done"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    for run in [41, 42, 43] {
        assert!(
            log_text.contains(&format!("for run {run} on minion-1")),
            "{log_text}"
        );
    }
}

#[test]
fn a_bad_run_list_starts_nothing_and_says_which_value() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wrappers.log");
    let peer = Peer::new();
    for (runs, names) in [
        ("41,,43", "item 2 is empty"),
        ("41,x,43", "\"x\""),
        ("41,0", "\"0\""),
    ] {
        let out = salt_launch(&peer.url(), runs, &log).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{runs}");
        assert_eq!(text(&out.stdout), "", "{runs}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("SP_RUN") && stderr.contains(names),
            "{stderr}"
        );
    }
    let many = (1..=1001)
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = salt_launch(&peer.url(), &many, &log).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("more than 1000"),
        "{}",
        text(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(peer.try_accept().is_none(), "a wrapper was started");
}

#[test]
fn several_runs_need_daemonize_and_the_minion_key() {
    let peer = Peer::new();
    let out = wrapper_cmd(&peer.url(), 1)
        .env("SP_RUN", "41,42")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--daemonize"),
        "{}",
        text(&out.stderr)
    );
    let out = wrapper_cmd(&peer.url(), 1)
        .env("SP_RUN", "41,42")
        .arg("--daemonize")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("--minion-key"),
        "{}",
        text(&out.stderr)
    );
    assert!(peer.try_accept().is_none(), "a wrapper was started");
}
