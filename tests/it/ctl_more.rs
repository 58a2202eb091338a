//! `saltpeterctl` beyond the verbs' answers: access control by peer credentials (as
//! `nobody`), live progress on a terminal, completions and man pages, crontab import, and
//! the follow-latency benchmark.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::ctl_verbs::{err, jobs_of, start_as, text};
use crate::util::*;

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
    if !crate::components::present_or_skipped(
        "root",
        || nix::unistd::getuid().is_root(),
        "this test acts as the user nobody, which needs root",
    ) {
        return;
    }
    assert!(
        Command::new("setpriv").arg("--version").output().is_ok(),
        "setpriv is missing (Debian: util-linux; scripts/install-test-deps installs it)"
    );
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
fn run_wait_on_a_terminal_draws_a_progress_bar_in_colour_unless_no_color() {
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "script(1) is missing for a pseudo-terminal (Debian: bsdutils; scripts/install-test-deps \
         installs it)"
    );
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
    assert!(
        Command::new("man").arg("--version").output().is_ok(),
        "man is missing (Debian: man-db; scripts/install-test-deps installs it)"
    );
    {
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

/// End-to-end latency of `logs -f`: a command prints its own clock every 100 ms; the
/// follower compares each line with the clock when it arrives (same host, same clock).
#[test]
#[ignore]
fn bench_follow_latency() {
    let job = "\
bench_follow:
  schedule: '@daily'
  targets: [one]
  command: 'for i in $(seq 50); do date +%s%N; sleep 0.1; done'
";
    let d = Daemon::start(&[("01-fast.yaml", FAST), ("b.yaml", job)]);
    d.run_now("bench_follow");
    let mut child = Command::new(CTL)
        .arg("--socket")
        .arg(d.socket())
        .args(["logs", "bench_follow", "-f"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("logs -f");
    let stdout = child.stdout.take().expect("stdout");
    let mut lat: Vec<Duration> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.trim().parse::<u128>().ok())
        .map(|printed| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            Duration::from_nanos(now.saturating_sub(printed) as u64)
        })
        .collect();
    assert!(child.wait().expect("wait").success());
    lat.sort();
    let pick = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    println!(
        "bench_follow_latency: {} lines, produced -> printed by `logs -f`: median {:?}, p90 {:?}, max {:?}",
        lat.len(),
        pick(0.5),
        pick(0.9),
        pick(1.0)
    );
}
