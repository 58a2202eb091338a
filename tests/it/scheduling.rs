//! Scheduling end to end: `saltpeterctl schedule next` with and without a daemon, missed
//! slots after downtime (`skip` and `latest`), `splay`, and a daemon that sleeps while idle.

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::util::*;

fn ctl_alone(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(CTL)
        .args(args)
        .env("SALTPETER_SOCKET", "/nonexistent/admin.sock")
        .output()
        .expect("run saltpeterctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn instant(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[test]
fn schedule_next_works_without_a_daemon_and_names_bad_fields() {
    let (code, out, err) = ctl_alone(&[
        "--json",
        "schedule",
        "next",
        "--expr",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2027-03-27T23:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    let times: Vec<String> = serde_json::from_str(&out).expect("a JSON array of strings");
    assert_eq!(
        times,
        [
            "2027-03-28T01:00:00Z",
            "2027-03-29T00:30:00Z",
            "2027-03-30T00:30:00Z"
        ]
    );
    let (code, out, _) = ctl_alone(&[
        "schedule",
        "next",
        "--expr",
        "@hourly",
        "--from",
        "2026-11-25T10:00:00+01:00",
        "--count",
        "2",
    ]);
    assert_eq!(code, 0);
    assert_eq!(out, "2026-11-25T10:00:00Z\n2026-11-25T11:00:00Z\n");

    for (expr, field, range) in [
        ("0 24 * * *", "hour", "0-23"),
        ("61 * * * *", "min", "0-59"),
        ("0 0 32 * *", "dom", "1-31"),
        ("0 0 * 0 *", "mon", "1-12"),
        ("0 0 * * 9", "dow", "0-7"),
        ("0 0 0 * * * 2100", "year", "1970-2099"),
        ("75 0 0 * * *", "sec", "0-59"),
    ] {
        let (code, out, err) = ctl_alone(&["schedule", "next", "--expr", expr]);
        assert_eq!(code, 2, "{expr}: {out}");
        assert!(
            err.contains(&format!("field `{field}`")) && err.contains(range),
            "{expr}: {err}"
        );
    }
    let (code, _, err) = ctl_alone(&["schedule", "next", "--expr", "@daily", "--tz", "Nowhere"]);
    assert_eq!(code, 2);
    assert!(err.contains("--tz `Nowhere`"), "{err}");
    let (code, _, err) = ctl_alone(&["schedule", "next", "--expr", "@daily", "--count", "0"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--count 0 is out of range: it must be 1-"),
        "{err}"
    );
    let (code, _, err) = ctl_alone(&["schedule", "next", "--expr", "@daily", "--from", "now"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--from `now` is not an RFC 3339 instant"),
        "{err}"
    );
    let (code, out, err) = ctl_alone(&["schedule", "next", "--expr", "0 0 0 1 1 * 2020"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("never fires"), "{err}");
}

#[test]
fn schedule_next_of_a_job_asks_the_daemon() {
    let d = Daemon::start(&[(
        "jobs.yaml",
        "ny:\n  schedule: '30 2 * * *'\n  timezone: America/New_York\n  targets: [a]\n  \
         command: 'true'\noff:\n  schedule: '@daily'\n  enabled: false\n  targets: [a]\n  \
         command: 'true'\n",
    )]);
    let v = d.ctl_json(&[
        "schedule",
        "next",
        "--job",
        "ny",
        "--from",
        "2027-03-14T05:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(
        v,
        serde_json::json!(["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"])
    );
    let plain = d.ctl(&["schedule", "next", "--job", "ny", "--count", "1"]);
    assert!(plain.status.success());
    let line = String::from_utf8_lossy(&plain.stdout);
    assert!(
        line.trim().ends_with(":30:00Z"),
        "one RFC 3339 UTC line: {line}"
    );
    for job in ["nosuch", "off"] {
        let out = d.ctl(&["schedule", "next", "--job", job]);
        assert_eq!(out.status.code(), Some(2), "{job}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(job));
    }
}

fn is_missed(r: &Value) -> bool {
    r["reason"]
        .as_str()
        .is_some_and(|why| why.starts_with("missed:"))
}

#[test]
fn slots_missed_while_down_are_recorded_or_caught_up() {
    let mut d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "02-limit.yaml",
            "saltpeter_config:\n  missed_record_limit: 3\n",
        ),
        (
            "jobs.yaml",
            "skipper:\n  schedule: '* * * * * *'\n  overlap: allow\n  targets: [s]\n  \
             command: 'true'\n\
             catcher:\n  schedule: '*/2 * * * * *'\n  missed: latest\n  overlap: allow\n  \
             targets: [c]\n  command: 'echo caught'\n",
        ),
    ]);
    d.wait_final_runs("skipper", 2);
    d.wait_final_runs("catcher", 2);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit().success());
    std::thread::sleep(Duration::from_secs(7));
    d.spawn();
    d.wait_ready();
    // Live firings after the restart: final scheduled runs newer than every missed slot.
    wait_until("live firings after the restart", HANG, || {
        let live_after_missed = |job| {
            let runs = d.runs(job);
            let newest_missed = runs
                .iter()
                .filter(|r| is_missed(r) || r["trigger"] == "catchup")
                .filter_map(|r| instant(&r["slot"]))
                .max()?;
            let n = runs
                .iter()
                .filter(|r| r["trigger"] == "schedule" && !is_missed(r) && is_final(r))
                .filter(|r| instant(&r["slot"]).is_some_and(|s| s > newest_missed))
                .count();
            Some(n)
        };
        (live_after_missed("skipper")? >= 2 && live_after_missed("catcher")? >= 1).then_some(())
    });
    // skipper: only the newest 3 missed slots are recorded, the newest saying how many
    // older ones were left out, and the first live slot follows the newest missed one.
    let all = d.runs("skipper");
    let mut slots = HashSet::new();
    for r in &all {
        assert!(slots.insert(r["slot"].to_string()), "slot twice: {r}");
    }
    let mut missed: Vec<&Value> = all.iter().filter(|r| is_missed(r)).collect();
    missed.sort_by_key(|r| instant(&r["slot"]));
    assert_eq!(missed.len(), 3, "{missed:?}");
    for r in &missed {
        assert_eq!(r["state"], "skipped");
        assert_eq!(r["trigger"], "schedule");
    }
    let newest = missed[2];
    let reason = newest["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("older missed slot(s) since"),
        "the last one says what was left out: {reason}"
    );
    let newest_slot = instant(&newest["slot"]).expect("slot");
    for pair in missed.windows(2) {
        let gap =
            instant(&pair[1]["slot"]).expect("slot") - instant(&pair[0]["slot"]).expect("slot");
        assert_eq!(
            gap.num_milliseconds(),
            1000,
            "the newest missed slots, in a row"
        );
    }
    let first_live = all
        .iter()
        .filter_map(|r| instant(&r["slot"]))
        .filter(|s| *s > newest_slot)
        .min()
        .unwrap_or_else(|| {
            let list: Vec<String> = all
                .iter()
                .map(|r| format!("{} {} {} {}", r["id"], r["slot"], r["state"], r["reason"]))
                .collect();
            panic!("no slot after the missed ones:\n{}", list.join("\n"))
        });
    assert_eq!(
        (first_live - newest_slot).num_milliseconds(),
        1000,
        "no slot is lost between the missed ones and the first live one"
    );

    // catcher: the newest missed slot ran late with trigger catchup, older ones skipped.
    let all = d.runs("catcher");
    let catchups: Vec<&Value> = all.iter().filter(|r| r["trigger"] == "catchup").collect();
    assert_eq!(catchups.len(), 1, "{all:?}");
    let caught = d.wait_run_final(catchups[0]["id"].as_u64().expect("id"));
    assert_eq!(caught["state"], "succeeded", "{caught}");
    assert_eq!(
        d.output(caught["id"].as_u64().expect("id"), "c"),
        "caught\n"
    );
    let caught_slot = instant(&caught["slot"]).expect("slot");
    let skipped: Vec<&Value> = all.iter().filter(|r| is_missed(r)).collect();
    assert_eq!(
        skipped.len(),
        2,
        "limit 3: two skipped and the catch-up: {all:?}"
    );
    for r in &skipped {
        assert!(instant(&r["slot"]).expect("slot") < caught_slot);
        assert_eq!(r["state"], "skipped");
    }
    let next_live = all
        .iter()
        .filter_map(|r| instant(&r["slot"]))
        .filter(|s| *s > caught_slot)
        .min()
        .expect("a live slot");
    assert_eq!((next_live - caught_slot).num_milliseconds(), 2000);
}

#[test]
fn splay_spreads_target_starts_within_the_window() {
    let machines: Vec<String> = (1..=8).map(|i| format!("sp{i}")).collect();
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            &format!(
                "spread:\n  schedule: '@yearly'\n  splay: 3\n  targets: [{}]\n  \
                 command: 'true'\n",
                machines.join(", ")
            ),
        ),
    ]);
    let (run, code) = d.run_wait("spread");
    assert_eq!(code, 0, "{run}");
    let run_started = instant(&run["started"]).expect("run started");
    let offsets: Vec<i64> = machines
        .iter()
        .map(|m| {
            let t = target(&run, m);
            assert_eq!(t["exit_code"], 0, "{run}");
            (instant(&t["started"]).expect("target started") - run_started).num_milliseconds()
        })
        .collect();
    let (lo, hi) = (
        offsets.iter().copied().min().unwrap_or(0),
        offsets.iter().copied().max().unwrap_or(0),
    );
    println!("splay 3 s over 8 targets: command starts {offsets:?} ms after the launch");
    assert!(lo >= 0, "{offsets:?}");
    // The window is 3 s; the margin covers launching the wrappers.
    assert!(
        hi <= 3000 + 2000,
        "a target started after the window: {offsets:?}"
    );
    // Eight uniform draws in 3 s all within 0.5 s of each other: p < 1e-4.
    assert!(hi - lo >= 500, "the starts are not spread: {offsets:?}");
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = stat.rsplit(')').next() else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime field 14, stime field 15.
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
}

fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// CPU used by the daemon's processes over `window`, as a fraction of one core.
pub fn daemon_cpu_share(d: &Daemon, window: Duration) -> f64 {
    let mut pids: Vec<u32> = d.processes().into_iter().map(|(_, p)| p).collect();
    pids.push(d.pid());
    let before: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    let start = Instant::now();
    std::thread::sleep(window);
    let after: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    let elapsed = start.elapsed().as_secs_f64();
    (after.saturating_sub(before)) as f64 / clock_ticks_per_second() as f64 / elapsed
}

#[test]
fn an_idle_daemon_spends_no_cpu() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "rare1:\n  schedule: '0 0 0 1 1 * 2099'\n  targets: [a]\n  command: 'true'\n\
             rare2:\n  schedule: '0 0 12 29 2 *'\n  targets: [a]\n  command: 'true'\n\
             rare3:\n  schedule: '@yearly'\n  enabled: false\n  targets: [a]\n  command: 'true'\n",
        ),
    ]);
    // Let start-up settle (db migration, first config scan).
    std::thread::sleep(Duration::from_secs(1));
    let share = daemon_cpu_share(&d, Duration::from_secs(3));
    println!(
        "idle daemon (5 processes, 3 rare jobs): {:.2} % of one core",
        share * 100.0
    );
    // A busy loop would use ~100 %; sleeping until the next slot uses next to nothing.
    assert!(
        share < 0.05,
        "the idle daemon used {:.1} % of a core",
        share * 100.0
    );
}
