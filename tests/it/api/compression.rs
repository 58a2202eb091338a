//! Output compression end to end: a job printing a few MiB of log lines on the local
//! executor crosses the wrapper link and lands in SQLite compressed, and
//! `saltpeterctl output` and the API return exactly the bytes the command wrote.

use super::*;

/// About 3.5 MiB of log-like lines, deterministic.
const COMMAND: &str = "seq 1 50000 | awk '{printf \"2026-11-27T10:%02d:%02dZ INFO worker[%d] step %d done path=/srv/app/shard-%d bytes=%d\\n\", $1%60, ($1*7)%60, $1%8, $1, $1%16, ($1*7919)%100000}'";

#[test]
fn compressed_output_reads_back_byte_identical_and_is_stored_smaller() {
    output_reads_back_byte_identical("logs-zstd", &api_config(""), true);
}

/// With `output_compression: false` the hub welcomes the wrapper without compression:
/// plain frames on the link (the wrapper offers, the server declines), plain chunks in
/// the database, the same bytes.
#[test]
fn output_compression_off_keeps_the_link_plain_and_the_bytes_the_same() {
    // The per-host overlap lock is named by the job: each test has its own.
    output_reads_back_byte_identical(
        "logs-plain",
        &api_config("  output_compression: false\n"),
        false,
    );
}

fn output_reads_back_byte_identical(job: &str, config: &str, compressed: bool) {
    let expected = std::process::Command::new("sh")
        .args(["-c", COMMAND])
        .output()
        .expect("run the command here")
        .stdout;
    assert!(expected.len() > 3 << 20, "{} bytes", expected.len());
    let jobs = format!(
        "{job}:\n  schedule: '@yearly'\n  targets: [c1]\n  \
         output_limit: {{head: 8388608, tail: 8388608}}\n  command: {}\n",
        serde_json::to_string(COMMAND).expect("quoted")
    );
    let (d, port) = start_with(config, &jobs);
    let run = d.run_now(job);
    let record = d.wait_run_final(run);
    assert_eq!(record["state"], "succeeded", "{record}\n{}", d.log_text());

    let from_ctl = d.output(run, "c1");
    assert!(
        from_ctl.as_bytes() == expected,
        "saltpeterctl output differs"
    );
    // The API pages raw output (1 MiB by default): follow `X-Saltpeter-Next-From`.
    let mut from_api = Vec::new();
    while from_api.len() < expected.len() {
        let path = format!(
            "/api/v1/runs/{run}/targets/c1/output?format=raw&from={}&max_bytes=1000000",
            from_api.len()
        );
        let page = get(port, &path);
        assert_eq!(page.status, 200);
        assert!(!page.body.is_empty(), "no progress at {}", from_api.len());
        from_api.extend_from_slice(&page.body);
    }
    assert!(from_api == expected, "the API's output differs");
    let json = get(
        port,
        &format!("/api/v1/runs/{run}/targets/c1/output?tail=100"),
    )
    .json();
    assert_eq!(json["total_bytes"], expected.len() as u64);
    assert_eq!(
        json["data"].as_str().map(str::as_bytes),
        Some(&expected[expected.len() - 100..])
    );

    let db = rusqlite::Connection::open(d.state_dir().join("saltpeter.db")).expect("open db");
    let (stored, compressed_chunks): (i64, i64) = db
        .query_row(
            "SELECT sum(length(data)), sum(encoding = 1) FROM output_chunks WHERE run_id = ?1",
            [run as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("sum");
    let counted: i64 = db
        .query_row(
            "SELECT output_bytes FROM targets WHERE run_id = ?1",
            [run as i64],
            |r| r.get(0),
        )
        .expect("target");
    println!(
        "{} bytes of output, {stored} stored in {compressed_chunks} compressed chunks",
        expected.len()
    );
    assert_eq!(
        counted,
        expected.len() as i64,
        "output_bytes counts uncompressed bytes"
    );
    if !compressed {
        assert_eq!(compressed_chunks, 0);
        assert_eq!(stored as usize, expected.len());
        return;
    }
    assert!(compressed_chunks > 0);
    assert!(
        (stored as usize) * 3 < expected.len(),
        "{stored} bytes stored for {} of output",
        expected.len()
    );
}
