//! The owner rule, the split by owner and the merges of several servers' answers.

use std::collections::{HashMap, HashSet};

use super::*;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

struct World {
    own: HashSet<String>,
    published: HashMap<String, Vec<String>>,
    peers: Vec<String>,
    reached: HashMap<String, String>,
}

impl World {
    fn new() -> World {
        let mut published = HashMap::new();
        // m3 is accepted by b and c, m4 only by c (dead), m5 by nobody else.
        published.insert("m3".to_string(), strings(&["b", "c"]));
        published.insert("m4".to_string(), strings(&["d"]));
        published.insert("m2".to_string(), strings(&["b"]));
        World {
            own: strings(&["m1", "m2"]).into_iter().collect(),
            published,
            peers: strings(&["b", "c"]),
            reached: HashMap::new(),
        }
    }

    fn owners(&self) -> Owners<'_> {
        Owners {
            me: "a",
            own: &self.own,
            published: &self.published,
            peers: &self.peers,
            reached: &self.reached,
        }
    }
}

#[test]
fn a_minion_goes_to_the_master_that_accepted_it_this_one_first() {
    let w = World::new();
    let o = w.owners();
    assert_eq!(o.owner_of("m1"), "a");
    // Accepted here and by b (multi-master): this server.
    assert_eq!(o.owner_of("m2"), "a");
    // Only others: the first alive by name.
    assert_eq!(o.owner_of("m3"), "b");
    // Its only master's server is not alive, or nobody accepted it: this server.
    assert_eq!(o.owner_of("m4"), "a");
    assert_eq!(o.owner_of("m5"), "a");
}

#[test]
fn where_a_resolution_found_a_minion_live_comes_first() {
    let mut w = World::new();
    // m2 was live only on b (this master down for it), m3 on c; m1's server d is gone.
    w.reached.insert("m2".into(), "b".into());
    w.reached.insert("m3".into(), "c".into());
    w.reached.insert("m1".into(), "d".into());
    let o = w.owners();
    assert_eq!(o.owner_of("m2"), "b");
    assert_eq!(o.owner_of("m3"), "c");
    assert_eq!(o.owner_of("m1"), "a");
}

#[test]
fn a_split_puts_this_servers_part_first() {
    let w = World::new();
    let parts = w.owners().split(&strings(&["m3", "m5", "m1", "m4"]));
    assert_eq!(
        parts,
        vec![
            ("a".to_string(), strings(&["m5", "m1", "m4"])),
            ("b".to_string(), strings(&["m3"])),
        ]
    );
    assert!(w.owners().split(&[]).is_empty());
}

fn res(live: &[&str], unreachable: &[(&str, &str)]) -> Resolution {
    Resolution {
        live: strings(live),
        unreachable: unreachable
            .iter()
            .map(|(m, w)| (m.to_string(), w.to_string()))
            .collect(),
        no_match: false,
        from_cache: false,
    }
}

fn part<T>(server: &str, minions: &[&str], answer: Result<T, &str>) -> Part<T> {
    Part {
        server: server.into(),
        minions: strings(minions),
        answer: answer.map_err(str::to_string),
    }
}

#[test]
fn resolutions_merge_into_one() {
    let (merged, reached) = merge_resolutions(
        "b",
        vec![
            part("b", &[], Ok(res(&["m1", "m3"], &[("m2", "silent")]))),
            part(
                "a",
                &[],
                Ok(res(&["m2", "m3", "m4"], &[("m5", "no return")])),
            ),
            part("c", &[], Ok(res(&["m4"], &[("m1", "silent")]))),
            part("d", &[], Err("did not answer within 35 s")),
        ],
    )
    .unwrap();
    assert_eq!(merged.live, strings(&["m1", "m2", "m3", "m4"]));
    // Matched but live nowhere.
    assert_eq!(
        merged.unreachable,
        vec![("m5".to_string(), "no return".to_string())]
    );
    assert!(!merged.no_match && !merged.from_cache);
    // Live here and elsewhere: here; only elsewhere: the first by name.
    assert_eq!(
        reached,
        vec![
            ("m1".to_string(), "b".to_string()),
            ("m2".to_string(), "a".to_string()),
            ("m3".to_string(), "b".to_string()),
            ("m4".to_string(), "a".to_string()),
        ]
    );
}

#[test]
fn no_match_and_from_cache_only_when_every_server_says_so() {
    let none = Resolution {
        no_match: true,
        from_cache: true,
        ..Default::default()
    };
    let both = merge_resolutions(
        "a",
        vec![
            part("a", &[], Ok(none.clone())),
            part("b", &[], Ok(none.clone())),
        ],
    )
    .unwrap()
    .0;
    assert!(both.no_match && both.from_cache);
    let one = merge_resolutions(
        "a",
        vec![
            part("a", &[], Ok(none.clone())),
            part("b", &[], Ok(res(&["m1"], &[]))),
        ],
    )
    .unwrap()
    .0;
    assert!(!one.no_match && !one.from_cache);
    // A server that did not answer did not say "no match".
    let silent = merge_resolutions(
        "a",
        vec![part("a", &[], Ok(none)), part("b", &[], Err("timeout"))],
    )
    .unwrap()
    .0;
    assert!(!silent.no_match);
}

#[test]
fn a_failed_part_of_a_split_call_makes_its_minions_unreachable() {
    let (merged, _) = merge_resolutions(
        "a",
        vec![
            part("a", &["m1"], Ok(res(&["m1"], &[]))),
            part("b", &["m2", "m3"], Err("did not answer within 35 s")),
        ],
    )
    .unwrap();
    assert_eq!(merged.live, strings(&["m1"]));
    assert_eq!(merged.unreachable.len(), 2);
    assert!(merged.unreachable[0].1.contains("server b did not answer"));
    let all_failed = merge_resolutions("a", vec![part::<Resolution>("a", &[], Err("gone"))]);
    assert!(all_failed.unwrap_err().contains("a: gone"));
}

fn ok(machine: &str) -> MinionOutcome {
    MinionOutcome {
        machine: machine.into(),
        result: Ok(()),
        silent: None,
        unreachable: None,
        server: None,
    }
}

#[test]
fn launch_outcomes_are_tagged_and_a_failed_part_fails_its_minions() {
    let merged = merge_launches(
        &[7, 8],
        vec![
            part("a", &["m1"], Ok(vec![(7, ok("m1")), (8, ok("m1"))])),
            part("b", &["m2"], Err("did not answer within 35 s")),
        ],
    );
    assert_eq!(merged.len(), 4);
    assert!(
        merged[..2]
            .iter()
            .all(|(_, o)| o.server.as_deref() == Some("a"))
    );
    let failed: Vec<_> = merged[2..].iter().map(|(run, o)| (*run, o)).collect();
    assert_eq!(failed[0].0, 7);
    assert_eq!(failed[1].0, 8);
    for (_, o) in failed {
        assert_eq!(o.machine, "m2");
        assert_eq!(o.server.as_deref(), Some("b"));
        let why = o.result.as_ref().unwrap_err();
        assert!(why.contains("server b") && why.contains("35 s"), "{why}");
    }
}

#[test]
fn deploy_outcomes_concatenate_with_the_first_hash() {
    let (outcomes, hash) = merge_deploys(vec![
        part("a", &["m1"], Ok((vec![ok("m1")], "h1".to_string()))),
        part("b", &["m2"], Err("gone")),
        part("c", &["m3"], Ok((vec![ok("m3")], "h1".to_string()))),
    ])
    .unwrap();
    assert_eq!(hash, "h1");
    let shown: Vec<_> = outcomes
        .iter()
        .map(|o| (o.machine.as_str(), o.server.as_deref(), o.result.is_ok()))
        .collect();
    assert_eq!(
        shown,
        [
            ("m1", Some("a"), true),
            ("m2", Some("b"), false),
            ("m3", Some("c"), true)
        ]
    );
    assert!(merge_deploys(vec![part("b", &["m2"], Err("gone"))]).is_err());
}
