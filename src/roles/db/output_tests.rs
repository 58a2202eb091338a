//! Tests of output storage: idempotence by seq, order, the head + tail limit, gaps,
//! reads from a position; and a throughput measurement (ignored by default).

use super::*;
use crate::roles::db::storage::Storage;
use crate::roles::db::store::Store;
use crate::roles::db::store::tests::{Extra, Operations};
use crate::roles::db::store::tests::{new_run, temp_store};
use crate::wire::db::OutputLimit;
use crate::wire::records::RunState;

const NO_LIMIT: OutputLimit = OutputLimit {
    head_bytes: u64::MAX,
    tail_bytes: 0,
};

fn store_with_target() -> (tempfile::TempDir, Store, RunId) {
    let (dir, mut store) = temp_store();
    let id = store
        .create_run(&new_run("job", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    (dir, store, id)
}

fn chunk_rows(store: &Store) -> i64 {
    store
        .conn
        .query_row("SELECT count(*) FROM output_chunks", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_resent_seq_stores_no_duplicate() {
    let (_dir, mut store, id) = store_with_target();
    for (seq, data) in [(1, "one "), (2, "two "), (3, "three")] {
        let got = store
            .append_output(id, "m", seq, Stream::Stdout, data.as_bytes(), NO_LIMIT)
            .unwrap();
        assert!(!got.duplicate);
        assert_eq!((got.kept, got.contiguous_seq), (data.len() as u64, seq));
    }
    let again = store
        .append_output(id, "m", 2, Stream::Stdout, b"two ", NO_LIMIT)
        .unwrap();
    assert_eq!(
        again,
        AppendOutcome {
            duplicate: true,
            kept: 0,
            omitted: 0,
            contiguous_seq: 3
        }
    );
    let out = store.output(id, "m").unwrap();
    assert_eq!(out.data, b"one two three");
    assert_eq!(
        (out.total_bytes, out.omitted_bytes, out.omitted_at),
        (13, 0, None)
    );
    assert_eq!(chunk_rows(&store), 3);
}

#[test]
fn stdout_and_stderr_keep_their_arrival_order() {
    let (_dir, mut store, id) = store_with_target();
    let frames = [
        (Stream::Stdout, "out1 "),
        (Stream::Stderr, "err1 "),
        (Stream::Stdout, "out2 "),
        (Stream::Stderr, "err2"),
    ];
    for (seq, (stream, data)) in frames.iter().enumerate() {
        store
            .append_output(id, "m", seq as u64 + 1, *stream, data.as_bytes(), NO_LIMIT)
            .unwrap();
    }
    assert_eq!(store.output(id, "m").unwrap().data, b"out1 err1 out2 err2");
    let stderr = store
        .read_output(
            id,
            "m",
            &OutputQuery {
                stream: Some(Stream::Stderr),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(stderr.data, b"err1 err2");
    assert_eq!(stderr.total_bytes, 19);
}

#[test]
fn the_limit_keeps_head_and_tail_and_counts_the_rest() {
    let (_dir, mut store, id) = store_with_target();
    let limit = OutputLimit {
        head_bytes: 10,
        tail_bytes: 10,
    };
    // Ten frames of four bytes: aaaa bbbb ... jjjj.
    for (seq, letter) in (1..=10).zip(b'a'..) {
        store
            .append_output(id, "m", seq, Stream::Stdout, &[letter; 4], limit)
            .unwrap();
    }
    let out = store.output(id, "m").unwrap();
    assert_eq!(&out.data[..10], b"aaaabbbbcc");
    assert_eq!(&out.data[10..], b"hhiiiijjjj");
    assert_eq!(
        (out.omitted_bytes, out.total_bytes, out.omitted_at),
        (20, 40, Some(10))
    );
    let detail = store.get_target(id, "m").unwrap().unwrap();
    assert_eq!(
        (
            detail.output_bytes,
            detail.omitted_bytes,
            detail.contiguous_seq
        ),
        (40, 20, 10)
    );

    // Seq 5 (eeee) was dropped by the limit; its resend is still a duplicate.
    let resent = store
        .append_output(id, "m", 5, Stream::Stdout, b"eeee", limit)
        .unwrap();
    assert!(resent.duplicate);
    assert_eq!(store.output(id, "m").unwrap(), out);

    // A frame bigger than the tail replaces the tail window.
    let big = store
        .append_output(id, "m", 11, Stream::Stderr, b"0123456789ABCDEF", limit)
        .unwrap();
    assert_eq!((big.kept, big.omitted), (10, 16));
    let out = store.output(id, "m").unwrap();
    assert_eq!(out.data, b"aaaabbbbcc6789ABCDEF");
    assert_eq!((out.omitted_bytes, out.total_bytes), (36, 56));
}

/// A small deterministic generator (no test randomness that cannot be replayed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn the_limit_matches_a_model_for_many_shapes() {
    let (_dir, mut store) = temp_store();
    let mut rng = Lcg(7);
    for case in 0..60 {
        let machine = format!("m{case}");
        let id = store
            .create_run(&new_run(
                "job",
                None,
                RunState::Running,
                &[machine.as_str()],
            ))
            .unwrap()
            .unwrap();
        let limit = OutputLimit {
            head_bytes: rng.below(40),
            tail_bytes: rng.below(40),
        };
        let mut full = Vec::new();
        let mut omitted = 0;
        for seq in 1..=rng.below(30) + 1 {
            let len = rng.below(25) as usize;
            let frame: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
            let got = store
                .append_output(id, &machine, seq, Stream::Stdout, &frame, limit)
                .unwrap();
            omitted += got.omitted;
            full.extend_from_slice(&frame);
            // Resending any earlier frame changes nothing.
            let old = rng.below(seq) + 1;
            assert!(
                store
                    .append_output(id, &machine, old, Stream::Stdout, b"zz", limit)
                    .unwrap()
                    .duplicate
            );
        }
        let (head, tail) = (limit.head_bytes as usize, limit.tail_bytes as usize);
        let expected = if full.len() <= head + tail {
            full.clone()
        } else {
            [&full[..head], &full[full.len() - tail..]].concat()
        };
        let out = store.output(id, &machine).unwrap();
        assert_eq!(
            out.data,
            expected,
            "case {case}: {limit:?}, {} bytes",
            full.len()
        );
        assert_eq!(
            out.omitted_bytes,
            (full.len() - expected.len()) as u64,
            "case {case}"
        );
        assert_eq!(
            omitted, out.omitted_bytes,
            "case {case}: per-frame counts add up"
        );
        assert_eq!(out.total_bytes, full.len() as u64);
        let gap = (out.omitted_bytes > 0 && tail > 0).then_some(head);
        assert_eq!(out.omitted_at, gap, "case {case}");
    }
}

#[test]
fn contiguous_seq_waits_for_gaps_to_close() {
    let (_dir, mut store, id) = store_with_target();
    let mut append = |seq: u64| {
        store
            .append_output(
                id,
                "m",
                seq,
                Stream::Stdout,
                format!("[{seq}]").as_bytes(),
                NO_LIMIT,
            )
            .unwrap()
    };
    assert_eq!(append(1).contiguous_seq, 1);
    assert_eq!(append(2).contiguous_seq, 2);
    assert_eq!(append(4).contiguous_seq, 2);
    assert_eq!(append(5).contiguous_seq, 2);
    assert!(append(4).duplicate, "seen above the gap");
    assert_eq!(append(3).contiguous_seq, 5);
    assert_eq!(append(7).contiguous_seq, 5);
    assert_eq!(append(6).contiguous_seq, 7);
    assert!(append(5).duplicate);
    assert_eq!(store.max_contiguous_seq(id, "m").unwrap(), 7);
    let pending: i64 = store
        .conn
        .query_row(
            "SELECT count(*) + sum(seq_pending) FROM output_seen, targets",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0);
    assert_eq!(
        pending, 0,
        "no seen seqs are left above the contiguous mark"
    );
    assert_eq!(
        store.output(id, "m").unwrap().data,
        b"[1][2][4][5][3][7][6]"
    );
}

#[test]
fn bad_seqs_and_unknown_targets_are_errors() {
    let (_dir, mut store, id) = store_with_target();
    let zero = store.append_output(id, "m", 0, Stream::Stdout, b"x", NO_LIMIT);
    assert!(matches!(zero, Err(StoreError::Invalid { .. })));
    let huge = store.append_output(id, "m", u64::MAX, Stream::Stdout, b"x", NO_LIMIT);
    assert!(matches!(huge, Err(StoreError::Invalid { .. })));
    let unknown = store.append_output(id, "x", 1, Stream::Stdout, b"x", NO_LIMIT);
    assert!(matches!(unknown, Err(StoreError::NotFound { .. })));
    assert!(matches!(
        store.max_contiguous_seq(id, "x"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.output(id + 1, "m"),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.max_contiguous_seq(id, "m").unwrap(), 0);
}

#[test]
fn a_live_reader_follows_from_its_position_across_trims() {
    let (_dir, mut store, id) = store_with_target();
    let limit = OutputLimit {
        head_bytes: 8,
        tail_bytes: 8,
    };
    let mut seen = Vec::new();
    let mut from = 0;
    let mut full = Vec::new();
    for seq in 1..=12u64 {
        let frame = format!("<{seq:02}>");
        full.extend_from_slice(frame.as_bytes());
        store
            .append_output(id, "m", seq, Stream::Stdout, frame.as_bytes(), limit)
            .unwrap();
        // Polling after every frame: nothing is missed while it still fits the tail.
        let got = store
            .read_output(
                id,
                "m",
                &OutputQuery {
                    from,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(got.omitted_at, None, "seq {seq}: {got:?}");
        seen.extend_from_slice(&got.data);
        from = got.next_from;
    }
    assert_eq!(seen, full);

    // Paging with max_bytes rebuilds the kept output; `tail` gives the last bytes.
    let mut paged = Vec::new();
    let mut from = 0;
    loop {
        let page = store
            .read_output(
                id,
                "m",
                &OutputQuery {
                    from,
                    max_bytes: Some(3),
                    ..Default::default()
                },
            )
            .unwrap();
        if page.data.is_empty() {
            break;
        }
        paged.extend_from_slice(&page.data);
        from = page.next_from;
    }
    assert_eq!(paged, store.output(id, "m").unwrap().data);
    let last = store
        .read_output(
            id,
            "m",
            &OutputQuery {
                tail: Some(5),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(last.data, b"><12>");
    assert_eq!(last.next_from, 48);
}

/// Throughput of `append_output` in committed batches of 100 frames (200 bytes, or
/// `FRAME` bytes) spread over 10 targets. Run with
/// `cargo test --release -- --ignored --nocapture append_throughput`.
#[test]
#[ignore]
fn append_throughput() {
    let (_dir, mut store) = temp_store();
    let machines: Vec<String> = (0..10).map(|m| format!("m{m}")).collect();
    let names: Vec<&str> = machines.iter().map(String::as_str).collect();
    let id = store
        .create_run(&new_run("job", None, RunState::Running, &names))
        .unwrap()
        .unwrap();
    let size: usize = std::env::var("FRAME")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let frame = vec![b'x'; size];
    for (label, limit) in [
        (
            "within head",
            OutputLimit {
                head_bytes: u64::MAX,
                tail_bytes: 0,
            },
        ),
        (
            "rolling tail",
            OutputLimit {
                head_bytes: 0,
                tail_bytes: 64 * 1024,
            },
        ),
    ] {
        let mut seq = store.max_contiguous_seq(id, "m0").unwrap();
        let batches = 500;
        let started = std::time::Instant::now();
        for _ in 0..batches {
            store.begin_batch().unwrap();
            for i in 0..100 {
                let machine = names[i % names.len()];
                store
                    .append_output(id, machine, seq + 1, Stream::Stdout, &frame, limit)
                    .unwrap();
                if i % names.len() == names.len() - 1 {
                    seq += 1;
                }
            }
            store.commit_batch().unwrap();
        }
        let secs = started.elapsed().as_secs_f64();
        let frames = (batches * 100) as f64;
        println!(
            "append_output {label}: {:.0} frames/s ({:.1} MB/s of {size}-byte frames), batches of 100",
            frames / secs,
            frames * size as f64 / secs / 1e6
        );
    }
}

/// A chunk beyond the progress read with it (on PostgreSQL, committed between the two
/// statements of a read) is left to the next read, from `next_from`: returned once.
#[test]
fn a_read_stops_at_the_progress_read_with_it() {
    let (_dir, mut store, id) = store_with_target();
    store
        .append_output(id, "m", 1, Stream::Stdout, b"one ", NO_LIMIT)
        .unwrap();
    // As if written by another server after this read took the target's progress.
    store
        .conn
        .execute(
            "INSERT INTO output_chunks (run_id, machine, pos, seq, stream, data)
             VALUES (?1, 'm', 4, 2, 0, CAST('late' AS BLOB))",
            [id as i64],
        )
        .unwrap();
    let out = store.output(id, "m").unwrap();
    assert_eq!((out.data.as_slice(), out.next_from), (&b"one "[..], 4));
}
