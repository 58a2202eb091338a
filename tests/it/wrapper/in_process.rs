//! The wrapper's `run` in a thread with small buffer limits, so the overflow paths
//! (spool file, counted loss) run end to end against the protocol peer.

use std::time::Duration;

use super::peer::*;
use saltpeter::wire::wrapper::{ExitReason, Stream, WrapperMsg};
use saltpeter::wrapper::{Limits, Options, Settings, parse_hub_url, run};

fn settings(url: &str, run: u64) -> Settings {
    Settings {
        hub: parse_hub_url(url).unwrap(),
        other_hubs: Vec::new(),
        run,
        machine: "m1".into(),
        credential: saltpeter::wrapper::Credential::Token(TOKEN.into()),
        give_up: Duration::from_secs(60),
    }
}

fn options(spool_dir: Option<std::path::PathBuf>) -> Options {
    Options {
        limits: Limits {
            frame_max: 4096,
            mem_cap: 64 * 1024,
            spool_cap: 1 << 30,
            coalesce: Duration::from_millis(50),
        },
        spool_dir,
        ..Options::default()
    }
}

/// The command writes 1 MB while the hub is away; returns what the peer finally holds.
fn run_with_outage(opts: Options, run_id: u64) -> (Output, WrapperMsg) {
    let peer = Peer::new();
    let s = settings(&peer.url(), run_id);
    let wrapper = std::thread::spawn(move || run(s, opts));
    let mut conn = peer.accept();
    let cmd = "sleep 0.3; seq 1 150000; echo end";
    handshake(&mut conn, &job(cmd), false);
    let mut out = Output::default();
    conn.next_msg(&mut out); // started
    drop(conn);
    std::thread::sleep(Duration::from_secs(2));
    let mut conn = peer.accept();
    conn.next_msg(&mut out); // hello
    conn.welcome(&job(cmd), "k2", 0, false);
    let exited = conn.collect_until_exited(&mut out);
    conn.send(&saltpeter::wire::wrapper::ServerMsg::Done {});
    wrapper.join().unwrap().unwrap();
    (out, exited)
}

fn expected() -> String {
    let mut want = String::new();
    for i in 1..=150000 {
        want.push_str(&format!("{i}\n"));
    }
    want.push_str("end\n");
    want
}

#[test]
fn spool_keeps_all_output_beyond_the_memory_cap() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let (out, exited) = run_with_outage(options(Some(spool.clone())), 41);
    assert!(matches!(
        exited,
        WrapperMsg::Exited {
            code: Some(0),
            reason: ExitReason::Exit,
            ..
        }
    ));
    assert!(out.text(Stream::Stdout) == expected(), "output differs");
    assert_eq!(out.text(Stream::Stderr), "");
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        0,
        "spool file left behind"
    );
}

#[test]
fn without_spool_loss_is_counted_in_a_stderr_note() {
    let (out, exited) = run_with_outage(options(None), 42);
    assert!(matches!(exited, WrapperMsg::Exited { code: Some(0), .. }));
    let stdout = out.text(Stream::Stdout);
    assert!(stdout.len() < expected().len() && stdout.starts_with("1\n2\n3\n"));
    let note = out.text(Stream::Stderr);
    let lost = expected().len() - stdout.len();
    assert!(
        note.contains(&format!("{lost} bytes of output were lost")),
        "{note}"
    );
}
