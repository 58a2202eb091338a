//! Job control (issue 19): maintenance windows opening and closing while the daemon runs
//! (skip and defer), pause with `--until` that ends by itself and survives a restart, skip
//! of the next slots, chains that fire only on their outcome, and cycles refused at load.
//! Windows are one-off windows computed from the current time and the jobs fire every
//! second, so each test takes seconds.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::util::*;

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn slot_of(run: &Value) -> Option<DateTime<Utc>> {
    run["slot"]
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn reason(run: &Value) -> &str {
    run["reason"].as_str().unwrap_or_default()
}

fn id(run: &Value) -> u64 {
    run["id"].as_u64().unwrap_or(0)
}

/// Whole seconds from now, rounded up to a second boundary (slots are on seconds).
fn in_secs(n: i64) -> DateTime<Utc> {
    let now = Utc::now().timestamp();
    DateTime::from_timestamp(now + n, 0).unwrap_or_default()
}

#[test]
fn windows_skip_and_defer_slots_while_open_and_release_them_when_closed() {
    let start = in_secs(6);
    let end = start + chrono::Duration::seconds(3);
    let maintenance = format!(
        "saltpeter_maintenance:\n  windows:\n    \
         - name: quiet\n      start: '{s}'\n      end: '{e}'\n      groups: [skipping]\n      policy: skip\n    \
         - name: later\n      start: '{s}'\n      end: '{e}'\n      groups: [deferring]\n      policy: defer\n",
        s = rfc3339(start),
        e = rfc3339(end),
    );
    let skipping =
        "s:\n  schedule: '* * * * * *'\n  targets: [a]\n  overlap: allow\n  command: 'true'\n";
    let deferring =
        "d:\n  schedule: '* * * * * *'\n  targets: [a]\n  overlap: allow\n  command: 'true'\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("maintenance.yaml", &maintenance),
        ("skipping.yaml", skipping),
        ("deferring.yaml", deferring),
    ]);

    // The calendar lists both windows, and `schedule next` leaves out the skipped slots
    // and moves the deferred ones to the window's end.
    let listed = d.ctl_json(&["maintenance", "windows"]);
    let names: Vec<&str> = listed
        .as_array()
        .map(|l| l.iter().filter_map(|w| w["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["later", "quiet"], "{listed}");
    assert_eq!(listed[0]["start"], rfc3339(start));
    assert_eq!(listed[0]["end"], rfc3339(end));
    let from = rfc3339(start - chrono::Duration::seconds(1));
    let next = d.ctl_json(&[
        "schedule", "next", "--job", "s", "--from", &from, "--count", "6",
    ]);
    let next: Vec<String> = next
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        next.len(),
        3,
        "slots in the skip window are left out: {next:?}"
    );
    assert!(
        next.iter()
            .all(|t| { DateTime::parse_from_rfc3339(t).is_ok_and(|t| t < start || t >= end) })
    );
    let next = d.ctl_json(&[
        "schedule", "next", "--job", "d", "--from", &from, "--count", "6",
    ]);
    assert_eq!(
        next[0],
        rfc3339(end),
        "the deferred slots run at the end: {next}"
    );

    // Let the windows open and close, and a slot after them run.
    let after = |job: &str| {
        wait_until(&format!("a run of {job} after the window"), HANG, || {
            let runs = d.runs(job);
            runs.iter()
                .any(|r| r["state"] == "succeeded" && slot_of(r).is_some_and(|s| s > end))
                .then_some(runs)
        })
    };
    let skip_runs = after("s");
    let inside: Vec<&Value> = skip_runs
        .iter()
        .filter(|r| slot_of(r).is_some_and(|s| s >= start && s < end))
        .collect();
    assert!(!inside.is_empty(), "slots fired inside the window");
    for r in &inside {
        assert_eq!(r["state"], "skipped", "{r}");
        assert_eq!(reason(r), "maintenance window quiet", "{r}");
    }
    assert!(
        skip_runs
            .iter()
            .filter(|r| slot_of(r).is_some_and(|s| s < start))
            .all(|r| r["state"] != "skipped"),
        "before the window slots run"
    );

    let defer_runs = after("d");
    let inside: Vec<&Value> = defer_runs
        .iter()
        .filter(|r| slot_of(r).is_some_and(|s| s >= start && s < end))
        .collect();
    let ran: Vec<&&Value> = inside.iter().filter(|r| r["state"] != "skipped").collect();
    assert_eq!(ran.len(), 1, "one deferred slot runs: {inside:?}");
    assert_eq!(ran[0]["state"], "succeeded", "{}", ran[0]);
    let started = ran[0]["started"]
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc));
    assert!(
        started.is_some_and(|t| t >= end),
        "the deferred slot ran at the window's end: {}",
        ran[0]
    );
    for r in inside.iter().filter(|r| r["state"] == "skipped") {
        assert!(reason(r).contains("already waits for its end"), "{r}");
    }
    let events = d.ctl_json(&["events", "--kind", "run_deferred", "--job", "d"]);
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{events}");
}

#[test]
fn pause_until_ends_by_itself_and_survives_a_restart() {
    let jobs =
        "p:\n  schedule: '* * * * * *'\n  targets: [a]\n  overlap: allow\n  command: 'true'\n";
    let mut d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let until = in_secs(12);
    let paused = d.ctl_json(&["pause", "p", "--until", &rfc3339(until)]);
    // Slots up to the answer may have fired before the pause took hold.
    let answered = Utc::now();
    assert_eq!(paused["jobs"][0]["job"], "p", "{paused}");
    assert_eq!(paused["jobs"][0]["paused"], true);
    assert_eq!(paused["jobs"][0]["until"], rfc3339(until));
    // A run started before the pause shows the job `running` until it ends.
    wait_until("the job listed paused", HANG, || {
        let listed = d.ctl_json(&["jobs"]);
        (listed[0]["state"] == "paused").then_some(())
    });
    let skipped_after = |d: &Daemon, after: u64| {
        wait_until("a slot skipped for the pause", HANG, || {
            d.runs("p").into_iter().find(|r| {
                id(r) > after
                    && r["state"] == "skipped"
                    && reason(r).starts_with("paused: paused by uid")
            })
        })
    };
    let first = skipped_after(&d, 0);

    // A restart keeps the pause.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit().success());
    d.spawn();
    d.wait_ready();
    let shown = d.ctl_json(&["paused"]);
    assert_eq!(shown["jobs"][0]["paused"], true, "{shown}");
    let newest = d.runs("p").first().map(id).unwrap_or(0);
    skipped_after(&d, newest.max(id(&first)));

    // At `until` the job runs again by itself.
    let runs = wait_until("a run after the pause", HANG, || {
        let runs = d.runs("p");
        runs.iter()
            .any(|r| r["state"] == "succeeded")
            .then_some(runs)
    });
    for r in runs.iter().filter(|r| r["state"] == "succeeded") {
        assert!(
            slot_of(r).is_some_and(|s| s >= until || s <= answered),
            "ran while paused: {r}"
        );
    }
    let shown = d.ctl_json(&["paused"]);
    assert_eq!(shown["jobs"].as_array().map(Vec::len), Some(0), "{shown}");
    let events = d.ctl_json(&["events", "--kind", "job_control", "--job", "p"]);
    let messages: Vec<&str> = events
        .as_array()
        .map(|l| l.iter().filter_map(|e| e["message"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("resumed: the pause ended")),
        "{messages:?}"
    );
    assert!(
        events
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["message"]
                .as_str()
                .is_some_and(|m| m.contains("is paused until"))
                && e["uid"].is_u64())),
        "the pause is recorded with who asked: {events}"
    );
}

#[test]
fn skip_next_two_skips_exactly_two_slots_and_resume_cancels() {
    let jobs =
        "k:\n  schedule: '*/2 * * * * *'\n  targets: [a]\n  overlap: allow\n  command: 'true'\n";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let out = d.ctl_json(&["skip", "k", "--next", "2"]);
    // The answer shows the state when it is sent: a slot may already have been skipped.
    let left = out["jobs"][0]["skip_next"].as_u64();
    assert!(matches!(left, Some(1 | 2)), "{out}");
    let is_skip = |r: &Value| reason(r).starts_with("skipped: skip requested by uid");
    // Wait for two runs that ran after the skips; a hang shows what was seen.
    let start = std::time::Instant::now();
    let runs = loop {
        let mut runs = d.runs("k");
        runs.reverse();
        let ran_after = runs.iter().rposition(is_skip).map_or(0, |last_skip| {
            runs[last_skip..]
                .iter()
                .filter(|r| r["state"] == "succeeded")
                .count()
        });
        if ran_after >= 2 {
            break runs;
        }
        if start.elapsed() > HANG {
            let seen: Vec<String> = runs
                .iter()
                .map(|r| format!("{} {} {}", r["slot"], r["state"], reason(r)))
                .collect();
            panic!(
                "timed out waiting for two skips then two runs; runs oldest first:\n{}\n{}",
                seen.join("\n"),
                d.log_tail(40)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let skips: Vec<&Value> = runs.iter().filter(|r| is_skip(r)).collect();
    assert_eq!(skips.len(), 2, "{runs:?}");
    assert!(
        reason(skips[0]).contains("(1 more to skip)"),
        "{}",
        skips[0]
    );
    assert!(
        reason(skips[1]).contains("(0 more to skip)"),
        "{}",
        skips[1]
    );
    let shown = d.ctl_json(&["paused"]);
    assert_eq!(shown["jobs"].as_array().map(Vec::len), Some(0), "{shown}");

    // A bad count is refused with a clear message; so is an unknown job.
    let bad = d.ctl(&["skip", "k", "--next", "0"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--next 0 must be 1-"));
    let unknown = d.ctl(&["pause", "nope"]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no job named nope"));
    let bad_until = d.ctl(&["pause", "k", "--until", "someday"]);
    assert_eq!(bad_until.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_until.stderr).contains("--until `someday`"));
}

#[test]
fn a_chain_fires_only_on_the_named_outcome() {
    let jobs = "\
up_ok:
  schedule: '@yearly'
  targets: [a]
  command: 'true'
up_bad:
  schedule: '@yearly'
  targets: [a]
  command: 'exit 3'
after_ok:
  after: {job: up_ok, on: success}
  targets: [a]
  command: 'echo chained'
on_failure_of_ok:
  after: {job: up_ok, on: failure}
  targets: [a]
  command: 'true'
after_bad:
  after: {job: up_bad, on: failure}
  targets: [a]
  command: 'true'
always_bad:
  after: {job: up_bad, on: always}
  targets: [a]
  command: 'true'
on_success_of_bad:
  after: {job: up_bad}
  targets: [a]
  command: 'true'
";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let shown = d.ctl_json(&["show", "after_ok"]);
    assert!(shown.to_string().contains("\"after\""), "{shown}");
    let (ok, _) = d.run_wait("up_ok");
    assert_eq!(ok["state"], "succeeded");
    let (bad, code) = d.run_wait("up_bad");
    assert_eq!((bad["state"].as_str(), code), (Some("failed"), 1), "{bad}");

    for job in ["after_ok", "after_bad", "always_bad"] {
        let runs = d.wait_final_runs(job, 1);
        assert_eq!(runs.len(), 1, "{job}: {runs:?}");
        assert_eq!(runs[0]["state"], "succeeded", "{job}: {}", runs[0]);
        assert_eq!(runs[0]["trigger"], "chain", "{job}: {}", runs[0]);
        let upstream = if job == "after_ok" { &ok } else { &bad };
        let why = format!("after run {} of ", id(upstream));
        assert!(reason(&runs[0]).starts_with(&why), "{job}: {}", runs[0]);
    }
    let chained = d.runs("after_ok");
    assert_eq!(d.output(id(&chained[0]), "a"), "chained\n");
    // The chains of the other outcome were decided in the same step: they never ran.
    assert!(d.runs("on_failure_of_ok").is_empty());
    assert!(d.runs("on_success_of_bad").is_empty());
    let events = d.ctl_json(&["events", "--kind", "chain"]);
    assert_eq!(events.as_array().map(Vec::len), Some(3), "{events}");
}

#[test]
fn a_cycle_of_chains_is_refused_at_load_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = "\
a:
  after: {job: b, on: success}
  targets: [x]
  command: 'true'
b:
  after: {job: c}
  targets: [x]
  command: 'true'
c:
  schedule: '@daily'
  after: {job: a, on: always}
  targets: [x]
  command: 'true'
free:
  after: {job: a}
  targets: [x]
  command: 'true'
missing:
  after: {job: nobody}
  targets: [x]
  command: 'true'
";
    std::fs::write(dir.path().join("chains.yaml"), jobs).expect("write");
    let out = std::process::Command::new(CTL)
        .args(["config", "check", path_str(dir.path())])
        .output()
        .expect("saltpeterctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let file = dir.path().join("chains.yaml");
    for (line, job) in [(2, "a"), (6, "b"), (11, "c")] {
        let place = format!("{}:{line}:", file.display());
        assert!(
            text.lines().any(|l| l.contains(&place)
                && l.contains("cycle")
                && l.contains("a -> b -> c -> a")
                    | l.contains("b -> c -> a -> b")
                    | l.contains("c -> a -> b -> c")),
            "no cycle error for {job} at {place}:\n{text}"
        );
    }
    assert!(text.contains("there is no job named `nobody`"), "{text}");
    // Only `free` stays valid: its upstream is disabled, so it never fires, but it is no
    // part of the cycle.
    assert!(text.contains("5 jobs (1 valid)"), "{text}");
}
