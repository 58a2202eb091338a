//! A standby's live views (docs/ha.md): two servers on one PostgreSQL database, a run on
//! the leader, followed on the standby by `saltpeterctl output -f` and a `/ws` client;
//! then the leader is killed and the standby, now leader, carries the views on.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::api::{next_msg, ws_connect, ws_send};
use crate::ha::{kill_9, server, wait_role};
use crate::pg_cluster;
use crate::util::*;

/// Lines `line-N <unix nanoseconds when printed>`, 10 a second.
fn counter(lines: u32) -> String {
    format!("for i in $(seq 1 {lines}); do echo line-$i $(date +%s%N); sleep 0.1; done")
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or_default()
}

/// `output RUN MACHINE -f` on `d`; its lines, each with when it was read, come on the
/// channel as they are printed.
fn follow(d: &Daemon, run: u64, machine: &str) -> (Child, mpsc::Receiver<(i128, String)>) {
    let mut child = Command::new(CTL)
        .arg("--socket")
        .arg(d.socket())
        .args(["output", &run.to_string(), machine, "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("output -f");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((now_ns(), line)).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The numbers of `line-N ...` lines in order, and each line's delay from its printing
/// to `at` (milliseconds).
fn numbered(lines: &[(i128, String)]) -> (Vec<u32>, Vec<f64>) {
    let mut numbers = Vec::new();
    let mut delays = Vec::new();
    for (at, line) in lines {
        let mut words = line.split(' ');
        let n = words
            .next()
            .and_then(|w| w.strip_prefix("line-"))
            .and_then(|n| n.parse().ok());
        let printed: Option<i128> = words.next().and_then(|t| t.parse().ok());
        if let Some(n) = n {
            numbers.push(n);
        }
        if let Some(printed) = printed {
            delays.push((at - printed) as f64 / 1e6);
        }
    }
    (numbers, delays)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// What a `/ws` client saw: `status` listing the job's target as running, and `details`
/// showing it running.
type ShownRunning = Arc<(AtomicBool, AtomicBool)>;

/// A `/ws` client subscribed to `job` on the API port `port`; the text of its
/// `output_chunk`s for `machine` (checked contiguous), each chunk with when it came,
/// arrives on the channel until the chunk that says it is complete.
fn ws_text(
    port: u16,
    job: &str,
    machine: &str,
) -> (mpsc::Receiver<(i128, String, bool)>, ShownRunning) {
    let mut ws = ws_connect(port);
    ws_send(&mut ws, json!({"subscribe": job}));
    let (tx, rx) = mpsc::channel();
    let shown: ShownRunning = Arc::default();
    let (job, machine, seen) = (job.to_string(), machine.to_string(), shown.clone());
    std::thread::spawn(move || {
        let mut position = 0u64;
        while let Some(m) = next_msg(&mut ws) {
            let listed = m["running"].as_object().is_some_and(|r| {
                r.values()
                    .any(|v| v["name"] == job.as_str() && v["machines"][0] == machine.as_str())
            });
            if m["type"] == "status" && listed {
                seen.0.store(true, Ordering::SeqCst);
            }
            if m["type"] == "details" && m["data"]["results"][&machine]["state"] == "running" {
                seen.1.store(true, Ordering::SeqCst);
            }
            if m["type"] != "output_chunk" || m["machine"] != machine.as_str() {
                continue;
            }
            let chunk = m["chunk"].as_str().unwrap_or_default().to_string();
            let at = m["position"].as_u64().unwrap_or(u64::MAX);
            let complete = m["is_complete"] == true;
            let contiguous = at == position;
            position += chunk.chars().count() as u64;
            let text = match contiguous {
                true => chunk,
                false => format!("<gap: at {at}, expected {position}>"),
            };
            if tx.send((now_ns(), text, complete)).is_err() || complete {
                break;
            }
        }
    });
    (rx, shown)
}

/// A leader ("alpha") and a standby ("beta") on the database `url`, with one job `job`
/// printing `lines` counter lines on `machine`.
fn leader_and_standby(url: &str, job: &str, machine: &str, lines: u32) -> (Daemon, Daemon) {
    let (pa, pb) = (free_port(), free_port());
    let jobs = format!(
        "{job}:\n  schedule: '@yearly'\n  targets: [{machine}]\n  command: '{}'\n",
        counter(lines)
    );
    let a = server(url, "alpha", pa, &[pa, pb], &jobs);
    wait_role(&a, "leader");
    let b = server(url, "beta", pb, &[pa, pb], &jobs);
    wait_role(&b, "standby");
    (a, b)
}

/// Lines from `from` (a follower on `d`) until `seen` holds `count`.
fn take_lines(
    d: &Daemon,
    from: &mpsc::Receiver<(i128, String)>,
    seen: &mut Vec<(i128, String)>,
    count: usize,
) {
    while seen.len() < count {
        match from.recv_timeout(HANG) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("output -f: {e} after {seen:?}\n{}", d.log_text()),
        }
    }
}

/// The follower `child` on `d` ends with the run, having printed each of the `lines`
/// counter lines once, in order (`seen` and what is left on `from`); each line's delay.
fn every_line_once(
    d: &Daemon,
    child: &mut Child,
    from: &mpsc::Receiver<(i128, String)>,
    mut seen: Vec<(i128, String)>,
    lines: u32,
) -> Vec<f64> {
    let status = child.wait().expect("output -f exits");
    seen.extend(from.try_iter());
    let (numbers, delays) = numbered(&seen);
    let expected: Vec<u32> = (1..=lines).collect();
    assert_eq!(numbers, expected, "{seen:?}\n{}", d.log_text());
    assert!(status.success(), "output -f: {status:?}");
    delays
}

#[test]
fn a_standby_shows_the_leaders_run_live_and_carries_on_after_taking_over() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let lines = 80;
    let (mut a, b) = leader_and_standby(&url, "live", "hl1", lines);
    let b_api = b.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    let (ws, shown) = ws_text(b_api, "live", "hl1");

    let id = a.run_now("live");
    let (mut on_leader, from_leader) = follow(&a, id, "hl1");
    let (mut on_standby, from_standby) = follow(&b, id, "hl1");

    // The standby follows the leader's lines as they come, and counts the run in flight.
    let mut seen = Vec::new();
    take_lines(&b, &from_standby, &mut seen, 20);
    // So does its /ws client, from the database while the leader runs the run.
    let mut text = String::new();
    let mut chunks = Vec::new();
    let mut complete = false;
    let take_chunk =
        |text: &mut String, chunks: &mut Vec<(i128, String)>| match ws.recv_timeout(HANG) {
            Ok((at, chunk, done)) => {
                assert!(!chunk.starts_with("<gap"), "{chunk} after {text:?}");
                text.push_str(&chunk);
                chunks.push((at, chunk));
                done
            }
            Err(e) => panic!("/ws on the standby: {e}; got {text:?}\n{}", b.log_text()),
        };
    while !text.contains("line-20 ") {
        complete = take_chunk(&mut text, &mut chunks);
    }
    // Its dashboard's status and details show the leader's run, as `status` does.
    wait_until("/ws status and details showing the run", HANG, || {
        (shown.0.load(Ordering::SeqCst) && shown.1.load(Ordering::SeqCst)).then_some(())
    });
    let status = b.ctl_json(&["status"]);
    assert_eq!(status["running_runs"], 1, "{status}\n{}", b.log_text());
    assert_eq!(status["ha"]["role"], "standby", "{status}");
    let leader_lines: Vec<(i128, String)> = from_leader.try_iter().collect();

    kill_9(&mut a);
    let _ = on_leader.kill();
    let _ = on_leader.wait();
    let takeover = wait_role(&b, "leader");
    eprintln!("the standby took over after {takeover:?}");

    // output -f on the old standby: every line once, in order, and it ends with the run.
    let delays = every_line_once(&b, &mut on_standby, &from_standby, seen, lines);
    let run = b.wait_run_final(id);
    assert_eq!(run["state"], "succeeded", "{run}");

    // /ws on the old standby: the whole text, contiguous, complete.
    while !complete {
        complete = take_chunk(&mut text, &mut chunks);
    }
    let ws_lines: Vec<(i128, String)> = chunks
        .iter()
        .flat_map(|(at, c)| c.lines().map(|l| (*at, l.to_string())).collect::<Vec<_>>())
        .collect();
    let (ws_numbers, ws_delays) = numbered(&ws_lines);
    assert_eq!(
        ws_numbers,
        (1..=lines).collect::<Vec<u32>>(),
        "{text:?}\n{}",
        b.log_text()
    );

    // What the standby adds: the lines before the kill, followed on both servers.
    let (_, leader_delays) = numbered(&leader_lines);
    let before = leader_delays.len().min(delays.len()).min(ws_delays.len());
    // Pushed as the leader commits, not found by the 30 s resync.
    let (followed, watched) = (
        median(delays[..before].to_vec()),
        median(ws_delays[..before].to_vec()),
    );
    assert!(
        followed < 1000.0 && watched < 1000.0,
        "{followed} ms, {watched} ms"
    );
    eprintln!(
        "printed -> shown, median of the {before} lines before the kill: output -f on the \
         leader {:.0} ms, on the standby {:.0} ms, /ws on the standby {:.0} ms; over all \
         {lines} lines on the standby: output -f {:.0} ms (max {:.0}), /ws {:.0} ms",
        median(leader_delays[..before].to_vec()),
        followed,
        watched,
        median(delays.clone()),
        delays.iter().copied().fold(0.0, f64::max),
        median(ws_delays.clone()),
    );
}

#[test]
fn a_standby_whose_listening_connection_is_cut_listens_again_and_misses_no_line() {
    let Some(url) = pg_cluster::fresh_database() else {
        return;
    };
    let lines = 50;
    let (a, b) = leader_and_standby(&url, "cut", "hl2", lines);
    let id = a.run_now("cut");
    let (mut on_standby, from_standby) = follow(&b, id, "hl2");
    let mut seen = Vec::new();
    take_lines(&b, &from_standby, &mut seen, 10);
    // The standby's listening session ends (a database restart, a proxy, an operator).
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("admin connection");
    let listening = "SELECT pid FROM pg_stat_activity \
                     WHERE application_name = 'saltpeter-db beta' AND query LIKE 'LISTEN%'";
    let cut = admin
        .execute(
            &format!("SELECT pg_terminate_backend(pid) FROM ({listening}) AS l"),
            &[],
        )
        .expect("terminate");
    assert_eq!(cut, 1, "one listening session of the standby");

    let delays = every_line_once(&b, &mut on_standby, &from_standby, seen, lines);
    // Nothing waited for the 30 s resync: the new connection's resync, or the next
    // notification, read what was announced while nobody listened.
    let late = delays.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "listening cut: output -f on the standby {:.0} ms median, {late:.0} ms at most",
        median(delays.clone())
    );
    assert!(late < 5000.0, "a line {late} ms late");
    let again = admin.query(listening, &[]).expect("listening sessions");
    assert_eq!(again.len(), 1, "the standby listens again");
}
