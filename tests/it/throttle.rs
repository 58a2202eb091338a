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
