//! Several servers in `SP_URL`, one that stores nothing for a while: the real wrapper
//! against protocol peers. A standby refuses (`retry_later`, then closes the link, as the
//! hub does) and the wrapper reaches the leader within a heartbeat; output the server
//! cannot store is held on the open link (`output_held`) and all arrives, in order, once
//! it can, with no second connection.

use std::time::{Duration, Instant};

use saltpeter::wire::wrapper::{RejectCode, ServerMsg, Stream, WrapperMsg};

use super::peer::{Conn, In, Output, Peer, job, start_wrapper, wait_exit};

const HANG: Duration = Duration::from_secs(30);

/// A standby's answer to a hello: `retry_later`, then the link closed.
fn refuse(conn: &mut Conn) {
    let _hello = conn.next_msg(&mut Output::default());
    conn.send(&ServerMsg::Reject {
        code: RejectCode::RetryLater,
        message: "this server is a standby; the leader is the other one".into(),
    });
    let _ = conn.ws.close(None);
    while conn.recv().is_some() {}
}

#[test]
fn a_wrapper_refused_by_the_standby_reaches_the_leader_within_a_heartbeat() {
    let standby = Peer::new();
    let leader = Peer::new();
    let mut wrapper = start_wrapper(&format!("{},{}", standby.url(), leader.url()), 41);
    let mut conn = standby.accept();
    refuse(&mut conn);
    let refused_at = Instant::now();
    let mut conn = leader.accept_within(HANG);
    let waited = refused_at.elapsed();
    assert!(waited < Duration::from_secs(1), "{waited:?} to the leader");
    assert!(standby.try_accept().is_none(), "back to the standby first");
    // Welcomed by the leader, which then drops the link: the standby refuses again and
    // the leader is reached again, after one round, within a heartbeat.
    let cmd = job("sleep 3; echo done");
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome(&cmd, "k1", 0, false);
    assert!(matches!(
        conn.next_msg(&mut Output::default()),
        WrapperMsg::Started { .. }
    ));
    drop(conn);
    let dropped_at = Instant::now();
    let mut conn = standby.accept_within(HANG);
    refuse(&mut conn);
    let mut conn = leader.accept_within(HANG);
    let waited = dropped_at.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "{waited:?} back to the leader"
    );
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome(&cmd, "k1", 0, false);
    let mut out = Output::default();
    let exited = conn.collect_until_exited(&mut out);
    assert!(matches!(exited, WrapperMsg::Exited { code: Some(0), .. }));
    assert_eq!(out.text(Stream::Stdout), "done\n");
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut wrapper, HANG), 0);
}

#[test]
fn output_the_server_cannot_store_is_held_and_resent_on_the_same_link() {
    let peer = Peer::new();
    let mut wrapper = start_wrapper(&peer.url(), 42);
    let mut conn = peer.accept();
    let cmd = job("for i in $(seq 1 60); do echo line $i; sleep 0.05; done");
    let _hello = conn.next_msg(&mut Output::default());
    conn.welcome(&cmd, "k1", 0, false);
    // The first two seconds nothing is stored: every frame is answered `output_held`.
    let mut out = Output::default();
    let mut held = 0;
    let full_until = Instant::now() + Duration::from_secs(2);
    let exited = loop {
        match conn.recv().expect("the wrapper closed the link") {
            In::Msg(m @ WrapperMsg::Exited { .. }) => break m,
            In::Msg(_) => {}
            In::Frame(f) if Instant::now() < full_until => {
                held += 1;
                conn.send(&ServerMsg::OutputHeld {
                    from_seq: out.contiguous() + 1,
                    retry_after_ms: 300,
                });
                assert!(f.seq > out.contiguous());
            }
            In::Frame(f) => {
                out.store(f);
                conn.send(&ServerMsg::Ack {
                    seq: out.contiguous(),
                });
            }
        }
    };
    assert!(held > 3, "only {held} frames were refused");
    let WrapperMsg::Exited { end_seq, code, .. } = exited else {
        unreachable!()
    };
    assert_eq!(code, Some(0));
    assert_eq!(
        out.contiguous(),
        end_seq,
        "every frame stored before exited"
    );
    let expected: String = (1..=60).map(|i| format!("line {i}\n")).collect();
    assert_eq!(out.text(Stream::Stdout), expected);
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut wrapper, HANG), 0);
    assert!(peer.try_accept().is_none(), "the wrapper connected again");
}
