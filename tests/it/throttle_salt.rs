//! Throttling of pre-staged salt runs (through the `salt` stand-in of `lost_daemon.rs`,
//! which starts the real wrapper on this host): with `max_running_per_machine: 1`, two
//! salt jobs of one slot on one minion: the first is pre-staged and starts at the slot;
//! the second's target is not launched while the first runs (queued, with the reason),
//! then runs; both succeed.

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde_json::Value;

use crate::util::*;

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not an instant: {v}"))
}

#[test]
fn a_prestaged_target_on_a_full_minion_is_launched_when_a_place_frees() {
    let logs = tempfile::tempdir().expect("logs dir");
    let mut d = Daemon::prepare(&[]);
    let salt = crate::lost_daemon::fake_salt(d.root.path(), logs.path(), 60);
    d.write_config(
        "02-salt.yaml",
        &format!(
            "saltpeter_config:\n  executor: salt\n  salt_bin: {salt}\n  wrapper_source: \
             salt://saltpeter-wrapper\n  default_wrapper_path: {WRAPPER}\n  heartbeat: 1\n  \
             pickup_timeout: 20\n  machines_ws_port: {}\n  salt_pki_dir: {}\n  \
             max_running_per_machine: 1\n",
            free_port(),
            d.root.path().join("master-pki").display()
        ),
    );
    d.spawn();
    d.wait_ready();
    let out = d.ctl(&["wrapper", "deploy", "st1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let slot = Utc::now() + chrono::Duration::seconds(12);
    let schedule = format!(
        "{} {} {} {} {} *",
        slot.second(),
        slot.minute(),
        slot.hour(),
        slot.day(),
        slot.month()
    );
    d.write_config(
        "jobs.yaml",
        &format!(
            "sa:\n  schedule: '{schedule}'\n  targets: [st1]\n  command: 'sleep 3'\n\
             sb:\n  schedule: '{schedule}'\n  targets: [st1]\n  command: 'sleep 3'\n"
        ),
    );
    // Before the slot one run is staged on st1 and the other waits for the place.
    let held = wait_until(
        "a target held back by max_running_per_machine",
        HANG,
        || {
            ["sa", "sb"].iter().find_map(|job| {
                let run = d.runs(job).first()?["id"].as_u64()?;
                let t = target(&d.run_record(run), "st1").clone();
                (t["state"] == "queued").then_some(t)
            })
        },
    );
    assert!(
        held["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("already running on st1 (max_running_per_machine 1)")),
        "{held}"
    );
    let mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = ["sa", "sb"]
        .iter()
        .map(|job| {
            let run = d.wait_final_runs(job, 1)[0].clone();
            assert_eq!(run["state"], "succeeded", "{run}\n{}", d.log_text());
            let t = target(&run, "st1");
            (instant(&t["started"]), instant(&t["ended"]))
        })
        .collect();
    spans.sort();
    // The first started at its slot (it was staged), the second only after it ended.
    let slot = slot.with_nanosecond(0).expect("whole second");
    assert!(spans[0].0 >= slot, "{spans:?} slot {slot}");
    assert!(spans[1].0 >= spans[0].1, "{spans:?}");
    let log = d.log_text();
    assert!(
        log.contains("slot reached, go to 1 waiting wrapper(s)"),
        "the first run was not pre-staged:\n{log}"
    );
}
