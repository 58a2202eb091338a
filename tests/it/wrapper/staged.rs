//! A pre-staged wrapper's heartbeat: the slower staged period the welcome gives while it
//! waits for `go`, the job's own once its command runs.

use std::time::{Duration, Instant};

use saltpeter::wire::wrapper::{ServerMsg, WrapperMsg};

use super::peer::{In, Output, Peer, handshake, job, start_wrapper, wait_exit};

#[test]
fn a_staged_wrapper_beats_at_the_staged_period_until_go() {
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 41);
    let mut conn = peer.accept();
    let mut j = job("sleep 3");
    j.heartbeat_s = 1;
    j.staged_heartbeat_s = 3;
    handshake(&mut conn, &j, true);
    // Staged: the heartbeat of the welcome, one 3 s later, the next at 6 s.
    let staged_at = Instant::now();
    let mut staged_beats = 0;
    while staged_at.elapsed() < Duration::from_millis(4500) {
        match conn
            .recv()
            .expect("the wrapper closed the link while staged")
        {
            In::Msg(WrapperMsg::Heartbeat { .. }) => staged_beats += 1,
            other => panic!("staged, the wrapper sent {other:?}"),
        }
    }
    assert!(
        staged_beats <= 3,
        "{staged_beats} heartbeats in 4.5 s staged with a 3 s staged period"
    );
    // Running: one a second.
    conn.send(&ServerMsg::Go {});
    let mut running_beats = 0;
    let mut out = Output::default();
    loop {
        match conn
            .recv()
            .expect("the wrapper closed the link while running")
        {
            In::Msg(WrapperMsg::Heartbeat { .. }) => running_beats += 1,
            In::Msg(WrapperMsg::Exited { .. }) => break,
            In::Msg(_) => {}
            In::Frame(f) => out.store(f),
        }
    }
    assert!(
        running_beats >= 2,
        "{running_beats} heartbeats during a 3 s command with a 1 s period"
    );
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
}
