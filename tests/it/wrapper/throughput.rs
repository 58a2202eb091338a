//! Output throughput and memory of the wrapper: `yes | head -c N` streamed to a peer
//! that stores every frame and acks every 16 frames. Prints MB/s and peak VmRSS.
//! N defaults to 200M; set SP_TEST_BYTES to change it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::peer::*;
use saltpeter::wire::wrapper::{ServerMsg, WrapperMsg};

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
#[ignore = "benchmark: prints figures"]
fn bench_wrapper_alone_throughput_and_rss() {
    let size = std::env::var("SP_TEST_BYTES").unwrap_or_else(|_| "200M".into());
    let peer = Peer::new();
    let mut child = start_wrapper(&peer.url(), 99);
    let pid = child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = vm_rss_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut conn = peer.accept();
    let idle_rss = {
        std::thread::sleep(Duration::from_millis(100));
        vm_rss_kib(pid).unwrap_or(0)
    };
    handshake(&mut conn, &job(&format!("yes | head -c {size}")), false);
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut frames = 0u64;
    let mut last_seq = 0u64;
    loop {
        match conn.recv().expect("link closed") {
            In::Frame(f) => {
                assert_eq!(f.seq, last_seq + 1, "frames out of order");
                last_seq = f.seq;
                bytes += f.data.len() as u64;
                frames += 1;
                if frames.is_multiple_of(16) {
                    conn.send(&ServerMsg::Ack { seq: last_seq });
                }
            }
            In::Msg(WrapperMsg::Exited { end_seq, code, .. }) => {
                assert_eq!((end_seq, code), (last_seq, Some(0)));
                break;
            }
            In::Msg(_) => {}
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    conn.send(&ServerMsg::Done {});
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    eprintln!(
        "throughput: {bytes} bytes in {frames} frames, {secs:.2} s, {:.1} MB/s; \
         wrapper VmRSS idle {idle_rss} KiB, peak {} KiB",
        bytes as f64 / secs / 1e6,
        peak.load(Ordering::Relaxed)
    );
}
