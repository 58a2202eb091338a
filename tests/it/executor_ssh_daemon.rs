//! Jobs with `executor: ssh` end to end: a real daemon, `saltpeter-executor-ssh` (found
//! beside `saltpeter-daemon`, the default `executor_path`) and a real OpenSSH server
//! serving several loopback hosts (tests/support/sshd.rs). Output, exit codes, kill,
//! timeout, an unreachable host and `retry_unreachable`, sshd stopped in the middle of a
//! run, and the wrapper deployed once per host per build.

use crate::sshd::Sshd;
use crate::util::*;

/// `saltpeter_config` with the ssh executor's configuration for `sshd`.
fn ssh_config(sshd: &Sshd) -> String {
    format!(
        "saltpeter_config:\n  ping_timeout: 5\n  executors:\n    ssh:\n      config: {}\n",
        sshd.executor_config()
    )
}

fn ssh_job(name: &str, targets: &[String], command: &str, extra: &str) -> String {
    format!(
        "{name}:\n  schedule: '@yearly'\n  executor: ssh\n  targets: [{}]\n  \
         target_type: list\n  command: '{command}'\n{extra}",
        targets.join(", ")
    )
}

fn start(sshd: &Sshd, jobs: &str) -> Daemon {
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-ssh.yaml", &ssh_config(sshd)),
        ("jobs.yaml", jobs),
    ])
}

fn wrapper_at(path: &str) -> String {
    format!("  wrapper_path: {path}\n")
}

#[test]
fn an_ssh_job_runs_on_each_host_with_output_exit_codes_and_an_unreachable_host() {
    let Some(sshd) = Sshd::start_hosts(2) else {
        return;
    };
    let mut targets = sshd.hosts();
    targets.push("127.0.0.1:1".to_string());
    let d = start(
        &sshd,
        &ssh_job(
            "s",
            &targets,
            "echo on $SP_MACHINE; exit 4",
            &wrapper_at(WRAPPER),
        ),
    );
    let (r, _) = d.run_wait("s");
    let id = r["id"].as_u64().expect("id");
    for host in sshd.hosts() {
        assert_eq!(target(&r, &host)["exit_code"], 4, "{r}\n{}", d.log_text());
        assert_eq!(d.output(id, &host), format!("on {host}\n"));
    }
    let down = target(&r, "127.0.0.1:1");
    assert_eq!(down["exit_code"], 255, "{r}");
    assert_eq!(down["reason"], "unreachable", "{r}");
}

#[test]
fn kill_and_timeout_of_an_ssh_job_go_through_the_wrapper() {
    let Some(sshd) = Sshd::start() else {
        return;
    };
    let host = vec![sshd.host()];
    let jobs = format!(
        "{}{}",
        ssh_job("long", &host, "sleep 60", &wrapper_at(WRAPPER)),
        ssh_job(
            "short",
            &host,
            "sleep 30",
            &format!("{}  timeout: 1\n  kill_grace: 1\n", wrapper_at(WRAPPER))
        )
    );
    let d = start(&sshd, &jobs);
    let id = d.run_now("long");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), &host[0])["state"] == "running").then_some(())
    });
    assert!(d.ctl(&["kill", &id.to_string()]).status.success());
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, &host[0])["exit_code"], 143, "{r}");
    let (r, _) = d.run_wait("short");
    assert_eq!(target(&r, &host[0])["exit_code"], 124, "{r}");
}

#[test]
fn an_unreachable_host_runs_its_target_when_sshd_comes_back() {
    let Some(mut sshd) = Sshd::start() else {
        return;
    };
    let host = vec![sshd.host()];
    let d = start(
        &sshd,
        &ssh_job(
            "back",
            &host,
            "echo back",
            &format!("{}  retry_unreachable: 60s\n", wrapper_at(WRAPPER)),
        ),
    );
    sshd.stop();
    let id = d.run_now("back");
    wait_until("the host waited for", HANG, || {
        (target(&d.run_record(id), &host[0])["state"] == "waiting_unreachable").then_some(())
    });
    sshd.start_again();
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, &host[0])["exit_code"], 0, "{r}");
    assert_eq!(d.output(id, &host[0]), "back\n");
}

#[test]
fn a_run_goes_on_when_sshd_stops_in_its_middle() {
    let Some(mut sshd) = Sshd::start() else {
        return;
    };
    let host = vec![sshd.host()];
    let d = start(
        &sshd,
        &ssh_job(
            "middle",
            &host,
            "sleep 3; echo finished",
            &wrapper_at(WRAPPER),
        ),
    );
    let id = d.run_now("middle");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), &host[0])["state"] == "running").then_some(())
    });
    sshd.stop();
    let r = d.wait_run_final(id);
    assert_eq!(target(&r, &host[0])["exit_code"], 0, "{r}");
    assert_eq!(d.output(id, &host[0]), "finished\n");
}

/// The daemon's log lines saying the wrapper was installed on a host.
fn installs(d: &Daemon) -> usize {
    d.log_text()
        .lines()
        .filter(|l| l.contains("this build's wrapper installed on"))
        .count()
}

#[test]
fn the_wrapper_is_deployed_once_per_host_per_build() {
    let Some(sshd) = Sshd::start_hosts(2) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bin/saltpeter-wrapper");
    let path_text = path.to_string_lossy().into_owned();
    let mut d = start(
        &sshd,
        &ssh_job(
            "deployed",
            &sshd.hosts(),
            "echo ok",
            &wrapper_at(&path_text),
        ),
    );
    let (r, code) = d.run_wait("deployed");
    assert_eq!(code, 0, "{r}\n{}", d.log_text());
    // The hosts share this machine's file system: one of them installed it.
    let first = installs(&d);
    assert!(first >= 1, "{}", d.log_text());
    let installed = std::fs::read(&path).expect("the wrapper installed");
    assert_eq!(installed, std::fs::read(WRAPPER).expect("this build"));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path).expect("mode").permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    let (r, code) = d.run_wait("deployed");
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        installs(&d),
        first,
        "not installed again for the same build"
    );
    // After a restart the hosts are asked again, and the plugin finds the same build.
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_exit();
    d.start_again();
    let (r, code) = d.run_wait("deployed");
    assert_eq!(code, 0, "{r}");
    assert_eq!(installs(&d), first, "the same build is not copied again");
}
