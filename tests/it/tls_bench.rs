//! Figures for issue 13's closing note (ignored; `cargo test --test it tls_bench --
//! --ignored --nocapture`): wrapper output throughput and HTTP latency with and
//! without TLS on the same machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::api::{AUTH, api_config, start_with};

const BYTES: u64 = 20_000_000;
const REQUESTS: usize = 300;

fn jobs() -> String {
    format!(
        "bulk:\n  schedule: '@yearly'\n  targets: [b1]\n  \
         command: 'yes 0123456789012345678901234567890123456789 | head -c {BYTES}'\n"
    )
}

/// Sequential GETs on one keep-alive connection; returns the median and worst latency.
fn latencies(mut io: impl Read + Write, n: usize) -> (Duration, Duration) {
    let req = format!(
        "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n{}: {}\r\n\r\n",
        AUTH.0, AUTH.1
    );
    let mut times = Vec::with_capacity(n);
    let mut reader_buf = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        io.write_all(req.as_bytes()).expect("send");
        let mut r = BufReader::new(&mut io);
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).expect("header line");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().expect("length");
            }
        }
        reader_buf.resize(length, 0);
        r.read_exact(&mut reader_buf).expect("body");
        times.push(t.elapsed());
    }
    times.sort();
    (times[n / 2], times[n - 1])
}

fn measure(tls: bool) {
    let config = api_config(&format!("  tls: {tls}\n  max_message_bytes: 4194304\n"));
    let (d, port) = start_with(&config, &jobs());
    let t = Instant::now();
    let (run, code) = d.run_wait("bulk");
    let took = t.elapsed();
    assert_eq!(code, 0, "{run}");
    let mib_s = BYTES as f64 / (1024.0 * 1024.0) / took.as_secs_f64();
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (median, worst) = if tls {
        let pem = std::fs::read(d.state_dir().join("tls-cert.pem")).expect("cert");
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem).expect("pem");
        let pin = saltpeter::tls::fingerprint(der.as_ref());
        let config = saltpeter::tls::verify::client_config(Some(pin)).expect("client config");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let conn = rustls::ClientConnection::new(config, name).expect("client");
        latencies(rustls::StreamOwned::new(conn, tcp), REQUESTS)
    } else {
        latencies(tcp, REQUESTS)
    };
    println!(
        "tls={tls}: wrapper output {} MB in {took:.2?} ({mib_s:.1} MiB/s end to end, committed); \
         HTTP GET /api/v1/status median {median:?}, worst {worst:?} over {REQUESTS} keep-alive requests",
        BYTES / 1_000_000
    );
}

#[test]
#[ignore = "a benchmark: prints figures"]
fn tls_bench_throughput_and_latency() {
    measure(false);
    measure(true);
}
