//! Maintenance, global and per machine, set at run time (`saltpeterctl maintenance`) and in
//! the files (`saltpeter_maintenance`, hot-reloaded); the run-time settings survive a
//! restart, and every change is an event.

use serde_json::Value;

use crate::util::*;

const JOBS: &str = "\
fleet:
  schedule: '@yearly'
  targets: [m1, m2, m3]
  command: 'echo ran-$SP_MACHINE'
ticker:
  schedule: '* * * * * *'
  targets: [t1]
  overlap: allow
  command: 'true'
long:
  schedule: '@yearly'
  targets: [l1]
  command: 'sleep 2; echo long-done'
";

fn show(d: &Daemon) -> Value {
    d.ctl_json(&["maintenance", "show"])
}

fn sources(v: &Value) -> Vec<String> {
    v.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// `(machine, sources)` of every machine in maintenance.
fn machines(v: &Value) -> Vec<(String, Vec<String>)> {
    v["machines"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["machine"].as_str().unwrap_or_default().to_string(),
                sources(&m["sources"]),
            )
        })
        .collect()
}

fn states(run: &Value) -> Vec<(String, String)> {
    ["m1", "m2", "m3"]
        .iter()
        .map(|m| {
            (
                m.to_string(),
                target(run, m)["state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Wait for a firing of `ticker` recorded as skipped for maintenance after `after_id`.
fn wait_skipped_firing(d: &Daemon, after_id: u64) -> Value {
    wait_until("a firing skipped for maintenance", HANG, || {
        d.runs("ticker").into_iter().find(|r| {
            r["id"].as_u64().unwrap_or(0) > after_id
                && r["state"] == "skipped"
                && r["reason"]
                    .as_str()
                    .is_some_and(|why| why.starts_with("maintenance"))
        })
    })
}

fn newest_id(d: &Daemon, job: &str) -> u64 {
    d.runs(job)
        .first()
        .and_then(|r| r["id"].as_u64())
        .unwrap_or(0)
}

fn maintenance_events(d: &Daemon) -> Vec<String> {
    let db = rusqlite::Connection::open(d.state_dir().join("saltpeter.db")).expect("open db");
    let mut stmt = db
        .prepare("SELECT message FROM events WHERE kind = 'maintenance' ORDER BY id")
        .expect("query");
    stmt.query_map([], |row| row.get::<_, String>(0))
        .expect("rows")
        .collect::<Result<Vec<_>, _>>()
        .expect("messages")
}

#[test]
fn run_time_maintenance_global_and_per_machine_survives_a_restart() {
    let mut d = Daemon::start(&[("01-fast.yaml", FAST), ("jobs.yaml", JOBS)]);
    let empty = show(&d);
    assert_eq!(empty["global"], false);
    assert!(machines(&empty).is_empty());

    // A machine: left out of runs, recorded per target.
    let added = d.ctl_json(&["maintenance", "add", "m2"]);
    assert_eq!(
        machines(&added),
        [("m2".to_string(), vec!["runtime".to_string()])]
    );
    let (run, code) = d.run_wait("fleet");
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["state"], "succeeded");
    assert_eq!(
        states(&run),
        [
            ("m1".into(), "finished".into()),
            ("m2".into(), "skipped_maintenance".into()),
            ("m3".into(), "finished".into())
        ]
    );

    // Global: a run in flight finishes, firings are recorded as skipped, run-now is refused.
    let long = d.run_now("long");
    wait_until("long running", HANG, || {
        (target(&d.run_record(long), "l1")["state"] == "running").then_some(())
    });
    let before = newest_id(&d, "ticker");
    let on = d.ctl_json(&["maintenance", "on"]);
    assert_eq!(on["global"], true);
    assert_eq!(sources(&on["global_sources"]), ["runtime"]);
    let run = d.wait_run_final(long);
    assert_eq!(run["state"], "succeeded", "a running run finishes: {run}");
    assert_eq!(d.output(long, "l1"), "long-done\n");
    let skipped = wait_skipped_firing(&d, before);
    assert!(skipped["targets"].as_array().is_some_and(|t| t.is_empty()));
    let out = d.ctl(&["run", "fleet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("maintenance"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A restart keeps both settings; nothing fires before they are loaded.
    let stopped_at = newest_id(&d, "ticker");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit().success());
    d.spawn();
    d.wait_ready();
    let kept = show(&d);
    assert_eq!(kept["global"], true, "{kept}");
    assert_eq!(
        machines(&kept),
        [("m2".to_string(), vec!["runtime".to_string()])]
    );
    let first_after = wait_until("a ticker firing after the restart", HANG, || {
        let runs = d.runs("ticker");
        runs.iter()
            .filter(|r| {
                r["reason"]
                    .as_str()
                    .is_none_or(|why| !why.starts_with("missed"))
            })
            .any(|r| r["id"].as_u64().unwrap_or(0) > stopped_at)
            .then_some(runs)
    });
    for r in first_after
        .iter()
        .filter(|r| r["id"].as_u64().unwrap_or(0) > stopped_at)
    {
        assert_eq!(r["state"], "skipped", "nothing ran during maintenance: {r}");
    }

    // Off again: everything runs.
    let off = d.ctl_json(&["maintenance", "off"]);
    assert_eq!(off["global"], false);
    let removed = d.ctl_json(&["maintenance", "remove", "m2"]);
    assert!(machines(&removed).is_empty());
    let (run, code) = d.run_wait("fleet");
    assert_eq!(code, 0);
    assert!(states(&run).iter().all(|(_, s)| s == "finished"), "{run}");

    let events = maintenance_events(&d);
    for expected in [
        "m2 in maintenance (by saltpeterctl)",
        "global maintenance on (by saltpeterctl)",
        "global maintenance off (by saltpeterctl)",
        "m2 out of maintenance (by saltpeterctl)",
    ] {
        assert!(
            events.iter().any(|e| e == expected),
            "{expected} in {events:?}"
        );
    }
}

#[test]
fn file_maintenance_is_hot_reloaded_and_joins_the_run_time_settings() {
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("jobs.yaml", JOBS),
        (
            "maint.yaml",
            "saltpeter_maintenance:\n  global: false\n  machines: [m1]\n",
        ),
    ]);
    let start = show(&d);
    assert_eq!(
        machines(&start),
        [("m1".to_string(), vec!["file".to_string()])]
    );
    // Removing a file entry at run time cannot work, and says why.
    let kept = d.ctl_json(&["maintenance", "remove", "m1"]);
    assert!(
        kept["note"]
            .as_str()
            .is_some_and(|n| n.contains("configuration files")),
        "{kept}"
    );
    let both = d.ctl_json(&["maintenance", "add", "m1"]);
    assert_eq!(
        machines(&both),
        [(
            "m1".to_string(),
            vec!["file".to_string(), "runtime".to_string()]
        )]
    );
    d.ctl_json(&["maintenance", "remove", "m1"]);
    let (run, _) = d.run_wait("fleet");
    assert_eq!(target(&run, "m1")["state"], "skipped_maintenance");
    assert_eq!(target(&run, "m2")["state"], "finished");

    // The file turns global maintenance on (hot reload, no signal).
    let before = newest_id(&d, "ticker");
    d.write_config(
        "maint.yaml",
        "saltpeter_maintenance:\n  global: true\n  machines: [m1, m3]\n",
    );
    let on = wait_until("global maintenance from the file", HANG, || {
        let v = show(&d);
        (v["global"] == true).then_some(v)
    });
    assert_eq!(sources(&on["global_sources"]), ["file"]);
    assert_eq!(
        machines(&on),
        [
            ("m1".to_string(), vec!["file".to_string()]),
            ("m3".to_string(), vec!["file".to_string()])
        ]
    );
    wait_skipped_firing(&d, before);
    let off = d.ctl_json(&["maintenance", "off"]);
    assert_eq!(off["global"], true, "the file keeps it on: {off}");
    assert!(off["note"].as_str().is_some_and(|n| n.contains("stays on")));

    // And off again from the file.
    d.write_config("maint.yaml", "saltpeter_maintenance:\n  machines: [m3]\n");
    wait_until("global maintenance off", HANG, || {
        (show(&d)["global"] == false).then_some(())
    });
    let (run, code) = d.run_wait("fleet");
    assert_eq!(code, 0);
    assert_eq!(
        states(&run),
        [
            ("m1".into(), "finished".into()),
            ("m2".into(), "finished".into()),
            ("m3".into(), "skipped_maintenance".into())
        ]
    );
    let events = maintenance_events(&d);
    assert!(
        events
            .iter()
            .any(|e| e == "global maintenance on (by the configuration files)"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e == "m1 out of maintenance (by the configuration files)"),
        "{events:?}"
    );
}
