//! The supervisor's watchdog and the state directory's lock, with the real daemon: a role
//! that stops answering is killed and the daemon exits 1 for systemd to restart it; a
//! pause of the whole daemon is not a hang; a second daemon on the same state directory
//! waits for the first to exit (or gives up, exit 2) and never shares its files.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::util::*;

const WATCHDOG_3S: &str = "saltpeter_config:\n  watchdog: 3\n";

fn signal_pid(pid: u32, sig: Signal) {
    kill(Pid::from_raw(pid as i32), sig).expect("signal");
}

/// A second daemon on `d`'s directories, logging to `log`.
fn second_daemon(d: &Daemon, log: &std::path::Path, env: &[(&str, &str)]) -> Child {
    let out = std::fs::File::create(log).expect("second log");
    let err = out.try_clone().expect("log clone");
    d.command()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start the second daemon")
}

#[test]
fn a_role_that_stops_answering_is_killed_and_the_daemon_exits_1() {
    let mut d = Daemon::start(&[("01-watchdog.yaml", WATCHDOG_3S)]);
    let main = d.pid_of("main");
    signal_pid(main, Signal::SIGSTOP);
    let stopped = Instant::now();
    let status = d.wait_exit();
    let took = stopped.elapsed();
    let log = d.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("the main process (pid {main}) has not answered")),
        "{log}"
    );
    assert!(log.contains("saltpeter_config.watchdog: 3s"), "{log}");
    assert!(!alive(main), "the hung main process was not killed");
    // 3 s of silence, a turn, and the ordered stop of the others: well under the 20 s a
    // stopped process would cost through SIGTERM and SIGKILL at the grace.
    assert!(took < Duration::from_secs(15), "took {took:?}:\n{log}");
}

#[test]
fn a_pause_of_the_whole_daemon_is_not_a_hang() {
    let mut d = Daemon::start(&[
        ("01-watchdog.yaml", WATCHDOG_3S),
        (
            "jobs.yaml",
            "hello:\n  schedule: '@yearly'\n  targets: [paused]\n  command: 'echo hi'\n",
        ),
    ]);
    let mut pids: Vec<u32> = d.processes().into_iter().map(|(_, p)| p).collect();
    pids.sort();
    pids.dedup();
    // As a VM pause does: everything at once, for longer than the watchdog.
    for pid in &pids {
        signal_pid(*pid, Signal::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(8));
    for pid in &pids {
        signal_pid(*pid, Signal::SIGCONT);
    }
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        d.try_status(),
        None,
        "the daemon stopped:\n{}",
        d.log_text()
    );
    let id = d.run_now("hello");
    let run = d.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");
    let log = d.log_text();
    assert!(!log.contains("has not answered the supervisor"), "{log}");
}

#[test]
fn a_second_daemon_on_the_same_state_directory_gives_up_and_leaves_the_first_alone() {
    let d = Daemon::start(&[]);
    let log = d.root.path().join("second.log");
    let mut second = second_daemon(&d, &log, &[("SP_LOCK_WAIT_S", "1")]);
    let status = wait_until("the second daemon to exit", HANG, || {
        second.try_wait().ok().flatten()
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("saltpeter.lock"), "{text}");
    assert!(text.contains(&format!("pid {}", d.pid())), "{text}");
    // The first one still has its socket and pid file, and answers.
    assert!(d.socket().exists());
    let pid_file = std::fs::read_to_string(d.runtime_dir().join("saltpeter.pid"));
    assert_eq!(pid_file.expect("pid file").trim(), d.pid().to_string());
    assert_eq!(
        d.ctl_json(&["status"])["processes"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
}

#[test]
fn a_restart_inside_the_first_daemons_stop_waits_for_it_and_keeps_its_own_files() {
    let mut d = Daemon::start(&[]);
    let db = d.pid_of("db");
    let first = d.pid();
    // A stop that takes a while: db cannot run until the supervisor kills it.
    d.signal(Signal::SIGTERM);
    signal_pid(db, Signal::SIGSTOP);
    let log = d.root.path().join("second.log");
    let mut second = second_daemon(&d, &log, &[]);
    wait_until("the second daemon to wait for the lock", HANG, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("in use by another Saltpeter daemon")
            .then_some(())
    });
    let first_status = d.wait_exit();
    assert!(!alive(first), "the first supervisor is still there");
    assert!(first_status.code().is_some(), "{first_status}");
    let json = wait_until("the second daemon to answer", HANG, || {
        assert_eq!(
            second.try_wait().ok().flatten(),
            None,
            "the second daemon exited"
        );
        // A status of a daemon whose roles are not all up yet lists no processes.
        let out = d.ctl(&["--json", "status"]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let listed = json["processes"].as_array().is_some_and(|p| !p.is_empty());
        (out.status.success() && listed).then_some(json)
    });
    let supervisor = json["processes"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["role"] == "supervisor"))
        .and_then(|p| p["pid"].as_u64());
    assert_eq!(supervisor, Some(u64::from(second.id())), "{json}");
    // Nothing of the first one's exit took the second one's socket away.
    std::thread::sleep(Duration::from_secs(1));
    assert!(d.socket().exists(), "the admin socket is gone");
    assert!(d.ctl(&["status"]).status.success());
    signal_pid(second.id(), Signal::SIGTERM);
    let _ = wait_until("the second daemon to stop", HANG, || {
        second.try_wait().ok().flatten()
    });
}

/// systemd's watchdog (`WatchdogSec=`, `$WATCHDOG_USEC`) gets `WATCHDOG=1` about once a
/// second while every role answers; without `$WATCHDOG_USEC` nothing is sent, so a
/// manager that reads only `READY=1` never sees its socket fill.
#[test]
fn watchdog_1_goes_to_systemd_only_when_it_asked_for_it() {
    let mut asked = Daemon::prepare(&[]);
    asked.spawn_with_env(&[("WATCHDOG_USEC", "30000000")]);
    asked.wait_ready();
    let lines = asked.notify_lines(Duration::from_secs(4));
    let pings = lines.iter().filter(|l| *l == "WATCHDOG=1").count();
    assert!(pings >= 2, "{lines:?}\n{}", asked.log_text());

    let mut not_asked = Daemon::prepare(&[]);
    not_asked.spawn();
    not_asked.wait_ready();
    let lines = not_asked.notify_lines(Duration::from_secs(3));
    assert!(!lines.iter().any(|l| l == "WATCHDOG=1"), "{lines:?}");
    not_asked.signal(Signal::SIGTERM);
    assert!(not_asked.wait_exit().success());
    let lines = not_asked.notify_lines(Duration::from_millis(200));
    assert!(lines.iter().any(|l| l == "STOPPING=1"), "{lines:?}");
}
