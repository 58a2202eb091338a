//! The interleavings that could leave a wrapper asleep, played on a real session over a
//! loopback socket (the peer end is held, never read), with the clock passed in: after
//! each step the wrapper is served, setting a link up, reconnecting or ending
//! ([`Standing`]), and where it waits on a server, something ends the wait.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::standing::Standing;
use super::timers::DONE_WAIT;
use super::{Phase, Session};
use crate::wire::wrapper::{JobSpec, RejectCode, ServerMsg};
use crate::wrapper::error::WrapperError;
use crate::wrapper::link::LinkEvent;
use crate::wrapper::settings::{Credential, Options, Settings, parse_hub_url};

const S: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(10);

/// A session for run 7 whose hub address refuses connections.
fn session(dir: &tempfile::TempDir) -> Session {
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let settings = Settings {
        hub: parse_hub_url(&format!("ws://{addr}")).unwrap(),
        other_hubs: Vec::new(),
        run: 7,
        machine: "m1".into(),
        credential: Credential::Token("t".into()),
        give_up: Duration::from_secs(3600),
    };
    let opts = Options {
        spool_dir: None,
        lock_dir: dir.path().to_path_buf(),
        stage_grace: GRACE,
        hello_timeout: 5 * S,
        ..Options::default()
    };
    Session::new(settings, opts).unwrap()
}

/// Opens the link over loopback and says hello, as `LinkEvent::Open` does; returns the
/// peer's end, to keep the connection up.
fn connect(s: &mut Session, now: Instant) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = mio::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (peer, _) = listener.accept().unwrap();
    s.link.open_for_test(stream, now);
    s.link_events.push(LinkEvent::Open);
    s.handle_link_events(now);
    peer
}

fn job(command: &str) -> JobSpec {
    JobSpec {
        name: "j".into(),
        command: command.into(),
        user: None,
        cwd: None,
        env: Default::default(),
        timeout_s: 0,
        kill_grace_s: 1,
        heartbeat_s: 1,
        overlap_lock: false,
        splay_s: 0,
        timeout_counts_suspended: true,
        limits: Default::default(),
        staged_heartbeat_s: 0,
    }
}

fn welcome(command: &str, slot_in: Option<Duration>) -> ServerMsg {
    ServerMsg::Welcome {
        job: Box::new(job(command)),
        resume_key: "k".into(),
        acked_seq: 0,
        wait_for_go: slot_in.is_some(),
        slot_in_ms: slot_in.map(|d| d.as_millis() as u64),
        compression: None,
    }
}

/// One turn of the loop after `now`'s events, as `run_loop` ends it.
fn turn(s: &mut Session, now: Instant) -> Standing {
    if let Phase::Running(r) = &mut s.phase {
        r.read_pipes(&mut s.out, &mut s.read_buf, now);
    }
    s.handle_link_events(now);
    s.on_timers(now);
    s.check_child(now);
    s.pump(now);
    s.handle_link_events(now);
    s.standing().unwrap_or_else(|breach| panic!("{breach}"))
}

/// Real-time turns until `done` holds (the command's process is real).
fn turn_until(s: &mut Session, done: impl Fn(&Session) -> bool) {
    let deadline = Instant::now() + 10 * S;
    while !done(s) {
        assert!(Instant::now() < deadline, "no progress");
        turn(s, Instant::now());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ended_with(s: &Session) -> Option<&Result<(), WrapperError>> {
    s.outcome.as_ref()
}

#[test]
fn a_connection_being_set_up_is_not_dialled_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    assert_eq!(s.standing(), Ok(Standing::Reconnecting));
    let _peer = connect(&mut s, t0);
    // The reconnect scheduled at the start is due, but the link is up: dropped, and the
    // hello's deadline is what bounds the wait now.
    assert_eq!(turn(&mut s, t0), Standing::AwaitingWelcome);
    assert_eq!(s.reconnect_at, None);
    let due = s.hello_deadline.unwrap();
    assert_eq!(turn(&mut s, due), Standing::Reconnecting);
}

#[test]
fn a_staged_wrapper_on_a_link_that_only_answers_pings_asks_again_by_its_slot_plus_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    s.on_message(t0, welcome("true", Some(5 * S)));
    assert!(matches!(s.phase, Phase::AwaitGo));
    // The hub answers every ping (last_rx stays fresh) but the server sends nothing.
    let slot_plus_grace = t0 + 5 * S + GRACE;
    let mut t = t0;
    while t < slot_plus_grace {
        s.link.last_rx = t;
        assert_eq!(turn(&mut s, t), Standing::Served, "at {:?}", t - t0);
        t += S / 2;
    }
    s.link.last_rx = t;
    assert_eq!(turn(&mut s, t), Standing::Reconnecting);
    assert!(s.link.is_down() && ended_with(&s).is_none());
    assert!(
        s.patience.why().contains("no go or cancel"),
        "{}",
        s.patience.why()
    );
    // No server welcomes it again: gone a grace after the link was dropped, nothing run.
    let retrying = turn(&mut s, t + GRACE - S);
    assert!(
        matches!(retrying, Standing::SettingUp | Standing::Reconnecting),
        "{retrying:?}"
    );
    assert_eq!(turn(&mut s, t + GRACE), Standing::Ending);
    assert!(matches!(
        ended_with(&s),
        Some(Err(WrapperError::NotStarted { .. }))
    ));
}

#[test]
fn done_while_waiting_for_go_ends_the_wrapper_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    s.on_message(t0, welcome("true", Some(5 * S)));
    s.on_message(t0 + S, ServerMsg::Done {});
    assert_eq!(turn(&mut s, t0 + S), Standing::Ending);
    assert!(matches!(s.phase, Phase::AwaitGo), "nothing started");
    assert!(matches!(
        ended_with(&s),
        Some(Err(WrapperError::Rejected {
            code: RejectCode::Finished,
            ..
        }))
    ));
}

#[test]
fn done_before_the_welcome_is_acted_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    s.on_message(t0, ServerMsg::Done {});
    assert_eq!(turn(&mut s, t0), Standing::AwaitingWelcome);
    s.on_message(t0, welcome("true", Some(5 * S)));
    assert_eq!(turn(&mut s, t0), Standing::Ending);
    assert!(matches!(s.phase, Phase::AwaitGo), "nothing started");
}

#[test]
fn done_while_the_command_runs_kills_it_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    s.on_message(t0, welcome("sleep 30", None));
    assert!(matches!(s.phase, Phase::Running(_)));
    s.on_message(t0, ServerMsg::Done {});
    // The link is closed and nothing is dialled: the kill ends the wrapper.
    assert_eq!(turn(&mut s, Instant::now()), Standing::Killing);
    assert!(s.link.is_down() && s.reconnect_at.is_none());
    turn_until(&mut s, |s| s.outcome.is_some());
    assert!(matches!(
        ended_with(&s),
        Some(Err(WrapperError::Rejected {
            code: RejectCode::Finished,
            ..
        }))
    ));
}

#[test]
fn giving_up_after_the_command_exited_still_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    // The shell exits at once; a background process keeps the pipes open.
    s.on_message(t0, welcome("sleep 30 & exit 0", None));
    turn_until(&mut s, |s| match &s.phase {
        Phase::Running(r) => r.next_deadline(Instant::now()).is_some(),
        _ => false,
    });
    s.give_up(Instant::now(), WrapperError::GaveUp(S));
    assert_eq!(turn(&mut s, Instant::now()), Standing::Killing);
    turn_until(&mut s, |s| s.outcome.is_some());
    assert!(matches!(ended_with(&s), Some(Err(WrapperError::GaveUp(_)))));
}

#[test]
fn exited_without_done_asks_again_on_a_new_link() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let _peer = connect(&mut s, Instant::now());
    s.on_message(Instant::now(), welcome("true", None));
    turn_until(&mut s, |s| s.exited_sent_at.is_some());
    let sent = s.exited_sent_at.unwrap_or_else(Instant::now);
    // Acks keep coming for a while (the server is storing the output): it is there.
    s.link.last_msg = sent + 30 * S;
    let due = sent + 30 * S + DONE_WAIT;
    let mut t = sent;
    while t < due {
        s.link.last_rx = t;
        assert_eq!(turn(&mut s, t), Standing::Served, "at {:?}", t - sent);
        t += 5 * S;
    }
    s.link.last_rx = due;
    assert_eq!(turn(&mut s, due), Standing::Reconnecting);
    assert!(ended_with(&s).is_none());
    assert_eq!(s.exited_sent_at, None, "exited goes again on the next link");
}

#[test]
fn final_rejections_while_waiting_for_go_end_the_wrapper() {
    // `unknown_run` from a current server, `bad_token` from an older one: alike.
    for code in [
        RejectCode::Finished,
        RejectCode::UnknownRun,
        RejectCode::BadToken,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(&dir);
        let t0 = Instant::now();
        let _peer = connect(&mut s, t0);
        s.on_message(t0, welcome("true", Some(5 * S)));
        let message = "no".to_string();
        s.on_message(t0, ServerMsg::Reject { code, message });
        assert_eq!(turn(&mut s, t0), Standing::Ending);
        assert!(matches!(
            ended_with(&s),
            Some(Err(WrapperError::Rejected { .. }))
        ));
    }
}

#[test]
fn a_server_that_does_not_know_a_running_command_is_asked_again() {
    // A current server's one refusal of an unproven hello, and an older server's
    // `bad_token`: alike.
    for code in [RejectCode::UnknownRun, RejectCode::BadToken] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = session(&dir);
        let t0 = Instant::now();
        let _peer = connect(&mut s, t0);
        s.on_message(t0, welcome("sleep 30", None));
        let message = "no target in flight matches this run, machine and credential".to_string();
        s.on_message(t0, ServerMsg::Reject { code, message });
        assert_eq!(turn(&mut s, Instant::now()), Standing::Reconnecting);
        assert!(s.abandon.is_none() && ended_with(&s).is_none());
        if let Phase::Running(r) = &mut s.phase {
            r.kill_now();
        }
    }
}

#[test]
fn the_rule_names_each_way_to_be_left_asleep() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    s.reconnect_at = None;
    assert_eq!(s.standing(), Err("no link and no reconnect scheduled"));
    s.reconnect_at = Some(t0);
    s.welcomed = true;
    assert_eq!(s.standing(), Err("welcomed, but the link is not open"));
    s.welcomed = false;
    s.abandon = Some(WrapperError::GaveUp(S));
    assert!(
        s.standing()
            .unwrap_err()
            .contains("no command is being killed")
    );
    s.abandon = None;
    let _peer = connect(&mut s, t0);
    s.hello_deadline = None;
    assert!(s.standing().unwrap_err().contains("no deadline"));
    s.outcome = Some(Ok(()));
    assert_eq!(s.standing(), Ok(Standing::Ending));
}

/// A session like [`session`] whose `SP_URL` names a second server (also refusing).
fn session_with_two_servers(dir: &tempfile::TempDir) -> Session {
    let mut s = session(dir);
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let second = parse_hub_url(&format!("ws://{}", gone.local_addr().unwrap())).unwrap();
    drop(gone);
    let first = s.rotation.current().clone();
    s.rotation = super::Rotation::new(
        first,
        vec![second],
        crate::wrapper::settings::Backoff::new(S / 2, 30 * S),
    );
    s
}

#[test]
fn a_retry_later_and_the_close_after_it_move_one_server_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session_with_two_servers(&dir);
    let first = s.rotation.current().url.clone();
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    // A standby's answer: the refusal, then the hub closes the link; one read has both.
    let refusal = ServerMsg::Reject {
        code: RejectCode::RetryLater,
        message: "not the leader".into(),
    };
    s.link_events.push(LinkEvent::Message(refusal.clone()));
    s.link_events
        .push(LinkEvent::Closed("the hub closed the link".into()));
    s.handle_link_events(t0);
    assert_ne!(s.rotation.current().url, first, "on to the other server");
    let hop = s.reconnect_at.unwrap() - t0;
    assert!(hop <= crate::wrapper::rotation::HOP * 3 / 2, "{hop:?}");
    // The other one refuses too: a full round, so back to the first after the backoff.
    let t1 = t0 + S;
    let _peer = connect(&mut s, t1);
    s.link_events.push(LinkEvent::Message(refusal));
    s.link_events
        .push(LinkEvent::Closed("the hub closed the link".into()));
    s.handle_link_events(t1);
    assert_eq!(s.rotation.current().url, first);
    let backoff = s.reconnect_at.unwrap() - t1;
    assert!(backoff >= S / 4, "{backoff:?}");
}

#[test]
fn output_held_sends_nothing_during_the_wait_then_one_frame_until_an_ack() {
    use crate::wire::wrapper::Stream;
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(&dir);
    let t0 = Instant::now();
    let _peer = connect(&mut s, t0);
    s.on_message(t0, welcome("true", Some(60 * S)));
    for (i, stream) in [Stream::Stdout, Stream::Stderr, Stream::Stdout]
        .into_iter()
        .enumerate()
    {
        s.out.push(stream, format!("line {i}\n").as_bytes(), t0);
    }
    s.out.flush_due(t0, true);
    s.pump(t0);
    assert!(s.out.all_sent());
    s.on_message(
        t0,
        ServerMsg::OutputHeld {
            from_seq: 1,
            retry_after_ms: 1000,
        },
    );
    s.pump(t0 + S / 2);
    assert_eq!(s.out.next_unsent().map(|f| f.seq), Some(1), "held");
    assert_eq!(turn(&mut s, t0 + S / 2), Standing::Served, "the link stays");
    s.pump(t0 + S);
    assert_eq!(s.out.next_unsent().map(|f| f.seq), Some(2), "one probe");
    s.pump(t0 + 2 * S);
    assert_eq!(s.out.next_unsent().map(|f| f.seq), Some(2), "one at a time");
    s.on_message(t0 + 2 * S, ServerMsg::Ack { seq: 1 });
    assert!(s.output_hold.is_none());
    s.pump(t0 + 2 * S);
    assert!(s.out.all_sent(), "stored again: the rest follows");
    assert!(s.link.is_open() && s.welcomed);
}
