//! A wrapper with a valid session that sends compressed output frames of ~50 bytes, each
//! holding 1 MiB of zeros (a decompression bomb), or frames that lie about their size.
//! The hub charges every frame its read budget at the size it declares before
//! decompressing it (docs/security.md, "Compressed wrapper output"), so the hub and main
//! stay within the output budget whatever the ratio; a frame that does not hold what it
//! declares, or declares more than a message may hold, closes its link with the reason
//! logged. Meanwhile another job's run goes on untouched and the API answers.
//!
//! The hostile wrapper is this test: the job's `wrapper_path` is `/bin/true`, and the
//! test says hello with the launch token computed from the server secret.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tungstenite::{Message, WebSocket};

use crate::api::{api_config, start_with};
use crate::util::*;

/// How far hub and main together may grow over their size before the flood (KiB): the
/// output budget (32 MiB, 16 MiB reserve) with room for allocator slack and the
/// concurrent run, far below the gigabytes an unbounded hub reaches.
const GROWTH_KIB: u64 = 100 * 1024;
/// Where the test stops the flood whatever happens (KiB, hub plus main), so an
/// unbounded daemon does not take the machine down with it.
const STOP_KIB: u64 = 3 * 1024 * 1024;

/// The jobs: `bomb`, whose wrapper is the test, and `steady`, a real local run beside it
/// on `steady`, a machine of this test's own.
fn jobs(steady: &str) -> String {
    format!(
        "bomb:\n  schedule: '@yearly'\n  targets: [bomb1]\n  \
         wrapper_path: /bin/true\n  command: 'sleep 600'\n\
         steady:\n  schedule: '@yearly'\n  targets: [{}]\n  \
         command: 'for i in 1 2 3 4 5 6; do echo steady-$i; sleep 0.5; done'\n",
        steady
    )
}

/// A machine for the steady job. Local wrappers take an overlap lock per job and
/// machine on the host, so tests running at the same time need machines of their own.
fn steady_machine() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("steady{}-{n}", std::process::id())
}

/// A compressed output frame as the wrapper protocol carries it: `[stream | 0x80][seq]
/// [u32 declared length][zstd]`.
fn compressed_frame(seq: u64, declared: u32, packed: &[u8]) -> Vec<u8> {
    let mut frame = vec![1u8 | 0x80];
    frame.extend_from_slice(&seq.to_be_bytes());
    frame.extend_from_slice(&declared.to_be_bytes());
    frame.extend_from_slice(packed);
    frame
}

/// 1 MiB of zeros, zstd-compressed: a few dozen bytes.
fn mib_of_zeros() -> Vec<u8> {
    zstd::bulk::compress(&vec![0u8; 1 << 20], 1).expect("compress")
}

struct Session {
    d: Daemon,
    port: u16,
    run: u64,
    ws: WebSocket<TcpStream>,
    /// The same socket, to cut it from another thread.
    raw: TcpStream,
    /// The steady job's machine.
    steady: String,
}

/// A daemon with a `bomb` run whose wrapper is this test (welcomed with zstd output).
fn hostile_session() -> Session {
    let steady = steady_machine();
    let (d, port) = start_with(&api_config(""), &jobs(&steady));
    let run = d.run_now("bomb");
    let secret = saltpeter::tokens::Secret::load_or_create(&d.state_dir().join("server.secret"))
        .expect("secret");
    let stream =
        TcpStream::connect(("127.0.0.1", d.wrapper_port())).expect("connect to the wrapper port");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let raw = stream.try_clone().expect("clone");
    let url = format!("ws://127.0.0.1:{}/wrapper/v1", d.wrapper_port());
    let (mut ws, _) = tungstenite::client(url, stream).expect("websocket handshake");
    let hello = json!({"type": "hello", "v": 1, "run": run, "machine": "bomb1",
        "token": secret.launch_token(run, "bomb1", 1), "wrapper_version": "hostile",
        "pid": 1, "resume_from": null, "compression": ["zstd"]});
    ws.send(Message::text(hello.to_string())).expect("hello");
    let welcome = next_json(&mut ws).expect("welcome");
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert_eq!(welcome["compression"], "zstd", "{welcome}");
    ws.send(Message::text(
        json!({"type": "started", "pid": 1, "at": 0}).to_string(),
    ))
    .expect("started");
    Session {
        d,
        port,
        run,
        ws,
        raw,
        steady,
    }
}

/// Peak resident sizes (KiB) of hub and main.
#[derive(Debug, Default, Clone, Copy)]
struct Peaks {
    hub: u64,
    main: u64,
}

impl Peaks {
    fn take(&mut self, hub: u32, main: u32) -> u64 {
        let (h, m) = (rss_kib(hub).unwrap_or(0), rss_kib(main).unwrap_or(0));
        self.hub = self.hub.max(h);
        self.main = self.main.max(m);
        h + m
    }
}

/// Sends `frames` 1 MiB bombs from a thread for at most `window`, measuring hub and main
/// meanwhile; the link is cut at the end of the window, or at once when hub and main
/// pass [`STOP_KIB`]. Returns the peaks and the number of frames the socket took.
fn flood(s: Session, frames: u64, window: Duration) -> (Daemon, u64, Peaks, Peaks) {
    let Session {
        d,
        port,
        mut ws,
        raw,
        steady: machine,
        ..
    } = s;
    let (hub, main) = (d.pid_of("hub"), d.pid_of("main"));
    let mut before = Peaks::default();
    before.take(hub, main);
    let steady = d.run_now("steady");
    let packed = mib_of_zeros();
    eprintln!(
        "each frame: {} bytes declaring 1 MiB",
        compressed_frame(1, 1 << 20, &packed).len()
    );
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (sent, stop) = (sent.clone(), stop.clone());
        std::thread::spawn(move || {
            for seq in 1..=frames {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let frame = compressed_frame(seq, 1 << 20, &packed);
                if ws.send(Message::binary(frame)).is_err() {
                    break;
                }
                sent.store(seq, Ordering::Relaxed);
            }
            ws
        })
    };
    let mut peak = before;
    let started = Instant::now();
    let mut slowest_api = Duration::ZERO;
    let mut api_failures = 0;
    while started.elapsed() < window {
        if peak.take(hub, main) > before.hub + before.main + STOP_KIB {
            eprintln!("stopping the flood: hub and main passed the safety limit");
            break;
        }
        let asked = Instant::now();
        let healthz = crate::api::client::request(port, "GET", "/healthz", &[], b"");
        slowest_api = slowest_api.max(asked.elapsed());
        if healthz.status != 200 {
            api_failures += 1;
        }
        peak.take(hub, main);
        if sender.is_finished() && started.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = raw.shutdown(std::net::Shutdown::Both);
    let _ws = sender.join().expect("sender thread");
    peak.take(hub, main);
    let sent = sent.load(Ordering::Relaxed);
    eprintln!(
        "{sent} of {frames} frames sent in {:?}; slowest /healthz {slowest_api:?}, \
         {api_failures} failed; hub RSS {} -> {} MiB, main RSS {} -> {} MiB",
        started.elapsed(),
        before.hub >> 10,
        peak.hub >> 10,
        before.main >> 10,
        peak.main >> 10
    );
    assert_eq!(api_failures, 0, "/healthz failed during the flood");
    // The concurrent run is not lost.
    let r = d.wait_run_final(steady);
    assert_eq!(
        r["state"],
        "succeeded",
        "{r}\n{}\n{}",
        d.ctl_json(&["events", "--limit", "30"]),
        d.log_tail(40)
    );
    let expected: String = (1..=6).map(|i| format!("steady-{i}\n")).collect();
    assert_eq!(d.output(steady, &machine), expected);
    (d, sent, before, peak)
}

fn bombs(frames: u64) {
    let s = hostile_session();
    let (d, sent, before, peak) = flood(s, frames, Duration::from_secs(15));
    println!(
        "{frames} bomb frames ({sent} sent): hub RSS {} -> {} MiB, main RSS {} -> {} MiB",
        before.hub >> 10,
        peak.hub >> 10,
        before.main >> 10,
        peak.main >> 10
    );
    let grew = (peak.hub + peak.main).saturating_sub(before.hub + before.main);
    assert!(
        grew < GROWTH_KIB,
        "hub and main grew by {} MiB (hub {} -> {} MiB, main {} -> {} MiB)\n{}",
        grew >> 10,
        before.hub >> 10,
        peak.hub >> 10,
        before.main >> 10,
        peak.main >> 10,
        d.log_tail(40)
    );
}

#[test]
fn three_hundred_compression_bombs_stay_within_the_output_budget() {
    bombs(300);
}

#[test]
fn a_hundred_thousand_compression_bombs_stay_within_the_output_budget() {
    bombs(100_000);
}

/// Sends one frame and expects the hub to reject the link, naming `why`.
fn rejected_for(frame: Vec<u8>, why: &str) -> (Daemon, u64) {
    let Session { d, run, mut ws, .. } = hostile_session();
    ws.send(Message::binary(frame)).expect("frame");
    // Whatever else the hub sent first (acks), the link ends with a reject.
    let reject = loop {
        match next_json(&mut ws) {
            Some(m) if m["type"] == "reject" => break m,
            Some(_) => continue,
            None => panic!("the link closed without a reject\n{}", d.log_tail(40)),
        }
    };
    assert_eq!(reject["code"], "bad_message", "{reject}");
    let message = reject["message"].as_str().unwrap_or_default();
    assert!(message.contains(why), "{reject}");
    // Then the link closes.
    loop {
        match ws.read() {
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        }
    }
    // The log names the session and why, on one line.
    let line = wait_until("the reason in the log", HANG, || {
        d.log_text()
            .lines()
            .find(|l| l.contains(why))
            .map(str::to_string)
    });
    assert!(
        line.contains(&format!(
            "(run {run}, machine bomb1): rejected (BadMessage): output frame refused"
        )),
        "{line}"
    );
    // And it is recorded against the target, as a refusal.
    wait_until("the refusal recorded", HANG, || {
        d.ctl_json(&["events", "--kind", "wrapper_refused", "--limit", "50"])
            .as_array()?
            .iter()
            .find(|e| {
                e["run"] == run
                    && e["machine"] == "bomb1"
                    && e["message"].as_str().is_some_and(|m| m.contains(why))
            })
            .cloned()
    });
    (d, run)
}

#[test]
fn a_frame_that_holds_less_than_it_declares_closes_its_link() {
    // A few bytes of zeros declared as 1 MiB.
    let packed = zstd::bulk::compress(&[0u8; 1000], 1).expect("compress");
    let (d, run) = rejected_for(
        compressed_frame(1, 1 << 20, &packed),
        "does not decompress to its stated 1048576 bytes",
    );
    // Nothing of it was stored, and the target's outcome follows: its wrapper is gone.
    let r = d.wait_run_final(run);
    let t = target(&r, "bomb1");
    assert_eq!(t["reason"], "lost", "{r}");
    assert_eq!(t["exit_code"], 253, "{r}");
    assert_eq!(d.output(run, "bomb1"), "");
}

#[test]
fn a_frame_that_holds_more_than_it_declares_closes_its_link() {
    let packed = mib_of_zeros();
    rejected_for(
        compressed_frame(1, 4096, &packed),
        "does not decompress to its stated 4096 bytes",
    );
}

#[test]
fn a_frame_that_declares_more_than_a_message_may_hold_closes_its_link() {
    let packed = zstd::bulk::compress(&vec![0u8; 4 << 20], 1).expect("compress");
    rejected_for(
        compressed_frame(1, 4 << 20, &packed),
        "claims 4194304 bytes, more than the limit of 1048576",
    );
}
