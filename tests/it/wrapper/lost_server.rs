//! A wrapper whose server goes away (issue 20): one that has not started its command
//! gives up at its slot plus the stage grace and runs nothing; one whose command runs
//! keeps it, spools and retries, also past a server that does not know its run; a server
//! back within the grace finds a staged wrapper waiting. A hub that keeps the link but no
//! longer serves the run (it answers pings, nothing else) does not keep a staged wrapper
//! asleep: by its slot plus the grace it asks again, and gives up.

use std::path::Path;
use std::time::{Duration, Instant};

use super::peer::*;
use saltpeter::wire::wrapper::{ExitReason, RejectCode, ServerMsg, Stream, WrapperMsg};
use tungstenite::Message;

const HANG: Duration = Duration::from_secs(60);

/// A wrapper with a short stage grace, logging to `log`.
fn wrapper_with_grace(url: &str, run: u64, grace_s: u64, log: &Path) -> Wrapper {
    Wrapper(
        wrapper_cmd(url, run)
            .arg("--stage-grace")
            .arg(grace_s.to_string())
            .arg("--log")
            .arg(log)
            .spawn()
            .unwrap(),
    )
}

/// A command that removes `marker`: the marker still there means nothing ran.
fn marker_job(marker: &Path) -> saltpeter::wire::wrapper::JobSpec {
    job(&format!("rm {}", marker.display()))
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn a_staged_wrapper_whose_server_is_gone_gives_up_without_running() {
    // An ordered stop closes the WebSocket properly; a crash just drops the connection.
    for (run, ordered) in [(31, true), (32, false)] {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("not-run");
        std::fs::write(&marker, "").unwrap();
        let log = dir.path().join("wrapper.log");
        let peer = Peer::new();
        let mut child = wrapper_with_grace(&peer.url(), run, 1, &log);
        let mut conn = peer.accept();
        let _hello = conn.next_msg(&mut Output::default());
        conn.welcome_staged(&marker_job(&marker), "k1", Duration::from_millis(300));
        if ordered {
            conn.ws.close(None).unwrap();
            while conn.recv().is_some() {}
        }
        drop(conn);
        drop(peer);
        assert_eq!(wait_exit(&mut child, HANG), 3, "{}", log_text(&log));
        assert!(marker.exists(), "the command ran without a server");
        let text = log_text(&log);
        assert!(text.contains("nothing was run"), "{text}");
        assert!(text.contains(&format!("run {run}")), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "wrapper log mode {mode:o}");
    }
}

#[test]
fn a_staged_wrapper_gives_up_on_a_server_that_does_not_know_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("not-run");
    std::fs::write(&marker, "").unwrap();

    // Restarted with another state directory: the run is unknown there; final at once.
    let log = dir.path().join("unknown.log");
    let peer = Peer::new();
    let mut child = wrapper_with_grace(&peer.url(), 33, 3, &log);
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome_staged(&marker_job(&marker), "k1", Duration::from_millis(300));
    drop(conn);
    let mut conn = peer.accept_within(HANG);
    match conn.next_msg(&mut Output::default()) {
        WrapperMsg::Hello { resume_key, .. } => assert_eq!(resume_key.as_deref(), Some("k1")),
        other => panic!("expected hello, got {other:?}"),
    }
    conn.send(&ServerMsg::Reject {
        code: RejectCode::UnknownRun,
        message: "run 33 is not in flight".into(),
    });
    assert_eq!(wait_exit(&mut child, HANG), 2, "{}", log_text(&log));
    assert!(
        marker.exists(),
        "ran although the server does not know the run"
    );
    assert!(log_text(&log).contains("UnknownRun"), "{}", log_text(&log));

    // A server that never gets past `retry_later` does not know the run either.
    let log = dir.path().join("retry.log");
    let mut child = wrapper_with_grace(&peer.url(), 34, 1, &log);
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome_staged(&marker_job(&marker), "k1", Duration::from_millis(300));
    drop(conn);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < HANG, "the staged wrapper never gave up");
        // The wrapper may give up at any moment here, in the middle of a handshake.
        if let Some(mut conn) = peer.try_accept()
            && let Some(In::Msg(WrapperMsg::Hello { .. })) = conn.recv()
        {
            let reject = ServerMsg::Reject {
                code: RejectCode::RetryLater,
                message: "the server is loading the runs in flight".into(),
            };
            let _ = conn
                .ws
                .send(Message::text(serde_json::to_string(&reject).unwrap()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(wait_exit(&mut child, HANG), 3, "{}", log_text(&log));
    assert!(marker.exists(), "ran without a server that knows the run");
    let text = log_text(&log);
    assert!(
        text.contains("nothing was run") && text.contains("retry later"),
        "{text}"
    );
}

#[test]
fn a_staged_wrapper_reattaches_to_its_server_back_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("not-run");
    std::fs::write(&marker, "").unwrap();
    let log = dir.path().join("wrapper.log");
    let peer = Peer::new();
    let url = peer.url();
    let mut child = wrapper_with_grace(&url, 35, 60, &log);
    let mut conn = peer.accept();
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome_staged(&marker_job(&marker), "k1", Duration::from_millis(200));
    drop(conn);
    drop(peer);
    // The server is down over the slot, so its `go` reaches nobody; it comes back on the
    // same address and, past the slot, welcomes the wrapper without asking it to wait.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "gave up within the grace"
    );
    let peer = Peer::on(&url);
    let mut conn = peer.accept_within(HANG);
    match conn.next_msg(&mut Output::default()) {
        WrapperMsg::Hello { resume_key, .. } => assert_eq!(resume_key.as_deref(), Some("k1")),
        other => panic!("expected hello, got {other:?}"),
    }
    conn.welcome(&marker_job(&marker), "k1", 0, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    assert!(
        matches!(
            exited,
            WrapperMsg::Exited {
                code: Some(0),
                reason: ExitReason::Exit,
                ..
            }
        ),
        "{exited:?}"
    );
    assert_eq!(out.started, 1);
    assert!(
        !marker.exists(),
        "the command did not run after the re-attach"
    );
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut child, HANG), 0, "{}", log_text(&log));
}

#[test]
fn a_running_wrapper_keeps_its_command_past_a_lost_server_and_one_that_does_not_know_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wrapper.log");
    let peer = Peer::new();
    let url = peer.url();
    let mut child = wrapper_with_grace(&url, 36, 1, &log);
    let mut conn = peer.accept();
    let cmd = job("echo before; sleep 3; echo after");
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome(&cmd, "k1", 0, false);
    match conn.next_msg(&mut Output::default()) {
        WrapperMsg::Started { .. } => {}
        other => panic!("expected started, got {other:?}"),
    }
    drop(conn);
    drop(peer);
    // Longer than the stage grace and than the command: a running wrapper is not bound
    // by the grace.
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a running wrapper gave up: {}",
        log_text(&log)
    );
    // A server that does not know the run (another state directory) answers first.
    let peer = Peer::on(&url);
    let mut conn = peer.accept_within(HANG);
    let _hello = conn.next_msg(&mut Output::default());
    conn.send(&ServerMsg::Reject {
        code: RejectCode::UnknownRun,
        message: "run 36 is not in flight".into(),
    });
    while conn.recv().is_some() {}
    drop(conn);
    // Then the server that knows it: everything arrives.
    let mut conn = peer.accept_within(HANG);
    match conn.next_msg(&mut Output::default()) {
        WrapperMsg::Hello { resume_key, .. } => assert_eq!(resume_key.as_deref(), Some("k1")),
        other => panic!("expected hello, got {other:?}"),
    }
    conn.welcome(&cmd, "k1", 0, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    assert!(
        matches!(exited, WrapperMsg::Exited { code: Some(0), .. }),
        "{exited:?}"
    );
    assert_eq!(out.text(Stream::Stdout), "before\nafter\n");
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut child, HANG), 0, "{}", log_text(&log));
    assert!(
        log_text(&log).contains("does not know run 36"),
        "{}",
        log_text(&log)
    );
}

/// How a hub stops serving a staged wrapper's run while the TCP connection lives on.
#[derive(Debug, Clone, Copy)]
enum Silence {
    /// Reads (so every ping gets its pong) and never sends a message.
    AnswersPingsOnly,
    /// Closes the TCP connection without a WebSocket close frame.
    ClosesWithoutCloseFrame,
}

/// Plays `silence` on `conn` until the wrapper drops the link; returns when it did.
fn stay_silent(conn: Conn, silence: Silence) -> Instant {
    let mut ws = conn.ws;
    match silence {
        Silence::ClosesWithoutCloseFrame => {
            let _ = ws.get_ref().shutdown(std::net::Shutdown::Both);
            Instant::now()
        }
        Silence::AnswersPingsOnly => {
            ws.get_mut()
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let start = Instant::now();
            loop {
                assert!(start.elapsed() < HANG, "the wrapper slept on a silent hub");
                match ws.read() {
                    Ok(Message::Close(_)) => return Instant::now(),
                    Ok(_) => {} // heartbeats; pings are answered by `read` itself
                    Err(tungstenite::Error::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => return Instant::now(),
                }
            }
        }
    }
}

#[test]
fn a_staged_wrapper_whose_hub_stops_serving_its_run_asks_again_then_gives_up() {
    for (run, silence) in [
        (37, Silence::AnswersPingsOnly),
        (38, Silence::ClosesWithoutCloseFrame),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("not-run");
        std::fs::write(&marker, "").unwrap();
        let log = dir.path().join("wrapper.log");
        let peer = Peer::new();
        // A grace of 3 s, not 1: the second link must get its hello through before the
        // wrapper gives up, even on a loaded machine.
        let mut child = wrapper_with_grace(&peer.url(), run, 3, &log);
        let mut conn = peer.accept();
        let _hello = conn.next_msg(&mut Output::default());
        let slot_in = Duration::from_millis(300);
        let welcomed = Instant::now();
        conn.welcome_staged(&marker_job(&marker), "k1", slot_in);
        let dropped = stay_silent(conn, silence);
        // By the slot plus the grace (3 s) the wrapper is trying again: a new connection
        // (within the reconnect backoff's first step), which says hello and gets nothing.
        let mut again = peer.accept_within(HANG);
        let asked_again = Instant::now();
        let limit = slot_in + Duration::from_secs(3) + Duration::from_millis(750);
        assert!(
            asked_again - welcomed <= limit + Duration::from_millis(500),
            "{silence:?}: asked again {:?} after the welcome (dropped after {:?})\n{}",
            asked_again - welcomed,
            dropped - welcomed,
            log_text(&log)
        );
        match again.next_msg(&mut Output::default()) {
            WrapperMsg::Hello { resume_key, .. } => {
                assert_eq!(resume_key.as_deref(), Some("k1"))
            }
            other => panic!("expected hello, got {other:?}"),
        }
        // No server serves the run: gone within a grace of the lost link, nothing run.
        assert_eq!(wait_exit(&mut child, HANG), 3, "{}", log_text(&log));
        assert!(
            welcomed.elapsed() < Duration::from_secs(20),
            "{silence:?}: took {:?}",
            welcomed.elapsed()
        );
        assert!(marker.exists(), "the command ran without a server");
        let text = log_text(&log);
        assert!(text.contains("nothing was run"), "{text}");
        if let Silence::AnswersPingsOnly = silence {
            assert!(text.contains("no go or cancel"), "{text}");
        }
    }
}
