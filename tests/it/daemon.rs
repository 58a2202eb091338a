//! The multi-process daemon: readiness, status, supervision, stop, restart, bad input.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::util::*;

#[test]
fn ready_and_status_lists_every_process() {
    let d = Daemon::start(&[]);
    let procs = d.processes();
    let roles: Vec<&str> = procs.iter().map(|(r, _)| r.as_str()).collect();
    for role in ["supervisor", "hub", "main", "db", "blocking"] {
        assert!(roles.contains(&role), "{role} missing from {roles:?}");
    }
    for (role, pid) in &procs {
        assert!(alive(*pid), "{role} pid {pid} is not alive");
        if role != "supervisor" {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            assert!(cmdline.contains(&format!("--role {role}")), "{cmdline}");
        }
    }
    let status = d.ctl_json(&["status"]);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert!(status["uptime_s"].is_u64());
}

#[test]
fn sigterm_stops_everything_cleanly() {
    let mut d = Daemon::start(&[]);
    let pids: Vec<u32> = d.processes().into_iter().map(|(_, p)| p).collect();
    d.signal(Signal::SIGTERM);
    let status = d.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", d.log_text());
    for pid in pids {
        wait_until("process gone", HANG, || (!alive(pid)).then_some(()));
    }
    assert!(!d.socket().exists(), "admin socket removed");
    assert!(
        !d.runtime_dir().join("saltpeter.pid").exists(),
        "pid file removed"
    );
    let log = d.log_text();
    let hub = log.find("hub process stopped").expect("hub stopped");
    let main = log.find("main process stopped").expect("main stopped");
    let db = log.find("db process stopped").expect("db stopped");
    assert!(hub < main && main < db, "ordered stop:\n{log}");
}

#[test]
fn sigkill_of_any_child_stops_all_with_failure() {
    for victim in ["hub", "main", "db", "blocking"] {
        let mut d = Daemon::start(&[]);
        let procs = d.processes();
        let pid = procs
            .iter()
            .find(|(r, _)| r == victim)
            .map(|(_, p)| *p)
            .expect("victim pid");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL)
            .expect("kill child");
        let status = d.wait_exit();
        assert_ne!(
            status.code(),
            Some(0),
            "killing {victim} must fail the daemon"
        );
        for (role, pid) in procs {
            wait_until(&format!("{role} gone after {victim} died"), HANG, || {
                (!alive(pid)).then_some(())
            });
        }
    }
}

#[test]
fn restart_after_cleanup_on_the_same_state() {
    let mut d = Daemon::start(&[]);
    // Crash the supervisor itself: children die with it, files are left behind.
    d.signal(Signal::SIGKILL);
    let _ = d.wait_exit();
    assert!(d.socket().exists(), "a crash leaves the socket behind");
    let out = d.cleanup();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!d.socket().exists(), "cleanup removed the stale socket");
    // Idempotent: nothing to do is success too.
    let again = d.cleanup();
    assert!(again.status.success());
    d.spawn();
    d.wait_ready();
    assert_eq!(d.processes().len(), 5);
}

fn start_fails(d: &mut Daemon) -> String {
    d.spawn();
    let status = d.wait_exit();
    assert_eq!(status.code(), Some(2), "{}", d.log_text());
    d.log_text()
}

#[test]
fn missing_config_dir_is_exit_2_naming_the_path() {
    let mut d = Daemon::prepare(&[]);
    std::fs::remove_dir_all(d.config_dir()).expect("remove config");
    let log = start_fails(&mut d);
    assert!(log.contains(path_str(&d.config_dir())), "{log}");
    assert!(log.contains("No such file or directory"), "{log}");
    assert!(!log.contains("started hub"), "nothing started: {log}");
}

#[test]
fn a_role_refusing_its_start_files_is_exit_2_naming_the_file() {
    // main checks the server secret after the supervisor's preflight: a secret readable by
    // others is an operator's fix, so the daemon must exit 2 (no restart loop), not 1.
    let mut d = Daemon::prepare(&[]);
    std::fs::create_dir_all(d.state_dir()).expect("state dir");
    let secret = d.state_dir().join("server.secret");
    std::fs::write(&secret, "00".repeat(32)).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let log = start_fails(&mut d);
    assert!(log.contains(path_str(&secret)), "{log}");
    assert!(log.contains("must not be readable by others"), "{log}");
}

#[test]
fn unusable_state_dir_is_exit_2() {
    let mut d = Daemon::prepare(&[]);
    // A regular file where the state directory should be: no user, root included, can
    // create a directory under it.
    std::fs::write(d.root.path().join("state"), b"not a directory").expect("file");
    let log = start_fails(&mut d);
    assert!(log.contains("state directory"), "{log}");
    assert!(log.contains(path_str(&d.state_dir())), "{log}");
}

#[test]
fn socket_of_a_live_daemon_is_exit_2_and_a_stale_one_is_cleaned() {
    let first = Daemon::start(&[]);
    let mut second = Daemon::prepare(&[]);
    // Point the second daemon at the first one's runtime dir.
    let out = std::process::Command::new(DAEMON)
        .arg("--config")
        .arg(second.config_dir())
        .arg("--state-dir")
        .arg(second.state_dir())
        .arg("--runtime-dir")
        .arg(first.runtime_dir())
        .output()
        .expect("run second daemon");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already") || err.contains("running"), "{err}");
    assert!(err.contains(path_str(&first.socket())), "{err}");
    // The first daemon is untouched.
    assert_eq!(first.processes().len(), 5);

    // A stale socket (nobody listening) is removed and start-up proceeds.
    std::fs::create_dir_all(second.runtime_dir()).expect("runtime dir");
    let stale = std::os::unix::net::UnixListener::bind(second.socket()).expect("bind");
    drop(stale);
    second.spawn();
    second.wait_ready();
    assert_eq!(second.processes().len(), 5);
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn a_settings_file_that_does_not_parse_is_exit_2_naming_file_and_line() {
    // Started without it, the daemon listened on the default 0.0.0.0 and said ready.
    let mut d = Daemon::prepare(&[(
        "10-settings.yaml",
        "saltpeter_config:\n  machines_ws_bind_addr: 127.0.0.1\n  api_ws: [true\n",
    )]);
    let log = start_fails(&mut d);
    let file = d.config_dir().join("10-settings.yaml");
    assert!(log.contains(path_str(&file)), "{log}");
    assert!(log.contains("line "), "{log}");
    assert!(!log.contains("started hub"), "nothing started: {log}");
}

#[test]
fn a_job_file_that_does_not_parse_does_not_stop_the_start() {
    let mut d = Daemon::prepare(&[("jobs.yaml", "broken: [\n")]);
    d.spawn();
    d.wait_ready();
}

#[test]
fn the_database_and_the_wrapper_logs_are_the_daemon_users_only() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        (
            "jobs.yaml",
            "quick:\n  schedule: '@yearly'\n  targets: [q]\n  command: 'true'\n",
        ),
    ]);
    let run = d.run_now("quick");
    d.wait_run_final(run);
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    for entry in std::fs::read_dir(d.state_dir())
        .expect("state dir")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("saltpeter.db") {
            assert_eq!(mode(&entry.path()) & 0o077, 0, "{name} is private");
        }
    }
    assert_eq!(mode(&d.state_dir().join("wrapper-logs")), 0o700);
}

#[test]
fn a_tls_key_readable_by_others_is_exit_2_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let mut d = Daemon::prepare(&[]);
    let key = d.root.path().join("server.key");
    std::fs::write(&key, "not checked before its mode\n").expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    d.write_config(
        "10-tls.yaml",
        &format!("saltpeter_config:\n  tls_key: {}\n", key.display()),
    );
    let log = start_fails(&mut d);
    assert!(log.contains(path_str(&key)), "{log}");
    assert!(log.contains("readable by others"), "{log}");
}
