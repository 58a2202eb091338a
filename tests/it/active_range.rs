//! `active_from` / `active_until` against a running daemon: a job whose range has ended
//! never fires (and `schedule next` and the job list say why) though a manual run still
//! works; a job whose range opens a few seconds ahead fires only from then.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::util::*;

fn slot_of(run: &serde_json::Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(run["slot"].as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[test]
fn slots_outside_the_active_range_do_not_fire() {
    let from = Utc::now() + chrono::Duration::seconds(6);
    let from_text = from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let from = DateTime::parse_from_rfc3339(&from_text)
        .expect("rfc3339")
        .with_timezone(&Utc);
    let jobs = format!(
        "ended:\n  schedule: '* * * * * *'\n  active_until: 2020-01-01\n  targets: [a]\n  \
         command: 'true'\n\
         soon:\n  schedule: '* * * * * *'\n  active_from: '{from_text}'\n  targets: [a]\n  \
         command: 'true'\n"
    );
    let d = Daemon::start(&[("jobs.yaml", &jobs)]);

    let out = d.ctl(&["schedule", "next", "--job", "ended"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("range ended") && err.contains("active_until 2020-01-01"),
        "{err}"
    );
    let list = d.ctl_json(&["jobs"]);
    let ended = list
        .as_array()
        .and_then(|a| a.iter().find(|j| j["name"] == "ended"))
        .cloned()
        .expect("job ended listed");
    assert!(ended["next_run"].is_null(), "{ended}");
    assert!(
        ended["inactive"]
            .as_str()
            .is_some_and(|n| n.contains("range ended")),
        "{ended}"
    );
    // Not active yet: the next run is the first slot of the range.
    let next = d.ctl_json(&["schedule", "next", "--job", "soon", "--count", "1"]);
    assert_eq!(next[0].as_str(), Some(from_text.as_str()), "{next}");

    // Wait past the opening of `soon`, then some.
    let until = Instant::now() + Duration::from_secs(10);
    let runs = wait_until("runs of soon", HANG, || {
        let runs = d.runs("soon");
        (Instant::now() >= until && runs.len() >= 2).then_some(runs)
    });
    for run in &runs {
        let slot = slot_of(run).expect("a slot");
        assert!(slot >= from, "slot {slot} before active_from {from}");
    }
    assert!(d.runs("ended").is_empty(), "{:?}", d.runs("ended"));

    // A manual run is not held by the range.
    let (run, code) = d.run_wait("ended");
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["state"], "succeeded", "{run}");
}
