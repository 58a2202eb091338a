//! `saltpeter-wrapper --detach`, as the local executor starts it: one process that
//! leaves its launcher's session at once, says it started on stdout, closes stdout and
//! stderr while it runs on, and exits with its error on stderr when it cannot start.

use std::io::Read;
use std::process::Stdio;

use nix::unistd::{Pid, getsid};

use super::peer::*;
use saltpeter::wire::wrapper::{ServerMsg, Stream};

#[test]
fn detach_says_it_started_closes_its_pipes_and_runs_on_in_its_own_session() {
    let peer = Peer::new();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Wrapper(
        wrapper_cmd(&peer.url(), 31)
            .arg("--detach")
            .arg("--log")
            .arg(log.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Both pipes reach their end while the process still runs: no fork.
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        child.0.try_wait().unwrap(),
        None,
        "the wrapper itself runs on"
    );
    let pid = child.0.id();
    assert_eq!(
        stdout,
        format!("saltpeter-wrapper: run 31 continues in the background (pid {pid})\n")
    );
    assert_eq!(stderr, "");
    let me = Pid::from_raw(pid as i32);
    assert_eq!(getsid(Some(me)).ok(), Some(me), "a session of its own");

    let mut conn = peer.accept();
    handshake(&mut conn, &job("echo detached"), false);
    let mut o = Output::default();
    conn.collect_until_exited(&mut o);
    assert_eq!(o.text(Stream::Stdout), "detached\n");
    conn.send(&ServerMsg::Done {});
    assert!(conn.recv().is_none(), "wrapper should close after done");
    assert_eq!(child.0.wait().unwrap().code(), Some(0));
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains(TOKEN), "token leaked into the log");
}

#[test]
fn detach_that_cannot_start_exits_with_its_error_and_says_nothing_on_stdout() {
    let out = wrapper_cmd("ws://127.0.0.1:9/wrapper/v1", 32)
        .env_remove("SP_MACHINE")
        .arg("--detach")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SP_MACHINE"), "{stderr}");
}

#[test]
fn detach_and_daemonize_do_not_go_together() {
    let out = wrapper_cmd("ws://127.0.0.1:9/wrapper/v1", 33)
        .args(["--detach", "--daemonize"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}
