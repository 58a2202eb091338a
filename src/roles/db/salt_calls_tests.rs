//! Several masters (`salt_calls.rs`), part of the suite run on both backends: a call
//! goes from pending to served to answered and is gone once its answer is taken; each
//! server sees only its own calls; stale rows expire; the registry tells who is alive;
//! published keys follow the master's scans.

use std::collections::BTreeMap;

use crate::roles::db::salt_calls::{ALIVE_MS, STALE_MS};
use crate::roles::db::storage::Storage;

on_both_backends!(
    a_salt_call_is_served_once_and_answered_once,
    stale_salt_calls_expire,
    the_registry_names_the_other_servers_alive,
    published_keys_follow_the_scans,
);

fn a_salt_call_is_served_once_and_answered_once(s: &mut dyn Storage) {
    let id = s.send_salt_call("a", "b", b"req", 1_000).unwrap();
    let other = s.send_salt_call("b", "a", b"other", 1_000).unwrap();
    assert_ne!(id, other);
    // Only b serves a's call, once.
    assert_eq!(s.take_salt_calls("c").unwrap(), []);
    assert_eq!(
        s.take_salt_calls("b").unwrap(),
        [(id, "a".to_string(), b"req".to_vec())]
    );
    assert_eq!(s.take_salt_calls("b").unwrap(), []);
    // Not answered yet: nothing to collect.
    assert_eq!(s.take_salt_replies("a").unwrap(), []);
    assert!(s.answer_salt_call(id, b"reply").unwrap());
    assert_eq!(s.take_salt_replies("b").unwrap(), []);
    assert_eq!(s.take_salt_replies("a").unwrap(), [(id, b"reply".to_vec())]);
    // Collected: the row is gone, a late answer finds nothing.
    assert_eq!(s.take_salt_replies("a").unwrap(), []);
    assert!(!s.answer_salt_call(id, b"late").unwrap());
    // The other direction is untouched.
    assert_eq!(
        s.take_salt_calls("a").unwrap(),
        [(other, "b".to_string(), b"other".to_vec())]
    );
}

fn stale_salt_calls_expire(s: &mut dyn Storage) {
    let old = s.send_salt_call("a", "b", b"old", 1_000).unwrap();
    let new = s
        .send_salt_call("a", "b", b"new", 1_000 + STALE_MS)
        .unwrap();
    assert_eq!(s.expire_salt_calls(1_001 + STALE_MS).unwrap(), 1);
    let left: Vec<i64> = s
        .take_salt_calls("b")
        .unwrap()
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(left, [new]);
    assert!(!s.answer_salt_call(old, b"late").unwrap());
}

fn the_registry_names_the_other_servers_alive(s: &mut dyn Storage) {
    assert_eq!(s.salt_heartbeat("b", 1_000).unwrap(), Vec::<String>::new());
    assert_eq!(s.salt_heartbeat("c", 2_000).unwrap(), ["b"]);
    assert_eq!(s.salt_heartbeat("a", 3_000).unwrap(), ["b", "c"]);
    // b is silent past the window; c still beats.
    assert_eq!(s.salt_heartbeat("c", 1_000 + ALIVE_MS).unwrap(), ["a", "b"]);
    assert_eq!(s.salt_heartbeat("a", 1_001 + ALIVE_MS).unwrap(), ["c"]);
}

fn published_keys_follow_the_scans(s: &mut dyn Storage) {
    let keys = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(m, k)| (m.to_string(), k.to_string()))
            .collect()
    };
    // A stale row of a's from before its restart is replaced at the first scan.
    s.publish_minion_keys("a", None, &keys(&[("gone", "K0")]), 1)
        .unwrap();
    let first = keys(&[("m1", "K1"), ("m2", "K2")]);
    assert_eq!(
        s.publish_minion_keys("a", None, &first, 10).unwrap(),
        (2, 1)
    );
    s.publish_minion_keys("b", None, &keys(&[("m3", "K3")]), 11)
        .unwrap();
    assert_eq!(
        s.minion_keys_of_others("b").unwrap(),
        [
            ("a".to_string(), "m1".to_string(), "K1".to_string()),
            ("a".to_string(), "m2".to_string(), "K2".to_string()),
        ]
    );
    let stamp = s.minion_keys_stamp("b").unwrap();
    assert_eq!(stamp, (2, 10));
    // m1 removed from a's master, m2's key changed: only the changes are written.
    let second = keys(&[("m2", "K2b")]);
    assert_eq!(
        s.publish_minion_keys("a", Some(&first), &second, 20)
            .unwrap(),
        (1, 1)
    );
    assert_eq!(
        s.minion_keys_of_others("b").unwrap(),
        [("a".to_string(), "m2".to_string(), "K2b".to_string())]
    );
    assert_ne!(s.minion_keys_stamp("b").unwrap(), stamp);
    assert_eq!(
        s.minion_keys_of_others("a").unwrap(),
        [("b".to_string(), "m3".to_string(), "K3".to_string())]
    );
}
