//! Scenario 10, output compression: the ratio and the CPU of `wire::compress` (zstd
//! level 1, what the wrapper and db run) on 64 KiB frames of a log-like output and of
//! `seq`, in this process. The choice of zstd over flate2 and lz4_flex, measured the
//! same way, is in docs/dependencies.md.

use std::io::Write;
use std::time::Instant;

use saltpeter::wire::compress::{compress_if_pays, decompress_capped};

use super::{Env, Scenario, size};
use crate::BenchError;
use crate::results::ScenarioResult;

pub const SCENARIO: Scenario = Scenario {
    name: "compression",
    title: "10. Output compression",
    about: "Output compressed as the wrapper and db do it (zstd level 1, 64 KiB frames, \
            a frame kept compressed only when that saves an eighth): the ratio and the \
            compress and decompress speed on one core, on 200 MiB of log-like lines \
            (timestamps, levels, paths, ids, numbers; deterministic; \
            SP_BENCH_COMPRESS_LOG_MIB) and on `seq 1 30000000` (SP_BENCH_COMPRESS_SEQ).",
    sizes_side_by_side: false,
    table: None,
    run,
};

const FRAME: usize = 64 * 1024;

fn run(env: &Env) -> Result<ScenarioResult, BenchError> {
    let mut result = env.result("compression");
    let log_mib = size("COMPRESS_LOG_MIB", 200);
    let seq_n = size("COMPRESS_SEQ", 30_000_000);
    result.sizes = format!("{log_mib} MiB of log lines; seq 1 {seq_n}");
    for (key, what, data) in [
        ("log", "log lines", log_like(log_mib << 20)),
        ("seq", "seq", seq(seq_n)),
    ] {
        measure(&mut result, key, what, &data)?;
    }
    Ok(result)
}

fn measure(r: &mut ScenarioResult, key: &str, what: &str, data: &[u8]) -> Result<(), BenchError> {
    let begin = Instant::now();
    let frames: Vec<(usize, Option<Vec<u8>>)> = data
        .chunks(FRAME)
        .map(|c| (c.len(), compress_if_pays(c)))
        .collect();
    let compress_s = begin.elapsed().as_secs_f64();
    let stored: usize = frames
        .iter()
        .map(|(raw, packed)| packed.as_ref().map_or(*raw, Vec::len))
        .sum();
    let begin = Instant::now();
    for (raw, packed) in &frames {
        if let Some(packed) = packed {
            decompress_capped(packed, *raw, FRAME)
                .map_err(|e| BenchError::Setup(format!("{what} does not decompress: {e}")))?;
        }
    }
    let decompress_s = begin.elapsed().as_secs_f64();
    let mb = data.len() as f64 / 1e6;
    r.figure(
        &format!("{key}_ratio"),
        &format!("{what}: ratio"),
        data.len() as f64 / stored.max(1) as f64,
        "x",
        None,
    );
    r.figure(
        &format!("{key}_compress"),
        &format!("{what}: compress"),
        mb / compress_s,
        "MB/s",
        None,
    );
    r.figure(
        &format!("{key}_decompress"),
        &format!("{what}: decompress"),
        mb / decompress_s,
        "MB/s",
        None,
    );
    Ok(())
}

/// Log-like lines of `total` bytes, the same at every run (xorshift).
fn log_like(total: usize) -> Vec<u8> {
    const LEVELS: [&str; 6] = ["INFO", "DEBUG", "WARN", "ERROR", "INFO", "INFO"];
    const PATHS: [&str; 5] = [
        "/var/lib/app/cache",
        "/etc/nginx/sites-enabled/default",
        "/srv/data/shard-07",
        "/usr/local/bin/backup.sh",
        "/home/deploy/releases/2026-11-27",
    ];
    const MESSAGES: [&str; 6] = [
        "request served",
        "connection reset by peer",
        "retrying upload",
        "checksum ok",
        "rotated file",
        "slow query took",
    ];
    let mut out = Vec::with_capacity(total + 256);
    let (mut x, mut t, mut i) = (0x9E37_79B9_7F4A_7C15u64, 1_795_000_000_000u64, 0u64);
    while out.len() < total {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += x % 900;
        i += 1;
        let secs = t / 1000;
        let _ = writeln!(
            out,
            "2026-11-27T{:02}:{:02}:{:02}.{:03}Z {:5} worker[{}] {} path={} bytes={} id={:016x} n={}",
            (secs / 3600) % 24,
            (secs / 60) % 60,
            secs % 60,
            t % 1000,
            LEVELS[(x % 6) as usize],
            (x >> 24) % 16,
            MESSAGES[((x >> 16) % 6) as usize],
            PATHS[((x >> 8) % 5) as usize],
            (x >> 32) % 1_000_000,
            x,
            i
        );
    }
    out.truncate(total);
    out
}

/// What `seq 1 n` prints.
fn seq(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 1..=n {
        let _ = writeln!(out, "{i}");
    }
    out
}
