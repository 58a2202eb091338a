//! The faults of one server on SQLite: each role stopped, the whole daemon paused, the
//! state directory's disk full.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::*;
use crate::output_backpressure::Tmpfs;

/// A server on SQLite with the load; `env` goes to the daemon.
fn loaded(ledger: &Ledger, env: &[(&str, &str)]) -> Daemon {
    let mut d = Daemon::prepare(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs(&ledger.path))]);
    d.spawn_with_env(env);
    d.wait_ready();
    d
}

/// SIGSTOP of `roles` (all of the daemon's processes when empty) for `pause`.
fn stop_for(d: &Daemon, roles: &[&str], pause: Duration) -> FaultEnd {
    let pids: Vec<u32> = d
        .processes()
        .into_iter()
        .filter(|(r, _)| roles.is_empty() || roles.contains(&r.as_str()))
        .map(|(_, p)| p)
        .collect();
    signal(&pids, Signal::SIGSTOP);
    std::thread::sleep(pause);
    signal(&pids, Signal::SIGCONT);
    FaultEnd::now()
}

fn role_stopped(role: &str, pause: Duration) {
    let ledger = Ledger::new();
    // db's calls time out within the pause (as they would after 10 s).
    let d = loaded(&ledger, &[("SP_DB_TIMEOUT_S", "4")]);
    warm_up(&d);
    let pid = d.pid_of(role);
    let end = stop_for(&d, &[role], pause);
    let tally = check(&[&d], &ledger, &end);
    assert_eq!(d.pid_of(role), pid, "the {role} process was restarted");
    assert_clean(
        &format!("{role} stopped {}s", pause.as_secs()),
        &tally,
        &[&d],
    );
}

#[test]
fn main_stopped_loses_nothing_and_kills_nothing() {
    role_stopped("main", lasting(12, 31));
}

#[test]
fn hub_stopped_loses_nothing_and_kills_nothing() {
    role_stopped("hub", lasting(12, 45));
}

#[test]
fn db_stopped_loses_nothing_and_leaves_no_run_undriven() {
    role_stopped("db", lasting(12, 70));
}

#[test]
fn blocking_stopped_loses_nothing() {
    role_stopped("blocking", lasting(12, 31));
}

#[test]
fn the_whole_daemon_paused_loses_nothing_and_kills_nothing() {
    let ledger = Ledger::new();
    let d = loaded(&ledger, &[]);
    warm_up(&d);
    let supervisor = d.pid();
    let end = stop_for(&d, &[], lasting(12, 31));
    let tally = check(&[&d], &ledger, &end);
    assert_eq!(d.pid_of("supervisor"), supervisor, "the daemon restarted");
    assert_clean("whole daemon paused", &tally, &[&d]);
}

#[test]
fn a_full_disk_under_sqlite_loses_nothing_and_heals_itself() {
    let ledger = Ledger::new();
    let mut d = Daemon::prepare(&[("01-fast.yaml", FAST), ("jobs.yaml", &jobs(&ledger.path))]);
    let Some(disk) = Tmpfs::state_of(&d, "24m") else {
        return;
    };
    d.spawn();
    d.wait_ready();
    warm_up(&d);
    let filler = disk.fill();
    let lasts = lasting(15, 40);
    let full_since = std::time::Instant::now();
    // The fault bites: the daemon reports storage trouble while the disk is full.
    let mut seen = false;
    while full_since.elapsed() < lasts {
        seen |= !d.ctl_json(&["status"])["db_error"].is_null();
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(seen, "no storage trouble reported while the disk was full");
    std::fs::remove_file(&filler).expect("free the disk");
    let end = FaultEnd::now();
    let tally = check(&[&d], &ledger, &end);
    let status = d.ctl_json(&["status"]);
    assert!(
        status["db_error"].is_null(),
        "storage trouble stays: {status}"
    );
    assert_clean("disk full", &tally, &[&d]);
}
