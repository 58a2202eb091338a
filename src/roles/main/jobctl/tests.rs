//! The job control part without a loop: requests, holds of slots, deferred slots and the
//! end of pauses, each at a pinned time.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{Duration, TimeZone};
use chrono_tz::Tz;

use super::request::MAX_SKIP;
use super::*;
use crate::config::JobEntry;
use crate::config::windows::{WindowPolicy, WindowTime};
use crate::ipc::Role;
use crate::ipc::rpc::CallError;
use crate::roles::main::messages::Cmd;
use crate::wire::admin::JobControl;
use crate::wire::db::DbReply;

fn t(h: u32, m: u32) -> DateTime<Utc> {
    match Utc.with_ymd_and_hms(2026, 11, 29, h, m, 0) {
        chrono::LocalResult::Single(t) => t,
        _ => panic!("bad time"),
    }
}

fn ms(at: DateTime<Utc>) -> Millis {
    at.timestamp_millis()
}

/// The configured jobs: `backup`, every 10 minutes.
fn jobs() -> BTreeMap<String, JobEntry> {
    let yaml = "backup:\n  schedule: '*/10 * * * *'\n  command: 'true'\n  targets: a\n";
    let loaded = crate::config::check_yaml(yaml, t(0, 0));
    assert!(
        loaded.jobs.contains_key("backup"),
        "{:?}",
        loaded.diagnostics
    );
    loaded.jobs
}

fn backup(jobs: &BTreeMap<String, JobEntry>) -> Job {
    match jobs.get("backup").and_then(JobEntry::job) {
        Some(j) => j.clone(),
        None => panic!("no job backup"),
    }
}

/// A fleet-wide window open from `start` to `end`.
fn window(name: &str, policy: WindowPolicy, start: DateTime<Utc>, end: DateTime<Utc>) -> Window {
    Window {
        name: name.into(),
        when: WindowTime::Once { start, end },
        timezone: Tz::UTC,
        machines: Vec::new(),
        groups: Vec::new(),
        policy,
        file: PathBuf::from("w.yaml"),
        line: 1,
    }
}

fn due(slot: DateTime<Utc>) -> Due {
    Due {
        job: "backup".into(),
        slot,
        missed: false,
        early: false,
    }
}

/// What `out` asks for, in words: `answer N`, `event KIND: MESSAGE`, `save`, `db`.
fn said(out: &Out) -> Vec<String> {
    out.cmds()
        .iter()
        .map(|c| match c {
            Cmd::Answer(call, AdminResponse::Failure(f)) => format!("answer {call}: {f:?}"),
            Cmd::Answer(call, _) => format!("answer {call}"),
            Cmd::Event(e) => format!("event {}: {}", e.kind, e.message),
            Cmd::Db {
                req: DbRequest::SetMeta { key, .. },
                then: Then::Tell(_),
                ..
            } if key == META_KEY => "save".to_string(),
            Cmd::Db { .. } => "db".to_string(),
            Cmd::Post(_) => "post".to_string(),
            Cmd::Blocking { .. } => "blocking".to_string(),
            Cmd::Hub(_) => "hub".to_string(),
        })
        .collect()
}

/// What was stored by the save in `out`, and the message its reply becomes.
fn stored(out: Out, result: DbResult) -> (String, Message) {
    for cmd in out.into_cmds() {
        if let Cmd::Db {
            req: DbRequest::SetMeta { value, .. },
            then: Then::Tell(to),
            ..
        } = cmd
        {
            return (value, to(result));
        }
    }
    panic!("nothing saved")
}

/// The answer in `out` to `call`.
fn answer(out: &Out, call: CallId) -> &AdminResponse {
    for cmd in out.cmds() {
        if let Cmd::Answer(c, resp) = cmd
            && *c == call
        {
            return resp;
        }
    }
    panic!("no answer to {call}")
}

#[test]
fn pause_resume_and_skip_are_recorded_saved_and_answered_once_saved() {
    let jobs = jobs();
    let mut ctl = JobCtl::default();
    let now = t(1, 0);
    let out = ctl.request(
        1,
        JobControl::Pause {
            job: "backup".into(),
            until: None,
        },
        &jobs,
        Some(7),
        now,
    );
    assert_eq!(
        said(&out),
        [
            "event job_control: backup is paused until `saltpeterctl resume backup` (by uid 7)",
            "save"
        ]
    );
    assert!(ctl.paused("backup", now));
    assert_eq!(
        ctl.paused_note("backup", now).as_deref(),
        Some("paused by uid 7")
    );
    // The answer waits for db: it says what is in effect.
    let (value, msg) = stored(out, Ok(DbReply::Done));
    assert_eq!(
        value,
        format!(
            r#"{{"jobs":{{"backup":{{"paused":{{"by":7,"at":{},"until":null}},"skip_next":0,"skip_by":null}}}}}}"#,
            ms(now)
        )
    );
    let Message::JobCtlSaved { call, note, result } = msg else {
        panic!("not a save of job control")
    };
    let answered = ctl.saved(call, note, result);
    match answer(&answered, 1) {
        AdminResponse::JobControl(info) => {
            assert_eq!(info.jobs.len(), 1);
            assert!(info.jobs[0].paused);
            assert_eq!(info.jobs[0].paused_by, Some(7));
        }
        other => panic!("{other:?}"),
    }

    let out = ctl.request(
        2,
        JobControl::Skip {
            job: "backup".into(),
            next: 2,
        },
        &jobs,
        None,
        now,
    );
    assert_eq!(
        said(&out),
        [
            "event job_control: the next 2 slot(s) of backup are skipped (by the HTTP API)",
            "save"
        ]
    );
    let out = ctl.request(
        3,
        JobControl::Resume {
            job: "backup".into(),
        },
        &jobs,
        Some(7),
        now,
    );
    assert_eq!(
        said(&out),
        [
            "event job_control: backup is resumed: its slots run again (by uid 7)",
            "save"
        ]
    );
    assert!(!ctl.paused("backup", now));
    let out = ctl.request(
        4,
        JobControl::Resume {
            job: "backup".into(),
        },
        &jobs,
        Some(7),
        now,
    );
    assert_eq!(
        said(&out),
        [
            "event job_control: backup was neither paused nor skipping (by uid 7)",
            "save"
        ]
    );
    let out = ctl.request(5, JobControl::Show, &jobs, Some(7), now);
    assert_eq!(said(&out), ["answer 5"]);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let jobs = jobs();
    let mut ctl = JobCtl::default();
    let now = t(1, 0);
    let pause_past = JobControl::Pause {
        job: "backup".into(),
        until: Some(ms(now)),
    };
    let out = ctl.request(1, pause_past, &jobs, Some(7), now);
    assert_eq!(
        said(&out),
        [r#"answer 1: Invalid("--until 2026-11-29T01:00:00Z has already passed")"#]
    );
    for next in [0, MAX_SKIP + 1] {
        let skip = JobControl::Skip {
            job: "backup".into(),
            next,
        };
        let out = ctl.request(2, skip, &jobs, Some(7), now);
        assert_eq!(
            said(&out),
            [format!(
                r#"answer 2: Invalid("--next {next} must be 1-{MAX_SKIP}")"#
            )]
        );
    }
    let unknown = JobControl::Pause {
        job: "nope".into(),
        until: None,
    };
    let out = ctl.request(3, unknown, &jobs, Some(7), now);
    assert_eq!(said(&out), [r#"answer 3: NotFound("no job named nope")"#]);
    assert!(ctl.state.jobs.is_empty(), "{:?}", ctl.state);
    // Resuming a job no longer configured cleans up after it.
    let gone = JobControl::Resume { job: "nope".into() };
    let out = ctl.request(4, gone, &jobs, Some(7), now);
    assert_eq!(
        said(&out),
        [
            "event job_control: nope was neither paused nor skipping (by uid 7)",
            "save"
        ]
    );
    assert!(ctl.state.jobs.is_empty());
}

#[test]
fn a_failed_save_is_answered_as_such_or_logged() {
    let ctl = JobCtl::default();
    let lost = || Err(CallError::PeerGone(Role::Db));
    let out = ctl.saved(Some(9), Some("note".into()), lost());
    assert!(matches!(
        answer(&out, 9),
        AdminResponse::Failure(AdminFailure::Internal(why)) if why.contains("lost at the next restart")
    ));
    assert!(ctl.saved(None, None, lost()).is_empty());
}

#[test]
fn a_paused_job_skips_its_slots_until_the_pause_ends_by_itself() {
    let jobs = jobs();
    let job = backup(&jobs);
    let mut ctl = JobCtl::default();
    let pause = JobControl::Pause {
        job: "backup".into(),
        until: Some(ms(t(2, 0))),
    };
    let _ = ctl.request(1, pause, &jobs, Some(7), t(1, 0));
    assert_eq!(ctl.next_wake(), Some(t(2, 0)));
    let (hold, out) = ctl.hold(&job, &due(t(1, 10)), t(1, 10), &[], false);
    assert_eq!(
        hold,
        Hold::Skip("paused: paused by uid 7 until 2026-11-29T02:00:00Z".into())
    );
    assert!(out.is_empty());
    assert!(ctl.end_pauses(t(1, 59)).is_empty());
    // At its end the job runs again, and the end is recorded and saved.
    let out = ctl.end_pauses(t(2, 0));
    assert_eq!(
        said(&out),
        [
            "event job_control: resumed: the pause ended (--until)",
            "save"
        ]
    );
    assert!(ctl.state.jobs.is_empty());
    assert_eq!(ctl.next_wake(), None);
    let (hold, _) = ctl.hold(&job, &due(t(2, 0)), t(2, 0), &[], false);
    assert_eq!(hold, Hold::Run);
}

#[test]
fn skips_are_taken_one_per_slot_and_saved_each_time() {
    let jobs = jobs();
    let job = backup(&jobs);
    let mut ctl = JobCtl::default();
    let skip = JobControl::Skip {
        job: "backup".into(),
        next: 2,
    };
    let _ = ctl.request(1, skip, &jobs, Some(7), t(1, 0));
    let (hold, out) = ctl.hold(&job, &due(t(1, 10)), t(1, 10), &[], false);
    assert_eq!(
        hold,
        Hold::Skip("skipped: skip requested by uid 7 (1 more to skip)".into())
    );
    assert_eq!(said(&out), ["save"]);
    // A deferred slot coming back has passed its skip already.
    let (hold, out) = ctl.hold(&job, &due(t(1, 10)), t(1, 15), &[], true);
    assert_eq!(hold, Hold::Run);
    assert!(out.is_empty());
    let (hold, out) = ctl.hold(&job, &due(t(1, 20)), t(1, 20), &[], false);
    assert_eq!(
        hold,
        Hold::Skip("skipped: skip requested by uid 7 (0 more to skip)".into())
    );
    let (value, _) = stored(out, Ok(DbReply::Done));
    assert_eq!(value, r#"{"jobs":{}}"#, "the last skip leaves nothing set");
    let (hold, _) = ctl.hold(&job, &due(t(1, 30)), t(1, 30), &[], false);
    assert_eq!(hold, Hold::Run);
}

#[test]
fn a_defer_window_keeps_one_slot_per_job_for_its_end() {
    let jobs = jobs();
    let job = backup(&jobs);
    let mut ctl = JobCtl::default();
    let windows = [window("patch", WindowPolicy::Defer, t(2, 0), t(3, 0))];
    let (hold, out) = ctl.hold(&job, &due(t(2, 10)), t(2, 10), &windows, false);
    assert_eq!(hold, Hold::Deferred);
    assert_eq!(
        said(&out),
        [
            "event run_deferred: slot 2026-11-29 02:10:00 UTC: deferred to the end of \
             maintenance window patch at 2026-11-29T03:00:00Z"
        ]
    );
    assert_eq!(ctl.next_wake(), Some(t(3, 0)));
    // A later slot in the same window does not pile up behind it.
    let (hold, out) = ctl.hold(&job, &due(t(2, 20)), t(2, 20), &windows, false);
    assert_eq!(
        hold,
        Hold::Skip(
            "maintenance window patch: an earlier slot already waits for its end at \
             2026-11-29T03:00:00Z"
                .into()
        )
    );
    assert!(out.is_empty());
    // Nothing is due before the end; at the end the slot comes back, once.
    assert_eq!(ctl.next_deferred(t(2, 59)), None);
    assert_eq!(ctl.next_deferred(t(3, 0)), Some(due(t(2, 10))));
    assert_eq!(ctl.next_deferred(t(3, 0)), None);
    assert_eq!(ctl.next_wake(), None);
    // Judged now, after the window: it runs.
    let (hold, _) = ctl.hold(&job, &due(t(2, 10)), t(3, 0), &windows, true);
    assert_eq!(hold, Hold::Run);
}

#[test]
fn a_skip_window_skips_and_wins_over_a_defer_window() {
    let jobs = jobs();
    let job = backup(&jobs);
    let mut ctl = JobCtl::default();
    let windows = [
        window("patch", WindowPolicy::Defer, t(2, 0), t(3, 0)),
        window("freeze", WindowPolicy::Skip, t(2, 0), t(2, 30)),
    ];
    let (hold, out) = ctl.hold(&job, &due(t(2, 10)), t(2, 10), &windows, false);
    assert_eq!(hold, Hold::Skip("maintenance window freeze".into()));
    assert!(out.is_empty());
    assert_eq!(ctl.next_wake(), None);
}

#[test]
fn the_next_firings_account_for_pause_skips_and_windows() {
    let jobs = jobs();
    let job = backup(&jobs);
    let mut ctl = JobCtl::default();
    let now = t(1, 0);
    let slots: Vec<DateTime<Utc>> = (1..=8).map(|i| now + Duration::minutes(10 * i)).collect();
    assert_eq!(ctl.account(&job, &[], slots.clone(), now), slots);
    let pause = JobControl::Pause {
        job: "backup".into(),
        until: Some(ms(t(1, 20))),
    };
    let _ = ctl.request(1, pause, &jobs, Some(7), now);
    let skip = JobControl::Skip {
        job: "backup".into(),
        next: 1,
    };
    let _ = ctl.request(2, skip, &jobs, Some(7), now);
    let windows = [
        window("patch", WindowPolicy::Defer, t(1, 40), t(1, 55)),
        window("freeze", WindowPolicy::Skip, t(2, 10), t(2, 20)),
    ];
    // 01:10 paused; 01:20 skipped; 01:30 runs; 01:40 and 01:50 deferred to 01:55 (once);
    // 02:00 runs; 02:10 in the skip window; 02:20 runs.
    assert_eq!(
        ctl.account(&job, &windows, slots, now),
        [t(1, 30), t(1, 55), t(2, 0), t(2, 20)]
    );
}

#[test]
fn the_stored_state_is_restored_and_a_bad_one_ignored() {
    let mut ctl = JobCtl::default();
    ctl.restore(Some(
        r#"{"jobs":{"backup":{"paused":{"by":null,"at":1,"until":null},"skip_next":3,"skip_by":5}}}"#
            .into(),
    ));
    assert!(ctl.paused("backup", t(1, 0)));
    assert_eq!(
        ctl.paused_note("backup", t(1, 0)).as_deref(),
        Some("paused by the HTTP API")
    );
    let info = ctl.info(None);
    assert_eq!(info.jobs[0].skip_next, 3);
    ctl.restore(Some("not json".into()));
    assert!(
        ctl.paused("backup", t(1, 0)),
        "an unreadable state changes nothing"
    );
    ctl.restore(None);
    assert!(ctl.paused("backup", t(1, 0)));
}
