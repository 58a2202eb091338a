//! The local executor's wrappers as processes (no systemd here): each one is the
//! blocking process's own child, started as `saltpeter-wrapper --detach` in a session of
//! its own, holding none of the daemon's descriptors, reaped when it ends; one that
//! cannot start is a failed launch carrying its error.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;

use nix::unistd::{Pid, getpgid, getsid};

use crate::util::*;

fn start(jobs: &str) -> Daemon {
    Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)])
}

/// The `socket:[inode]` and `pipe:[inode]` links among `pid`'s descriptors.
fn ipc_inodes(pid: u32) -> HashSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|l| l.to_string_lossy().into_owned())
                .filter(|l| l.starts_with("socket:") || l.starts_with("pipe:"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn local_wrapper_has_its_own_session_no_daemon_fds_and_is_reaped() {
    let d = start("held:\n  schedule: '@yearly'\n  targets: [h]\n  command: 'sleep 3'\n");
    let id = d.run_now("held");
    wait_until("command running", HANG, || {
        (target(&d.run_record(id), "h")["state"] == "running").then_some(())
    });
    let processes = d.processes();
    let blocking = processes
        .iter()
        .find(|(role, _)| role == "blocking")
        .map(|(_, pid)| *pid)
        .expect("blocking process");
    // Wrappers of earlier daemons of this test binary may still wait for theirs.
    let wrappers: Vec<u32> = wrapper_pids(id, "h")
        .into_iter()
        .filter(|pid| parent_of(*pid) == Some(blocking))
        .collect();
    assert_eq!(
        wrappers.len(),
        1,
        "one process per target, blocking's child: {wrappers:?}"
    );
    let wrapper = wrappers[0];

    let me = Pid::from_raw(wrapper as i32);
    assert_eq!(
        getsid(Some(me)).ok(),
        Some(me),
        "leads a session of its own"
    );
    assert_eq!(getpgid(Some(me)).ok(), Some(me), "leads its process group");
    let daemon_group = getpgid(Some(Pid::from_raw(d.pid() as i32))).expect("daemon group");
    assert_ne!(getpgid(Some(me)).ok(), Some(daemon_group));

    // Nothing of the daemon's: no link, listening socket or launch pipe (what the test
    // process itself passed down, such as a jobserver pipe, is not the daemon's).
    let inherited = ipc_inodes(std::process::id());
    let mine: HashSet<String> = ipc_inodes(wrapper)
        .difference(&inherited)
        .cloned()
        .collect();
    for (role, pid) in &processes {
        let shared: Vec<_> = ipc_inodes(*pid).intersection(&mine).cloned().collect();
        assert!(shared.is_empty(), "the wrapper holds {role}'s {shared:?}");
    }
    let stdio: Vec<String> = (0..3)
        .map(|fd| {
            std::fs::read_link(format!("/proc/{wrapper}/fd/{fd}"))
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(stdio[0], "/dev/null");
    assert!(
        stdio[1].ends_with(&format!("saltpeter-run-{id}-h.log")),
        "{stdio:?}"
    );
    assert_eq!(stdio[1], stdio[2]);

    let run = d.wait_run_final(id);
    assert_eq!(target(&run, "h")["exit_code"], 0, "{run}");
    // Reaped by blocking: gone from the process table, not a zombie.
    wait_until("the wrapper to be reaped", HANG, || {
        (!std::path::Path::new(&format!("/proc/{wrapper}")).exists()).then_some(())
    });
}

#[test]
fn local_wrapper_that_cannot_start_is_a_failed_launch_with_its_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broken = dir.path().join("broken-wrapper");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'saltpeter-wrapper: no such settings here' >&2\nexit 1\n",
    )
    .expect("write script");
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = start(&format!(
        "broken:\n  schedule: '@yearly'\n  targets: [b1, b2]\n  wrapper_path: {}\n  \
         command: 'echo never'\n",
        broken.display()
    ));
    let (run, code) = d.run_wait("broken");
    assert_eq!(code, 1);
    for m in ["b1", "b2"] {
        assert_eq!(target(&run, m)["exit_code"], 254, "{run}");
        assert_eq!(target(&run, m)["reason"], "wrapper_failed");
    }
    let events = d
        .ctl_json(&["events", "--kind", "launch_failed"])
        .to_string();
    assert!(events.contains("no such settings here"), "{events}");
    assert!(events.contains("exit status: 1"), "{events}");
    // The token nobody took is not left behind.
    let tokens = d.state_dir().join("launch-tokens");
    let left: Vec<_> = std::fs::read_dir(&tokens)
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_wide_run_starts_at_most_64_launches_at_once_and_launches_every_target() {
    const TARGETS: usize = 150;
    let dir = tempfile::tempdir().expect("temp dir");
    let busy = dir.path().join("busy");
    let seen = dir.path().join("seen");
    std::fs::create_dir(&busy).expect("busy dir");
    // A launch command that stays a moment and notes how many others run beside it.
    let slow = dir.path().join("slow-wrapper");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nrm -f \"$SP_TOKEN_FILE\"\ntouch {b}/$SP_MACHINE\nsleep 0.3\n\
             ls {b} | wc -l >> {s}\nrm -f {b}/$SP_MACHINE\necho started\n",
            b = busy.display(),
            s = seen.display()
        ),
    )
    .expect("write script");
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let targets: Vec<String> = (0..TARGETS).map(|i| format!("w{i}")).collect();
    let d = start(&format!(
        "wide:\n  schedule: '@yearly'\n  targets: [{}]\n  wrapper_path: {}\n  \
         command: 'true'\n",
        targets.join(", "),
        slow.display()
    ));
    d.run_now("wide");
    let counts = wait_until("every target launched", HANG, || {
        let text = std::fs::read_to_string(&seen).unwrap_or_default();
        let counts: Vec<usize> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (counts.len() == TARGETS).then_some(counts)
    });
    let most = counts.iter().copied().max().unwrap_or(0);
    assert!(most <= 64, "{most} launch commands ran at once");
    assert!(most > 1, "launches ran one at a time ({most})");
}

#[test]
fn a_local_job_gets_a_minimal_environment_not_the_daemons() {
    // The test daemon runs with NOTIFY_SOCKET and RUST_LOG set: neither may reach a job.
    let d = start(
        "envjob:\n  schedule: '@yearly'\n  targets: [e1]\n  command: 'env | sort'\n  \
         env:\n    JOB_SETTING: wanted\n",
    );
    let (run, code) = d.run_wait("envjob");
    assert_eq!(code, 0, "{run}");
    let out = d.output(run["id"].as_u64().expect("run id"), "e1");
    let names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
    for wanted in [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "JOB_SETTING",
        "SP_RUN",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing:\n{out}");
    }
    for leaked in [
        "NOTIFY_SOCKET",
        "RUST_LOG",
        "CARGO",
        "SP_URL",
        "SP_TOKEN_FILE",
    ] {
        assert!(!names.contains(&leaked), "{leaked} reached the job:\n{out}");
    }
}
