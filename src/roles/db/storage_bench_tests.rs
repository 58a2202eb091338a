//! Storage ingest on both backends, measured (an ignored test run by hand).

use super::*;

/// Storage alone, both backends: 64 MiB of output in 16 KiB frames, 32 frames a batch
/// (as the db loop groups them), the default 1 MiB head + 1 MiB tail limit and a limit
/// that keeps everything. A measurement: prints, asserts only what was stored. Run with
/// `cargo test --release --lib bench_storage_ingest -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_storage_ingest() {
    fn ingest(s: &mut dyn Storage, limit: OutputLimit, frame_kib: usize) -> f64 {
        let run = s
            .create_run(&new_run("flood", None, RunState::Running, &["m"]))
            .unwrap()
            .unwrap();
        let frame = vec![b'y'; frame_kib * 1024];
        let frames = 64 * 1024 / frame_kib;
        let begin = std::time::Instant::now();
        for batch in 0..frames / 32 {
            s.begin_batch().unwrap();
            for i in 0..32 {
                let seq = (batch * 32 + i + 1) as u64;
                s.append_output(run, "m", seq, Stream::Stdout, &frame, limit)
                    .unwrap();
            }
            s.commit_batch().unwrap();
        }
        let secs = begin.elapsed().as_secs_f64();
        let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
        assert_eq!(out.total_bytes, (frames * frame.len()) as u64);
        (frames * frame.len()) as f64 / 1e6 / secs
    }
    let all = OutputLimit {
        head_bytes: 1 << 40,
        tail_bytes: 1 << 40,
    };
    let limits = [
        ("1 MiB head + tail", OutputLimit::default()),
        ("keep all", all),
    ];
    for kib in [16, 64] {
        for (name, limit) in limits {
            let (_dir, mut sqlite) = crate::roles::db::store::tests::temp_store();
            let on_sqlite = ingest(&mut sqlite, limit, kib);
            let on_pg = crate::roles::db::pg_cluster::fresh_database().map(|url| {
                let mut pg = crate::roles::db::pg::PgStore::connect(&url).unwrap();
                ingest(&mut pg, limit, kib)
            });
            println!(
                "64 MiB in {kib} KiB frames, {name}: SQLite {on_sqlite:.1} MB/s, PostgreSQL {}",
                on_pg.map_or("skipped".to_string(), |mb| format!("{mb:.1} MB/s"))
            );
        }
    }
}
