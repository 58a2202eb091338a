//! The YAML tree: merge keys at scale, anchors, and the size bound.

use std::time::Instant;

use super::yaml::{NodeKind, parse};

/// About 400 KB: a mapping of `keys` entries under an anchor, merged into a job that sets
/// as many keys of its own.
fn big_merge(keys: usize) -> String {
    let mut text = String::from("base: &base\n");
    for i in 0..keys {
        text.push_str(&format!("  inherited_{i:06}: value\n"));
    }
    text.push_str("job:\n  <<: *base\n");
    for i in 0..keys {
        text.push_str(&format!("  own_key_{i:06}: value\n"));
    }
    text
}

#[test]
fn a_large_merge_parses_in_linear_time() {
    let text = big_merge(10_000);
    assert!(text.len() > 400_000, "{} bytes", text.len());
    let started = Instant::now();
    let root = parse(&text).expect("parses").expect("a document");
    // Printed, not asserted (no timing assertions): the figure for the record.
    eprintln!(
        "parsed {} bytes with a {}-key merge in {:?}",
        text.len(),
        10_000,
        started.elapsed()
    );
    let NodeKind::Map(top) = &root.kind else {
        panic!("not a mapping")
    };
    let NodeKind::Map(job) = &top[1].1.kind else {
        panic!("job is not a mapping")
    };
    assert_eq!(job.len(), 20_000);
}
