//! Every `saltpeterctl` verb against a running daemon, in `--json` and table form; live
//! following; access control by peer credentials; exit codes; completions, man page and
//! crontab conversion.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

const JOBS: &str = "\
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

const MORE_JOBS: &str = "\
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
fn jobs_of(prefix: &str) -> String {
    ["ticker", "failing", "sleeper"]
        .iter()
        .fold(JOBS.to_string(), |text, job| {
            text.replace(&format!("{job}:\n"), &format!("{prefix}_{job}:\n"))
        })
}

fn start_as(prefix: &str) -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("web.yaml", &jobs_of(prefix)),
        ("ops.yaml", MORE_JOBS),
    ])
}

fn start() -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("web.yaml", JOBS),
        ("ops.yaml", MORE_JOBS),
    ])
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.ctl(args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        err(&out),
        d.log_text()
    );
    text(&out)
}

fn names(v: &Value) -> Vec<String> {
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

/// Run `args` as `nobody` from a copy of saltpeterctl in a world-readable directory.
fn ctl_as_nobody(bin: &std::path::Path, d: &Daemon, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(bin)
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .output()
        .expect("setpriv")
}

fn open_to_others(d: &Daemon) {
    for dir in [d.root.path().to_path_buf(), d.runtime_dir()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

#[test]
fn peers_outside_root_and_the_admin_group_are_refused() {
    if !nix::unistd::getuid().is_root()
        || Command::new("setpriv").arg("--version").output().is_err()
    {
        println!("skipped: needs root and setpriv to act as nobody");
        return;
    }
    let bindir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(bindir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = bindir.path().join("saltpeterctl");
    std::fs::copy(CTL, &bin).expect("copy saltpeterctl");

    // No admin group: the socket is 0660 root's; even opened to all, nobody is refused
    // by its peer credentials.
    let d = start_as("acl");
    open_to_others(&d);
    let meta = std::fs::metadata(d.socket()).expect("socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let out = ctl_as_nobody(&bin, &d, &["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("Permission denied"), "{}", err(&out));
    std::fs::set_permissions(d.socket(), std::fs::Permissions::from_mode(0o666)).expect("chmod");
    for args in [&["status"][..], &["run", "acl_ticker"], &["--json", "jobs"]] {
        let out = ctl_as_nobody(&bin, &d, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", err(&out));
        let e = err(&out);
        assert!(e.contains("permission denied: uid 65534"), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    }
    assert!(d.log_text().contains("admin connection refused: uid 65534"));
    assert!(
        d.runs("acl_ticker").is_empty(),
        "a refused request did nothing"
    );
    drop(d);

    // admin_group: nogroup (nobody's group): the socket belongs to it, nobody may act,
    // and what it does is recorded with its uid.
    let group = "saltpeter_config:\n  admin_group: nogroup\n";
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-group.yaml", group),
        ("web.yaml", &jobs_of("acl2")),
    ]);
    open_to_others(&d);
    let gid = nix::unistd::Group::from_name("nogroup")
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw());
    let meta = std::fs::metadata(d.socket()).expect("socket");
    assert_eq!(Some(std::os::unix::fs::MetadataExt::gid(&meta)), gid);
    let out = ctl_as_nobody(&bin, &d, &["--json", "run", "acl2_ticker", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", err(&out));
    let events = d.ctl_json(&["events", "--kind", "run_requested"]);
    assert_eq!(events[0]["uid"], 65534, "{events}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("uid 65534")
    );
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

#[test]
fn run_wait_on_a_terminal_draws_a_progress_bar_in_colour_unless_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        println!("skipped: no script(1) for a pseudo-terminal");
        return;
    }
    let d = start_as("tty");
    let run_on_tty = |env: &[(&str, &str)]| {
        let cmd = format!(
            "{CTL} --socket {} run tty_ticker --wait",
            path_str(&d.socket())
        );
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"])
            .env_remove("NO_COLOR")
            .env("TERM", "xterm");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("script")
    };
    let out = run_on_tty(&[]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(t.contains("[##############################] 2/2"), "{t:?}");
    assert!(t.contains("\x1b[32m"), "no colour on a terminal: {t:?}");
    assert!(t.contains("alpha") && t.contains("OUTCOME"), "{t:?}");
    let out = run_on_tty(&[("NO_COLOR", "1")]);
    let t = text(&out);
    assert!(t.contains("] 2/2"), "{t:?}");
    assert!(!t.contains("\x1b[3"), "colour despite NO_COLOR: {t:?}");
}

#[test]
fn completions_and_man_pages_are_generated_from_the_cli() {
    for (shell, needle) in [
        ("bash", "complete"),
        ("zsh", "#compdef"),
        ("fish", "complete -c"),
    ] {
        let out = Command::new(CTL)
            .args(["completions", shell])
            .output()
            .expect("ctl");
        assert!(out.status.success(), "{shell}");
        let t = text(&out);
        assert!(t.contains(needle) && t.contains("kill-job"), "{shell}: {t}");
    }
    let out = Command::new(CTL).arg("manpage").output().expect("ctl");
    let page = text(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH saltpeterctl"),
        "{page}"
    );
    assert!(
        page.contains("kill\\-job") || page.contains("kill-job"),
        "{page}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(CTL)
        .args(["manpage", "--dir", path_str(dir.path())])
        .output()
        .expect("ctl");
    assert!(out.status.success());
    for page in [
        "saltpeterctl.1",
        "saltpeterctl-run.1",
        "saltpeterctl-logs.1",
    ] {
        let body = std::fs::read_to_string(dir.path().join(page)).expect(page);
        assert!(body.contains(".SH"), "{page}");
    }
    if Command::new("man").arg("--version").output().is_ok() {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.path().join("saltpeterctl-run.1"))
            .env("MANPAGER", "cat")
            .output()
            .expect("man");
        assert!(text(&out).contains("--targets"), "{}", text(&out));
    }
}

#[test]
fn crontab_import_writes_yaml_that_the_daemon_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crontab = dir.path().join("crontab");
    std::fs::write(
        &crontab,
        "GREETING=hello\n# say it\n*/5 * * * * echo \"$GREETING from cron\"\n@reboot /bin/true\n",
    )
    .expect("write");
    let out = Command::new(CTL)
        .args([
            "crontab",
            "import",
            path_str(&crontab),
            "--targets",
            "here",
            "--executor",
            "local",
            "--prefix",
            "cronit_",
        ])
        .output()
        .expect("ctl");
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        err(&out).contains("@reboot has no equivalent"),
        "{}",
        err(&out)
    );
    let yaml = text(&out);
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("cron.yaml", &yaml)]);
    let check = Command::new(CTL)
        .args(["config", "check", path_str(&d.config_dir())])
        .output()
        .expect("check");
    assert_eq!(check.status.code(), Some(0), "{}\n{yaml}", text(&check));
    let (run, code) = d.run_wait("cronit_echo");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("id");
    assert_eq!(d.output(id, "here"), "hello from cron\n");
    let out = Command::new(CTL)
        .args(["crontab", "import", "/nonexistent/crontab"])
        .output()
        .expect("ctl");
    assert_eq!(out.status.code(), Some(2));
}
