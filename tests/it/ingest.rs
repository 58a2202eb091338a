//! Output flow control with real processes: many wrappers streaming at once keep the
//! hub's and main's memory bounded, and a stopped database pushes back to the wrappers
//! (their windows and spools) instead of filling the daemon, without losing a byte or
//! declaring a waiting wrapper lost.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::util::*;

const MIB: u64 = 1024 * 1024;

/// The daemon's output budget is 32 MiB plus a 16 MiB reserve (`hub/wrappers/flow.rs`);
/// with the processes' own memory, a bounded hub or main stays well under this. Without
/// flow control each wrapper keeps up to 16 MiB unacknowledged, all of it queued there.
const BOUNDED_RSS_KIB: u64 = 100 * 1024;

fn pid_of(procs: &[(String, u32)], role: &str) -> u32 {
    procs
        .iter()
        .find(|(r, _)| r == role)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("no {role} process in {procs:?}"))
}

/// The highest RSS (KiB) of hub and main seen while `until` is false.
fn peak_rss_while(procs: &[(String, u32)], mut until: impl FnMut() -> bool) -> (u64, u64) {
    let (hub, main) = (pid_of(procs, "hub"), pid_of(procs, "main"));
    let (mut peak_hub, mut peak_main) = (0, 0);
    let start = Instant::now();
    while !until() {
        peak_hub = peak_hub.max(rss_kib(hub).unwrap_or(0));
        peak_main = peak_main.max(rss_kib(main).unwrap_or(0));
        assert!(start.elapsed() < HANG * 3, "no end in sight");
        std::thread::sleep(Duration::from_millis(50));
    }
    (peak_hub, peak_main)
}

/// Every target exited 0 with `each` bytes of `yes` output stored as head and tail.
fn check_yes_output(d: &Daemon, run: u64, machines: &[String], each: u64) {
    let record = d.run_record(run);
    for m in machines {
        let t = target(&record, m);
        assert_eq!(t["exit_code"], 0, "{m}: {record}\n{}", d.log_text());
        assert_eq!(t["reason"], "exit", "{m}: {record}");
        let out = d.ctl_json(&["output", &run.to_string(), m]);
        assert_eq!(out["total_bytes"], each, "{m}");
        // 1 MiB head + 1 MiB tail (the default limit); the rest omitted.
        assert_eq!(out["omitted_bytes"], each - 2 * MIB, "{m}");
        let text = out["output"].as_str().expect("output text");
        assert_eq!(text.len() as u64, 2 * MIB, "{m}");
        assert!(
            text.bytes()
                .enumerate()
                .all(|(i, b)| b == if i % 2 == 0 { b'y' } else { b'\n' })
        );
    }
}

fn yes_job(name: &str, machines: &[String], mib: u64) -> String {
    format!(
        "{name}:\n  schedule: '@yearly'\n  targets: [{}]\n  timeout: 0\n  command: 'yes | head -c {mib}M'\n",
        machines.join(", ")
    )
}

#[test]
fn many_wrappers_streaming_keep_hub_and_main_memory_bounded() {
    let machines: Vec<String> = (0..50).map(|i| format!("ingest{i}")).collect();
    let d = Daemon::start(&[
        ("01-fast.yaml", "saltpeter_config:\n  pickup_timeout: 120\n"),
        ("jobs.yaml", &yes_job("many", &machines, 4)),
    ]);
    let procs = d.processes();
    let run = d.run_now("many");
    let (hub, main) = peak_rss_while(&procs, || is_final(&d.run_record(run)));
    check_yes_output(&d, run, &machines, 4 * MIB);
    assert!(
        hub < BOUNDED_RSS_KIB && main < BOUNDED_RSS_KIB,
        "200 MiB of output streamed at once: hub peaked at {hub} KiB, main at {main} KiB"
    );
}

#[test]
fn a_stopped_database_pushes_back_to_the_wrappers() {
    let machines: Vec<String> = (0..8).map(|i| format!("slowdb{i}")).collect();
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("jobs.yaml", &yes_job("flood", &machines, 24)),
    ]);
    let procs = d.processes();
    let db = Pid::from_raw(pid_of(&procs, "db") as i32);
    let run = d.run_now("flood");
    wait_until("every command started", HANG, || {
        let record = d.run_record(run);
        machines
            .iter()
            .all(|m| !target(&record, m)["started"].is_null())
            .then_some(())
    });
    nix::sys::signal::kill(db, Signal::SIGSTOP).expect("stop db");
    // 5 s stopped: longer than the 3 heartbeats (3 s) after which a silent wrapper is
    // lost, while the 8 wrappers have 192 MiB to send.
    let stopped = Instant::now();
    let (hub, main) = peak_rss_while(&procs, || stopped.elapsed() > Duration::from_secs(5));
    nix::sys::signal::kill(db, Signal::SIGCONT).expect("continue db");
    assert!(
        hub < BOUNDED_RSS_KIB && main < BOUNDED_RSS_KIB,
        "while db was stopped: hub peaked at {hub} KiB, main at {main} KiB"
    );
    d.wait_run_final(run);
    check_yes_output(&d, run, &machines, 24 * MIB);
    assert!(
        !d.log_text().contains("; lost"),
        "a wrapper waiting for the database was declared lost:\n{}",
        d.log_text()
    );
}
