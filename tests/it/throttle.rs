//! Throttling against a daemon with the local executor (real processes):
//! `max_running_per_machine: 3` with four jobs firing at the same slot on one machine
//! really holds the fourth command back (shown `queued` with the reason) until one of the
//! first three ended, and all succeed; `max_runs_in_flight: 1` makes the second run of a
//! slot wait (`queued`, with the reason) until the first ended.

use chrono::{DateTime, Duration, Timelike, Utc};
use serde_json::Value;

use crate::util::*;

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not an instant: {v}"))
}

/// A 6-field schedule firing once a day at `now + ahead` (UTC), and that instant.
fn slot_ahead(ahead: i64) -> (String, DateTime<Utc>) {
    let at = (Utc::now() + Duration::seconds(ahead))
        .with_nanosecond(0)
        .expect("whole second");
    (
        format!("{} {} {} * * *", at.second(), at.minute(), at.hour()),
        at,
    )
}

fn jobs_at(schedule: &str, names: &[&str], machine: &str, command: &str) -> String {
    names
        .iter()
        .map(|n| {
            format!(
                "{n}:\n  schedule: '{schedule}'\n  targets: [{machine}]\n  command: '{command}'\n"
            )
        })
        .collect()
}

#[test]
fn a_fourth_command_on_a_full_machine_waits_for_a_place() {
    let (schedule, slot) = slot_ahead(6);
    let names = ["t1", "t2", "t3", "t4"];
    let config = format!(
        "saltpeter_config:\n  max_running_per_machine: 3\n{}",
        jobs_at(&schedule, &names, "minion-04", "sleep 3")
    );
    let (d, api) = crate::api::start(&config);
    // While the first three run, the fourth is queued with the reason.
    let (run, held) = wait_until("a queued target with its reason", HANG, || {
        names.iter().find_map(|job| {
            let run = d.runs(job).first()?["id"].as_u64()?;
            let t = target(&d.run_record(run), "minion-04").clone();
            (t["state"] == "queued").then_some((run, t))
        })
    });
    // The API's run view says the same.
    let resp = crate::api::get(api, &format!("/api/v1/runs/{run}"));
    assert_eq!(resp.status, 200);
    let v: Value = serde_json::from_slice(&resp.body).expect("JSON");
    let t = target(&v, "minion-04");
    assert!(
        t["state"] != "queued"
            || t["waiting"]
                .as_str()
                .is_some_and(|w| w.contains("max_running_per_machine 3")),
        "{v}"
    );
    // The gauge counts it while it waits (it may have started by the time it is read).
    let metrics = String::from_utf8_lossy(&crate::api::get(api, "/metrics").body).into_owned();
    assert!(
        metrics
            .lines()
            .any(|l| l == "saltpeter_targets_throttled 1")
            || target(&d.run_record(run), "minion-04")["state"] != "queued",
        "{metrics}"
    );
    let why = held["waiting"].as_str().unwrap_or_default().to_string();
    assert!(
        why.contains("3 command(s) already running on minion-04")
            && why.contains("max_running_per_machine 3"),
        "{held}"
    );
    let mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = names
        .iter()
        .map(|job| {
            let runs = d.wait_final_runs(job, 1);
            let run = &runs[0];
            assert_eq!(run["state"], "succeeded", "{run}");
            assert_eq!(instant(&run["slot"]), slot, "{run}");
            let t = target(run, "minion-04");
            (instant(&t["started"]), instant(&t["ended"]))
        })
        .collect();
    spans.sort();
    let first_end = spans[..3].iter().map(|s| s.1).min().expect("three");
    assert!(
        spans[3].0 >= first_end,
        "the fourth started at {} before any of the first three ended ({first_end})",
        spans[3].0
    );
    // The first three really ran at once.
    assert!(spans[2].0 < spans[0].1, "{spans:?}");
}

#[test]
fn a_run_beyond_max_runs_in_flight_waits_for_the_one_going() {
    let (schedule, _) = slot_ahead(6);
    let config = format!(
        "saltpeter_config:\n  max_runs_in_flight: 1\n{}",
        jobs_at(&schedule, &["r1", "r2"], "solo", "sleep 2")
    );
    let d = Daemon::start(&[("jobs.yaml", &config)]);
    let waiting = wait_until("a queued run with its reason", HANG, || {
        ["r1", "r2"].iter().find_map(|job| {
            let run = d.runs(job).first()?.clone();
            (run["state"] == "queued").then_some(run)
        })
    });
    assert!(
        waiting["reason"]
            .as_str()
            .is_some_and(|r| r.contains("waiting: 1 run(s) in flight (max_runs_in_flight 1)")),
        "{waiting}"
    );
    let mut runs: Vec<Value> = ["r1", "r2"]
        .iter()
        .map(|job| d.wait_final_runs(job, 1)[0].clone())
        .collect();
    runs.sort_by_key(|r| instant(&r["started"]));
    for r in &runs {
        assert_eq!(r["state"], "succeeded", "{r}");
    }
    assert!(
        instant(&runs[1]["started"]) >= instant(&runs[0]["ended"]),
        "{runs:?}"
    );
    assert!(
        runs[1]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("started after waiting")),
        "{}",
        runs[1]
    );
}

/// Issue 41, E12: a job that fires every second with runs longer than that
/// (`overlap: allow`) under `max_runs_in_flight: 2` queues at most
/// `max_queued_runs_per_job` runs (its other slots are recorded as skipped, saying why),
/// and another job's runs start at the next place that frees up, each before its next
/// slot, never behind the first job's backlog.
#[test]
fn one_jobs_backlog_is_bounded_and_does_not_hold_another_job_back() {
    let config = "saltpeter_config:\n  max_runs_in_flight: 2\n  max_queued_runs_per_job: 3\n\
         hog:\n  schedule: '* * * * * *'\n  targets: [solo]\n  command: 'sleep 3'\n  \
         overlap: allow\n\
         other:\n  schedule: '*/5 * * * * *'\n  targets: [solo]\n  command: 'true'\n";
    let d = Daemon::start(&[("jobs.yaml", config)]);
    let started = std::time::Instant::now();
    let watch = std::time::Duration::from_secs(30);
    // hog's queue, as the runs waiting for a place (state `queued`), all along.
    let mut deepest = 0;
    let mut refused = None;
    while started.elapsed() < watch {
        let queued = d.ctl_json(&["runs", "hog", "--state", "queued", "--limit", "1000"]);
        let depth = queued.as_array().map_or(0, Vec::len);
        deepest = deepest.max(depth);
        assert!(depth <= 3, "hog has {depth} runs queued: {queued}");
        // A run asked for now while the queue is full is refused, saying why.
        if depth == 3 && refused.is_none() {
            let out = d.ctl(&["run", "hog"]);
            if !out.status.success() {
                refused = Some(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        deepest >= 2,
        "hog's backlog formed (deepest queue {deepest})"
    );
    if let Some(why) = &refused {
        assert!(
            why.contains("queue: 3 run(s) of hog are already waiting to start"),
            "{why}"
        );
    }
    let hog = d.runs("hog");
    let full: Vec<&Value> = hog.iter().filter(|r| r["state"] == "skipped").collect();
    assert!(!full.is_empty(), "hog's slots beyond its queue are skipped");
    for r in &full {
        assert_eq!(
            r["reason"],
            "queue: 3 run(s) of hog are already waiting to start (max_queued_runs_per_job 3)",
            "{r}"
        );
    }
    // Every slot of other (but the newest, which may still wait) ran, each started
    // before its next slot: at most one of hog's runs ended before it got a place.
    let mut other = d.runs("other");
    other.retain(|r| instant(&r["slot"]) < Utc::now() - Duration::seconds(8));
    assert!(other.len() >= 4, "{other:?}");
    for r in &other {
        assert_ne!(r["state"], "skipped", "{r}");
        let waited = instant(&r["started"]) - instant(&r["slot"]);
        assert!(
            waited < Duration::seconds(5),
            "other's run of slot {} started {waited} after it: {r}",
            r["slot"]
        );
    }
}
