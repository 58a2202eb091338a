//! Every `saltpeterctl` verb against a running daemon, in `--json` and table form; live
//! following; exit codes. More in `ctl_more`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

pub const JOBS: &str = "\
ticker:
  schedule: '@daily'
  targets: [alpha, beta]
  command: 'for i in 1 2 3; do echo \"tick $i on $SP_MACHINE\"; sleep 0.2; done; echo oops >&2'
  env:
    API_KEY: hunter2
failing:
  schedule: '@daily'
  targets: [alpha, beta]
  command: 'test \"$SP_MACHINE\" = alpha'
sleeper:
  schedule: '@daily'
  targets: [alpha, beta]
  command: 'sleep 60'
  kill_grace: 1
";

pub const MORE_JOBS: &str = "\
resting:
  schedule: '@hourly'
  targets: a
  command: 'true'
  enabled: false
broken:
  min: 0
  hour: 25
  dom: '*'
  mon: '*'
  dow: '*'
  targets: a
  command: x
";

/// The jobs above, renamed `P_job` for test P: wrappers of concurrent tests share this
/// host, and with it the per-host overlap lock of each job name.
pub fn jobs_of(prefix: &str) -> String {
    ["ticker", "failing", "sleeper"]
        .iter()
        .fold(JOBS.to_string(), |text, job| {
            text.replace(&format!("{job}:\n"), &format!("{prefix}_{job}:\n"))
        })
}

pub fn start_as(prefix: &str) -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("web.yaml", &jobs_of(prefix)),
        ("ops.yaml", MORE_JOBS),
    ])
}

pub fn start() -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("web.yaml", JOBS),
        ("ops.yaml", MORE_JOBS),
    ])
}

pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.ctl(args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        err(&out),
        d.log_text()
    );
    text(&out)
}

pub fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|j| j["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn every_verb_answers_in_json_and_as_a_table() {
    let d = start();
    // status
    assert!(d.ctl_json(&["status"])["processes"].as_array().is_some());
    assert!(ok(&d, &["status"]).contains("runs in flight"));

    // jobs, with filters
    let all = d.ctl_json(&["jobs"]);
    assert_eq!(
        names(&all),
        ["broken", "failing", "resting", "sleeper", "ticker"]
    );
    assert_eq!(
        names(&d.ctl_json(&["jobs", "--group", "ops"])),
        ["broken", "resting"]
    );
    assert_eq!(
        names(&d.ctl_json(&["jobs", "--state", "disabled"])),
        ["resting"]
    );
    assert_eq!(
        names(&d.ctl_json(&["jobs", "--state", "invalid"])),
        ["broken"]
    );
    let table = ok(&d, &["jobs"]);
    assert!(table.starts_with("JOB"), "{table}");
    assert!(
        table.contains("resting") && table.contains("disabled"),
        "{table}"
    );
    assert!(!table.contains('\x1b'), "colours on a pipe: {table:?}");

    // run --wait: exit 0 when every target succeeded, 1 otherwise; table and JSON
    let (run, code) = d.run_wait("ticker");
    assert_eq!((run["state"].as_str(), code), (Some("succeeded"), 0));
    let ticker_run = run["id"].as_u64().expect("id");
    let out = d.ctl(&["run", "failing", "--wait"]);
    assert_eq!(out.status.code(), Some(1), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("MACHINE") && t.contains("alpha") && t.contains("failed"),
        "{t}"
    );
    // Not a terminal and not --json: progress as plain lines on stderr.
    let e = err(&out);
    assert!(
        e.contains("beta: started") && e.contains("beta: failed (exit 1)"),
        "{e}"
    );
    assert!(!e.contains('\r'), "{e:?}");

    // run --targets: a subset of the job's targets; anything else is refused (exit 2)
    let out = d.ctl(&["--json", "run", "failing", "--wait", "--targets", "alpha"]);
    assert_eq!(out.status.code(), Some(0), "{}", err(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["targets"][0]["machine"], "alpha");
    let out = d.ctl(&["run", "failing", "--targets", "alpha,gamma"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err(&out).contains("gamma is not a target of job failing"),
        "{}",
        err(&out)
    );

    // show: configuration without secrets, 5 next fire times, last runs
    let show = d.ctl_json(&["show", "ticker"]);
    assert_eq!(show["config"]["env"]["API_KEY"], "***");
    assert!(!show.to_string().contains("hunter2"));
    assert_eq!(show["next_runs"].as_array().map(Vec::len), Some(5));
    assert_eq!(show["last_runs"][0]["id"].as_u64(), Some(ticker_run));
    assert_eq!(show["job"]["state"], "idle");
    let table = ok(&d, &["show", "ticker"]);
    assert!(
        table.contains("Next runs") && table.contains("Last runs"),
        "{table}"
    );
    assert!(
        table.contains("API_KEY") && !table.contains("hunter2"),
        "{table}"
    );
    let broken = d.ctl_json(&["show", "broken"]);
    assert!(
        broken["errors"][0].as_str().unwrap_or("").contains("hour"),
        "{broken}"
    );
    assert_eq!(d.ctl(&["show", "nope"]).status.code(), Some(2));

    // runs: filters by job, state, since, limit
    let runs = d.ctl_json(&["runs", "--state", "succeeded"]);
    assert!(
        runs.as_array()
            .expect("runs")
            .iter()
            .all(|r| r["state"] == "succeeded")
    );
    assert_eq!(runs.as_array().map(Vec::len), Some(2));
    assert_eq!(
        d.ctl_json(&["runs", "failing"]).as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        d.ctl_json(&["runs", "--limit", "1"])
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        d.ctl_json(&["runs", "--since", "1h"])
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert_eq!(
        d.ctl_json(&["runs", "--since", "2999-01-01"])
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    let table = ok(&d, &["runs", "ticker"]);
    assert!(
        table.contains("2/2 ok") && table.contains("succeeded"),
        "{table}"
    );
    assert_eq!(
        d.ctl(&["runs", "--since", "someday"]).status.code(),
        Some(2)
    );

    // show-run
    let id = ticker_run.to_string();
    assert_eq!(d.ctl_json(&["show-run", &id])["job"], "ticker");
    assert!(ok(&d, &["show-run", &id]).contains("OUTCOME"));

    // output: all, --tail, --stream, JSON
    let all = ok(&d, &["output", &id, "alpha"]);
    assert_eq!(
        all,
        "tick 1 on alpha\ntick 2 on alpha\ntick 3 on alpha\noops\n"
    );
    assert_eq!(ok(&d, &["output", &id, "alpha", "--tail", "5"]), "oops\n");
    assert_eq!(
        ok(&d, &["output", &id, "alpha", "--stream", "stderr"]),
        "oops\n"
    );
    assert!(!ok(&d, &["output", &id, "alpha", "--stream", "stdout"]).contains("oops"));
    let v = d.ctl_json(&["output", &id, "beta"]);
    assert_eq!(
        v["output"],
        "tick 1 on beta\ntick 2 on beta\ntick 3 on beta\noops\n"
    );
    assert_eq!(d.ctl(&["output", &id, "gamma"]).status.code(), Some(2));

    // logs: the newest run of a job, every target prefixed when there are several
    let logs = ok(&d, &["logs", "ticker"]);
    assert!(logs.contains("alpha | tick 1 on alpha"), "{logs}");
    assert!(logs.contains("beta  | oops"), "{logs}");
    let logs = ok(
        &d,
        &["logs", "ticker", "--machine", "beta", "--stream", "stdout"],
    );
    assert_eq!(logs, "tick 1 on beta\ntick 2 on beta\ntick 3 on beta\n");
    let out = d.ctl(&["--json", "logs", "ticker", "--machine", "alpha"]);
    let lines: Vec<Value> = text(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines[0]["machine"], "alpha");
    assert_eq!(
        lines.last().map(|l| l["run"]["id"].clone()),
        Some(Value::from(ticker_run))
    );
    assert_eq!(d.ctl(&["logs", "resting"]).status.code(), Some(2));

    // kill RUN and kill-job JOB (every run of the job in flight)
    let first = d.run_now("sleeper");
    wait_until("sleeper running", HANG, || {
        d.ctl_json(&["jobs", "--state", "running"])
            .as_array()
            .is_some_and(|a| !a.is_empty())
            .then_some(())
    });
    let out = d.ctl(&["--json", "kill", &first.to_string(), "--machine", "beta"]);
    assert!(out.status.success(), "{}", err(&out));
    let msg = ok(&d, &["kill-job", "sleeper"]);
    assert!(
        msg.contains("kill sent to") && msg.contains(&first.to_string()),
        "{msg}"
    );
    let r = d.wait_run_final(first);
    assert_eq!(r["state"], "canceled", "{r}");
    let out = d.ctl(&["kill-job", "sleeper"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(err(&out).contains("no run of job sleeper is in flight"));

    // reload
    assert!(ok(&d, &["reload"]).contains("reloaded"));

    // events: the audit trail, with the operator's uid on what an operator asked for
    let events = d.ctl_json(&["events", "--limit", "100"]);
    let me = nix::unistd::getuid().as_raw();
    let kinds: Vec<(&str, Option<u64>)> = events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| (e["kind"].as_str().unwrap_or(""), e["uid"].as_u64()))
        .collect();
    for asked in ["run_requested", "kill_requested", "reload_requested"] {
        assert!(
            kinds.contains(&(asked, Some(me as u64))),
            "{asked} by {me} missing: {kinds:?}"
        );
    }
    assert!(kinds.contains(&("run_started", None)), "{kinds:?}");
    let kills = d.ctl_json(&["events", "--kind", "kill_requested"]);
    assert_eq!(kills.as_array().map(Vec::len), Some(2), "{kills}");
    assert_eq!(
        d.ctl_json(&["events", "--job", "failing", "--kind", "run_requested"])
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let table = ok(&d, &["events", "--job", "sleeper"]);
    assert!(
        table.contains("kill_requested") && table.contains("BY"),
        "{table}"
    );
}

/// Lines of a child's stdout with the instant each arrived.
fn timed_lines(child: &mut std::process::Child) -> Vec<(Instant, String)> {
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .map(|l| (Instant::now(), l))
        .collect()
}

#[test]
fn follow_mode_prints_lines_as_they_come_and_exits_when_the_run_ends() {
    let slow = "\
ctl_slow:
  schedule: '@daily'
  targets: [one]
  command: 'for i in 1 2 3 4 5 6; do echo \"line $i\"; sleep 0.5; done; echo partial | tr -d \"\\n\"'
";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("slow.yaml", slow)]);
    let run = d.run_now("ctl_slow");
    let started = Instant::now();
    let mut child = Command::new(CTL)
        .arg("--socket")
        .arg(d.socket())
        .args(["logs", "ctl_slow", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("logs -f");
    let lines = timed_lines(&mut child);
    let status = child.wait().expect("wait");
    let ended = Instant::now();
    assert!(status.success());
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(
        texts,
        [
            "line 1", "line 2", "line 3", "line 4", "line 5", "line 6", "partial"
        ]
    );
    // Lines arrive while the command runs (about 0.5 s apart), not all at the end.
    let first = lines[0].0 - started;
    let spread = lines[5].0 - lines[0].0;
    println!(
        "follow: first line after {first:?}, lines 1-6 spread over {spread:?}, exit {:?} after the last",
        ended - lines[6].0
    );
    assert!(spread > Duration::from_millis(1500), "{spread:?}");
    assert!(ended - lines[0].0 > Duration::from_millis(1500));
    let r = d.run_record(run);
    assert_eq!(
        r["state"], "succeeded",
        "the follower exits once the run has ended"
    );

    // `output RUN MACHINE -f` on a run in flight, and on a finished run (prints, exits).
    let run = d.run_now("ctl_slow");
    let mut child = Command::new(CTL)
        .arg("--socket")
        .arg(d.socket())
        .args(["output", &run.to_string(), "one", "-f", "--tail", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("output -f");
    let lines = timed_lines(&mut child);
    assert!(child.wait().expect("wait").success());
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[6].1, "partial");
    assert!(lines[5].0 - lines[0].0 > Duration::from_millis(1000));
    let out = d.ctl(&["output", &run.to_string(), "one", "-f"]);
    assert!(text(&out).ends_with("line 6\npartial"), "{}", text(&out));
}

#[test]
fn exit_codes_are_0_ok_1_failed_2_usage_or_connection() {
    let d = start_as("ec");
    assert_eq!(d.ctl(&["jobs"]).status.code(), Some(0));
    assert_eq!(
        d.ctl(&["run", "ec_failing", "--wait"]).status.code(),
        Some(1)
    );
    assert_eq!(
        d.ctl(&["run", "ec_ticker", "--wait"]).status.code(),
        Some(0)
    );
    for args in [
        &["run", "nope"][..],
        &["show", "nope"],
        &["kill", "999"],
        &["kill-job", "ec_ticker"],
        &["logs", "ec_sleeper"],
        &["output", "999", "alpha"],
        &["run", "broken"],
        &["jobs", "--state", "sleepy"],
        &["frobnicate"],
    ] {
        let out = d.ctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", err(&out));
        assert!(!err(&out).trim().is_empty(), "{args:?}");
    }
    let out = d.ctl(&["run", "nope"]);
    assert_eq!(err(&out).trim(), "saltpeterctl: no job named nope");
    let out = Command::new(CTL)
        .args(["--socket", "/nonexistent/admin.sock", "jobs"])
        .output()
        .expect("ctl");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err(&out).contains("is saltpeter.service running?"),
        "{}",
        err(&out)
    );
}
