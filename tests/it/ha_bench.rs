//! Measurements of several servers on one PostgreSQL database (docs/ha.md), not tests:
//! they print figures and fail only on a hang or a broken guarantee. Run with
//! `cargo test --release --test it ha_bench -- --ignored --nocapture --test-threads 1`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ha::{kill_9, server, slots, wait_role};
use crate::pg_cluster;
use crate::util::*;

fn ms(v: &Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Brings a killed server back (as a standby).
fn revive(d: &mut Daemon) {
    d.start_again();
}

fn leader_index(servers: &[Daemon]) -> usize {
    wait_until("a leader", HANG, || {
        servers
            .iter()
            .position(|d| crate::ha::ha_role(d).is_some_and(|(r, _)| r == "leader"))
    })
}

#[test]
#[ignore]
fn bench_ha_failover_time() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let ports = [free_port(), free_port()];
    let jobs = "tick:\n  schedule: '* * * * * *'\n  targets: [fo1]\n  overlap: allow\n  \
                command: 'true'\n";
    let mut servers = vec![server(&url, "alpha", ports[0], &ports, jobs)];
    wait_role(&servers[0], "leader");
    servers.push(server(&url, "beta", ports[1], &ports, jobs));
    wait_role(&servers[1], "standby");
    let mut lease = Vec::new();
    let mut fired = Vec::new();
    for round in 0..20 {
        let leader = leader_index(&servers);
        let other = 1 - leader;
        // Mid-second, so the next slot is half a second away.
        std::thread::sleep(Duration::from_millis(
            (1500 - (now_ms() % 1000)) as u64 % 1000,
        ));
        let killed = now_ms();
        let start = Instant::now();
        kill_9(&mut servers[leader]);
        wait_role(&servers[other], "leader");
        lease.push(start.elapsed().as_millis() as i64);
        let next = wait_until("the next slot fired by the new leader", HANG, || {
            servers[other]
                .runs("tick")
                .iter()
                .filter(|r| r["state"] != "skipped")
                .filter_map(|r| ms(&r["started"]))
                .filter(|started| *started > killed)
                .min()
        });
        fired.push(next - killed);
        revive(&mut servers[leader]);
        wait_role(&servers[leader], "standby");
        eprintln!(
            "failover {round}: lease {} ms, next slot fired after {} ms",
            lease[round], fired[round]
        );
    }
    lease.sort();
    fired.sort();
    let stats = |v: &[i64]| {
        format!(
            "min {} ms, median {} ms, max {} ms",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    println!("over 20 failovers (kill -9 of the leader, one-second job):");
    println!(
        "  killed -> the other server leads:          {}",
        stats(&lease)
    );
    println!(
        "  killed -> next slot fired by the other:    {}",
        stats(&fired)
    );
}

#[test]
#[ignore]
fn bench_ha_slots_across_failovers() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let marks = tempfile::tempdir().expect("tempdir");
    let ports = [free_port(), free_port()];
    // Five one-second jobs: 500 slots in about 100 s. Each run appends its run id to a
    // file, so a slot whose command ran twice would show.
    let mut jobs = String::new();
    for i in 0..5 {
        jobs.push_str(&format!(
            "slot{i}:\n  schedule: '* * * * * *'\n  targets: [s{i}]\n  overlap: allow\n  \
             command: 'echo $SP_RUN >> {}/ran'\n",
            marks.path().display()
        ));
    }
    let mut servers = vec![server(&url, "alpha", ports[0], &ports, &jobs)];
    wait_role(&servers[0], "leader");
    servers.push(server(&url, "beta", ports[1], &ports, &jobs));
    wait_role(&servers[1], "standby");
    let begin = Instant::now();
    for failover in 0..10 {
        std::thread::sleep(Duration::from_secs(9));
        let leader = leader_index(&servers);
        kill_9(&mut servers[leader]);
        wait_role(&servers[1 - leader], "leader");
        revive(&mut servers[leader]);
        eprintln!("failover {failover} at {:?}", begin.elapsed());
    }
    std::thread::sleep(Duration::from_secs(10));
    let reader = &servers[leader_index(&servers)];
    // Let the last runs end.
    std::thread::sleep(Duration::from_secs(3));
    let mut total = 0;
    let (mut ran, mut skipped, mut lost, mut other) = (0, 0, 0, 0);
    let mut twice = 0;
    let lines = std::fs::read_to_string(marks.path().join("ran")).unwrap_or_default();
    let mut executions: BTreeMap<&str, usize> = BTreeMap::new();
    for line in lines.lines() {
        *executions.entry(line.trim()).or_default() += 1;
    }
    twice += executions.values().filter(|n| **n > 1).count();
    for i in 0..5 {
        let runs = reader.runs(&format!("slot{i}"));
        let mut all = slots(&runs);
        all.sort();
        let recorded: BTreeSet<i64> = all.iter().copied().collect();
        twice += all.len() - recorded.len();
        let (Some(first), Some(last)) = (all.first(), all.last()) else {
            continue;
        };
        let expected: Vec<i64> = (0..)
            .map(|k| first + k * 1000)
            .take_while(|s| s <= last)
            .collect();
        total += expected.len();
        lost += expected.iter().filter(|s| !recorded.contains(s)).count();
        for r in &runs {
            match r["state"].as_str() {
                Some("succeeded") => ran += 1,
                Some("skipped") => skipped += 1,
                _ => other += 1,
            }
        }
    }
    println!(
        "{total} slots of 5 one-second jobs over {:?} with 10 failovers (kill -9 of the leader):",
        begin.elapsed()
    );
    println!(
        "  ran {ran}, recorded skipped as missed (policy `skip`) {skipped}, other states {other}"
    );
    println!("  slots run twice: {twice}; slots lost (no record at all): {lost}");
    assert_eq!(twice, 0, "a slot ran twice");
    assert_eq!(lost, 0, "a slot was lost");
}

/// `yes | head -c 100M` through one wrapper into the database, on SQLite and on
/// PostgreSQL (the default output limit: 1 MiB head, a rolling 1 MiB tail).
#[test]
#[ignore]
fn bench_ha_output_ingest_postgresql_next_to_sqlite() {
    let jobs = "flood:\n  schedule: '@yearly'\n  targets: [fl]\n  command: 'yes | head -c 100M'\n";
    let measure = |d: &Daemon| {
        let id = d.run_now("flood");
        let begin = Instant::now();
        let run = loop {
            let r = d.run_record(id);
            if is_final(&r) {
                break r;
            }
            assert!(begin.elapsed() < Duration::from_secs(600), "flood hung");
            std::thread::sleep(Duration::from_millis(100));
        };
        let t = target(&run, "fl");
        assert_eq!(t["exit_code"], 0, "{run}");
        let secs =
            (ms(&t["ended"]).expect("ended") - ms(&t["started"]).expect("started")) as f64 / 1000.0;
        100.0 * 1024.0 * 1024.0 / 1e6 / secs
    };
    let sqlite = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", jobs)]);
    let on_sqlite = measure(&sqlite);
    drop(sqlite);
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let port = free_port();
    let pg = server(&url, "solo", port, &[port], jobs);
    wait_role(&pg, "leader");
    let on_pg = measure(&pg);
    println!("100 MiB of output through one wrapper into the database:");
    println!("  SQLite:     {on_sqlite:.1} MB/s");
    println!("  PostgreSQL: {on_pg:.1} MB/s (local server, Unix socket)");
}
