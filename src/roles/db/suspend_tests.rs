//! The `suspended` flag and the `limits` line of a target on both backends (a check of
//! `storage_tests`): stored, read back in every shape a target is read in (runs, run
//! details for recovery, one target), kept by other updates and cleared by a new attempt.

use super::super::Storage;
use crate::roles::db::store::tests::new_run;
use crate::wire::db::TargetUpdate;
use crate::wire::records::{RunState, TargetState};

pub(super) fn a_suspended_target_is_stored_and_read_back(s: &mut dyn Storage) {
    let run = s
        .create_run(&new_run("j", Some(1_000), RunState::Running, &["m1", "m2"]))
        .unwrap()
        .unwrap();
    let suspend = |suspended| TargetUpdate {
        suspended: Some(suspended),
        ..Default::default()
    };
    s.update_target(
        run,
        "m1",
        &TargetUpdate {
            state: Some(TargetState::Running),
            ..suspend(true)
        },
    )
    .unwrap();
    let record = s.get_run(run).unwrap().unwrap();
    let flags: Vec<bool> = record.targets.iter().map(|t| t.suspended).collect();
    assert_eq!(flags, [true, false]);
    // Recovery reads it back with the session details.
    let in_flight = s.in_flight_details().unwrap();
    let (_, details) = &in_flight[0];
    assert!(
        details
            .iter()
            .any(|d| d.record.machine == "m1" && d.record.suspended)
    );
    // Other updates leave it alone; a resume clears it.
    s.update_target(
        run,
        "m1",
        &TargetUpdate {
            last_seen: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(s.get_run(run).unwrap().unwrap().targets[0].suspended);
    s.update_target(run, "m1", &suspend(false)).unwrap();
    assert!(!s.get_run(run).unwrap().unwrap().targets[0].suspended);
    // A new attempt starts not suspended.
    s.update_target(run, "m2", &suspend(true)).unwrap();
    s.retry_target(run, "m2", 2).unwrap();
    assert!(!s.get_run(run).unwrap().unwrap().targets[1].suspended);

    // How the limits applied: stored, read in every shape, kept, cleared by a retry.
    let line = "cgroup v1 /sys/fs/cgroup/memory/saltpeter/run-1-m1-7: memory_max=32 MiB";
    let limits = TargetUpdate {
        limits: Some(line.into()),
        ..Default::default()
    };
    s.update_target(run, "m1", &limits).unwrap();
    s.update_target(run, "m1", &suspend(false)).unwrap();
    let record = s.get_run(run).unwrap().unwrap();
    assert_eq!(record.targets[0].limits.as_deref(), Some(line));
    assert_eq!(record.targets[1].limits, None);
    let (_, details) = s.run_details(run).unwrap().unwrap();
    let detail = details.iter().find(|d| d.record.machine == "m1").unwrap();
    assert_eq!(detail.record.limits.as_deref(), Some(line));
    assert_eq!(detail.attempt, 1, "the columns after it are read in place");
    let in_flight = s.in_flight_details().unwrap();
    assert!(
        in_flight[0]
            .1
            .iter()
            .any(|d| d.record.limits.as_deref() == Some(line))
    );
    s.retry_target(run, "m1", 2).unwrap();
    assert_eq!(s.get_run(run).unwrap().unwrap().targets[0].limits, None);
}

/// A version 6 database with a running target: after the migration to 7 it reads back
/// not suspended, and can be suspended.
fn migrated_from_version_6(s: &mut dyn Storage) {
    let record = s.get_run(1).unwrap().expect("the run of version 6");
    assert_eq!(record.targets[0].state, TargetState::Running);
    assert!(!record.targets[0].suspended);
    let update = TargetUpdate {
        suspended: Some(true),
        ..Default::default()
    };
    s.update_target(1, "m1", &update).unwrap();
    assert!(s.get_run(1).unwrap().unwrap().targets[0].suspended);
}

/// The rows of a run with one running target, as version 6 wrote them.
const VERSION_6_ROWS: &str = "
INSERT INTO runs (id, job, slot, trigger, state, created) VALUES (1, 'j', 1000, 'schedule', 'running', 1);
INSERT INTO targets (run_id, machine, state, started) VALUES (1, 'm1', 'running', 2);
";

#[test]
fn sqlite_a_version_6_database_gets_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saltpeter.db");
    crate::roles::db::schema_at::sqlite(&path, 6, VERSION_6_ROWS);
    let mut store = crate::roles::db::store::Store::open(&path).unwrap();
    migrated_from_version_6(&mut store);
}

#[test]
fn postgres_a_version_6_database_gets_the_flag() {
    let Some((url, _admin)) = crate::roles::db::schema_at::postgres(6, VERSION_6_ROWS) else {
        return;
    };
    let mut store = crate::roles::db::pg::PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    migrated_from_version_6(&mut store);
}
