//! Compressed output chunks, part of the suite run on both backends: what readers get is
//! byte for byte what the command wrote, and the head and tail limits, positions and
//! byte counts are all uncompressed, whether chunks are compressed, plain (small
//! frames, or rows from before compression) or cut by the tail window.

use crate::roles::db::storage::Storage;
use crate::roles::db::store::tests::new_run;
use crate::wire::db::{OutputLimit, OutputQuery};
use crate::wire::records::RunState;
use crate::wire::wrapper::Stream;

on_both_backends!(
    compressed_chunks_read_back_exactly_within_uncompressed_limits,
    plain_and_compressed_chunks_mix,
);

/// Log-like lines, `n` of them, numbered from `first`.
fn lines(first: usize, n: usize) -> Vec<u8> {
    (first..first + n)
        .flat_map(|i| {
            format!(
                "2026-11-27T10:{:02}:{:02}Z INFO job step {i} ok path=/srv/a\n",
                i % 60,
                i % 7
            )
            .into_bytes()
        })
        .collect()
}

fn compressed_chunks_read_back_exactly_within_uncompressed_limits(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let limit = OutputLimit {
        head_bytes: 30_000,
        tail_bytes: 50_000,
    };
    let mut all = Vec::new();
    for seq in 1..=12u64 {
        let frame = lines(seq as usize * 1000, 400); // about 20 KB each
        s.append_output(run, "m", seq, Stream::Stdout, &frame, limit)
            .unwrap();
        all.extend_from_slice(&frame);
    }
    let total = all.len();
    let head = &all[..30_000];
    let tail = &all[total - 50_000..];
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.total_bytes, total as u64);
    assert_eq!(out.omitted_bytes, (total - 80_000) as u64);
    assert_eq!(out.omitted_at, Some(30_000));
    assert_eq!(out.data.len(), 80_000);
    assert!(out.data[..30_000] == *head, "the head is the first bytes");
    assert!(out.data[30_000..] == *tail, "the tail is the last bytes");
    let details = s.run_details(run).unwrap().unwrap().1;
    assert_eq!(details[0].output_bytes, total as u64);
    assert_eq!(details[0].omitted_bytes, (total - 80_000) as u64);

    // From a position inside a compressed chunk, a tail, and a page.
    let from = (total - 12_345) as u64;
    let part = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                from,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(part.data == all[total - 12_345..]);
    let last = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                tail: Some(777),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(last.data == all[total - 777..]);
    let page = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                max_bytes: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(page.data == all[..1000]);
    assert_eq!(page.next_from, 1000);
    let tails = s.output_tails(run, 100, 10).unwrap();
    assert_eq!(tails[0].1.as_bytes(), &all[total - 100..]);
}

fn plain_and_compressed_chunks_mix(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let limit = OutputLimit {
        head_bytes: 1 << 20,
        tail_bytes: 1 << 20,
    };
    let frames = [
        b"a short interactive line\n".to_vec(),
        lines(0, 500),
        b"\x00\xffbinary too\n".to_vec(),
        lines(500, 500),
    ];
    let mut all = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let stream = if i == 2 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        s.append_output(run, "m", i as u64 + 1, stream, frame, limit)
            .unwrap();
        all.extend_from_slice(frame);
    }
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert!(out.data == all);
    let stderr = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                stream: Some(Stream::Stderr),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(stderr.data, frames[2]);
    // A frame filling the whole tail window replaces compressed tail chunks.
    let small = OutputLimit {
        head_bytes: 10,
        tail_bytes: 5000,
    };
    let run2 = s
        .create_run(&new_run("k", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let mut all = Vec::new();
    for seq in 1..=6u64 {
        let frame = lines(seq as usize * 100, 60 + seq as usize);
        s.append_output(run2, "m", seq, Stream::Stdout, &frame, small)
            .unwrap();
        all.extend_from_slice(&frame);
    }
    let out = s.read_output(run2, "m", &OutputQuery::default()).unwrap();
    let mut expect = all[..10].to_vec();
    expect.extend_from_slice(&all[all.len() - 5000..]);
    assert!(out.data == expect);
    assert_eq!(out.omitted_bytes, (all.len() - 5010) as u64);
}

/// A row stored before compression (version 6: no `encoding`, no `raw_len`), read after
/// the migration to version 7, on top of which new frames are stored compressed.
fn plain_rows_of_version_6_stay_readable(s: &mut dyn Storage, run: u64, before: &[u8]) {
    let limit = OutputLimit {
        head_bytes: 1 << 20,
        tail_bytes: 1 << 20,
    };
    let newer = lines(0, 300);
    s.append_output(run, "m", 2, Stream::Stdout, &newer, limit)
        .unwrap();
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert!(out.data[..before.len()] == *before);
    assert!(out.data[before.len()..] == newer);
    assert_eq!(out.total_bytes, (before.len() + newer.len()) as u64);
    let from = s
        .read_output(
            run,
            "m",
            &OutputQuery {
                from: 3,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(from.data == out.data[3..]);
}

/// A version 6 SQL script for one run, target "m", with one plain output row.
const VERSION_6_OUTPUT: &str = "
    INSERT INTO runs (id, job, trigger, state, created) VALUES (1, 'j', 'manual', 'running', 0);
    INSERT INTO targets (run_id, machine, state, output_bytes, head_bytes, seq_contiguous)
        VALUES (1, 'm', 'running', 11, 11, 1);
    INSERT INTO output_chunks (run_id, machine, pos, seq, stream, data)
        VALUES (1, 'm', 0, 1, 1, 'old output\n');";

#[test]
fn sqlite_a_version_6_database_keeps_its_plain_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saltpeter.db");
    // SQLite stores the text as text; an old build bound blobs. Both read back.
    let rows = VERSION_6_OUTPUT.replace("'old output\n'", "CAST('old output\n' AS BLOB)");
    crate::roles::db::schema_at::sqlite(&path, 6, &rows);
    let mut store = crate::roles::db::store::Store::open(&path).unwrap();
    plain_rows_of_version_6_stay_readable(&mut store, 1, b"old output\n");
}

#[test]
fn postgres_a_version_6_database_keeps_its_plain_output() {
    let rows = VERSION_6_OUTPUT.replace("'old output\n'", "'old output\n'::BYTEA");
    let Some((url, _admin)) = crate::roles::db::schema_at::postgres(6, &rows) else {
        return;
    };
    let mut store = crate::roles::db::pg::PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    plain_rows_of_version_6_stay_readable(&mut store, 1, b"old output\n");
}
