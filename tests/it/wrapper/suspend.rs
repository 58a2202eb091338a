//! `suspend` and `resume` on the wrapper's side of the protocol: the capability in
//! `hello`, the state in heartbeats and in the hello of a reconnect, and the process group
//! really stopped and continued.

use std::time::Duration;

use super::peer::*;
use saltpeter::wire::wrapper::{CAP_SUSPEND, ExitReason, ServerMsg, Stream, WrapperMsg};

/// The state letter of `pid` (`T`: stopped).
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn wait_state(pid: u32, want: char) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while state_of(pid) != Some(want) {
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} never {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads until a heartbeat saying `suspended`, storing frames.
fn heartbeat_saying(conn: &mut Conn, out: &mut Output, suspended: bool) {
    loop {
        match conn.recv().expect("the link") {
            In::Msg(WrapperMsg::Heartbeat { suspended: s, .. }) if s == suspended => return,
            In::Msg(_) => {}
            In::Frame(f) => out.store(f),
        }
    }
}

#[test]
fn suspend_stops_the_group_and_a_reconnect_says_so() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 29);
    let mut conn = peer.accept();
    // 20 ticks of 0.1 s of running time.
    let job = job("for i in $(seq 1 20); do sleep 0.1; done; echo ticked");
    let hello = handshake(&mut conn, &job, false);
    match &hello {
        WrapperMsg::Hello {
            capabilities,
            suspended,
            ..
        } => {
            assert!(
                capabilities.contains(&CAP_SUSPEND.to_string()),
                "{capabilities:?}"
            );
            assert!(!suspended);
        }
        other => panic!("expected hello, got {other:?}"),
    }
    let mut out = Output::default();
    let pid = match conn.next_msg(&mut out) {
        WrapperMsg::Started { pid, .. } => pid,
        other => panic!("expected started, got {other:?}"),
    };
    conn.send(&ServerMsg::Suspend {});
    heartbeat_saying(&mut conn, &mut out, true);
    wait_state(pid, 'T');
    // Heartbeats keep coming, and say it.
    heartbeat_saying(&mut conn, &mut out, true);

    // The link drops: the reconnect's hello says the command is suspended.
    drop(conn);
    let mut conn = peer.accept();
    match conn.next_msg(&mut out) {
        WrapperMsg::Hello {
            suspended,
            resume_key,
            ..
        } => {
            assert!(suspended, "the hello of a reconnect says suspended");
            assert_eq!(resume_key.as_deref(), Some("resume-key-1"));
        }
        other => panic!("expected hello, got {other:?}"),
    }
    assert_eq!(state_of(pid), Some('T'), "still stopped");
    conn.welcome(&job, "resume-key-1", out.contiguous(), false);
    conn.send(&ServerMsg::Resume {});
    heartbeat_saying(&mut conn, &mut out, false);
    let exited = conn.collect_until_exited(&mut out);
    match exited {
        WrapperMsg::Exited { code, reason, .. } => {
            assert_eq!((code, reason), (Some(0), ExitReason::Exit))
        }
        other => panic!("expected exited, got {other:?}"),
    }
    assert_eq!(out.text(Stream::Stdout), "ticked\n");
    let notes = out.text(Stream::Stderr);
    assert!(
        notes.contains("suspended by the server") && notes.contains("resumed by the server"),
        "{notes}"
    );
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
}
