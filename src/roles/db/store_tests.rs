//! Tests of the store's file handling, batches, meta and events, on real SQLite files.

use std::path::PathBuf;

use rusqlite::Connection;

use super::*;
use crate::roles::db::runs::IN_FLIGHT_SQL;
use crate::roles::db::schema::{APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION};
use crate::wire::db::NewRun;
use crate::wire::db::OutputLimit;
use crate::wire::records::{RunState, TargetState, Trigger};
use crate::wire::wrapper::Stream;

pub(crate) use crate::roles::db::storage::Operations;
use crate::roles::db::{events, output, runs};
use crate::wire::db::{EventFilter, NewEvent, OutputBytes, TargetDetail};
use crate::wire::records::{Millis, RunId, RunRecord};

/// The shared operations the `db` loop does not use, as methods for the tests.
pub(crate) trait Extra {
    fn slot_recorded(&mut self, job: &str, slot: Millis) -> Result<bool, StoreError>;
    fn output(&mut self, run: RunId, machine: &str) -> Result<OutputBytes, StoreError>;
    fn get_target(&mut self, run: RunId, machine: &str)
    -> Result<Option<TargetDetail>, StoreError>;
    fn delete_meta(&mut self, key: &str) -> Result<bool, StoreError>;
    fn add_targets(&mut self, run: RunId, t: &[(String, TargetState)]) -> Result<u64, StoreError>;
    fn prune_events(&mut self, older_than: Millis) -> Result<u64, StoreError>;
    fn known_jobs(&mut self) -> Result<Vec<String>, StoreError>;
    fn in_flight_runs(&mut self) -> Result<Vec<RunRecord>, StoreError>;
}

impl<D: Db> Extra for D {
    fn slot_recorded(&mut self, job: &str, slot: Millis) -> Result<bool, StoreError> {
        runs::slot_recorded(self, job, slot)
    }
    fn output(&mut self, run: RunId, machine: &str) -> Result<OutputBytes, StoreError> {
        output::output(self, run, machine)
    }
    fn get_target(
        &mut self,
        run: RunId,
        machine: &str,
    ) -> Result<Option<TargetDetail>, StoreError> {
        runs::get_target(self, run, machine)
    }
    fn delete_meta(&mut self, key: &str) -> Result<bool, StoreError> {
        events::delete_meta(self, key)
    }
    fn add_targets(&mut self, run: RunId, t: &[(String, TargetState)]) -> Result<u64, StoreError> {
        runs::add_targets(self, run, t)
    }
    fn prune_events(&mut self, older_than: Millis) -> Result<u64, StoreError> {
        events::prune_events(self, older_than)
    }
    fn known_jobs(&mut self) -> Result<Vec<String>, StoreError> {
        runs::known_jobs(self)
    }
    fn in_flight_runs(&mut self) -> Result<Vec<RunRecord>, StoreError> {
        runs::in_flight_runs(self)
    }
}

/// A store in a fresh temp dir (the dir lives as long as the returned guard).
pub(crate) fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("saltpeter.db")).unwrap();
    (dir, store)
}

pub(crate) fn new_run(job: &str, slot: Option<i64>, state: RunState, machines: &[&str]) -> NewRun {
    NewRun {
        job: job.into(),
        slot,
        trigger: if slot.is_some() {
            Trigger::Schedule
        } else {
            Trigger::Manual
        },
        state,
        reason: None,
        targets: machines
            .iter()
            .map(|m| (m.to_string(), TargetState::Pending))
            .collect(),
        now: slot.unwrap_or(1_000),
    }
}

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("saltpeter.db")
}

fn pragma(conn: &Connection, name: &str) -> String {
    conn.query_row(&format!("PRAGMA {name}"), [], |row| {
        row.get::<_, rusqlite::types::Value>(0)
    })
    .map(|v| match v {
        rusqlite::types::Value::Integer(i) => i.to_string(),
        rusqlite::types::Value::Text(t) => t,
        other => format!("{other:?}"),
    })
    .unwrap()
}

#[test]
fn migrates_an_empty_file_with_the_settings() {
    let (_dir, store) = temp_store();
    let conn = &store.conn;
    assert_eq!(pragma(conn, "user_version"), SCHEMA_VERSION.to_string());
    assert_eq!(pragma(conn, "application_id"), APPLICATION_ID.to_string());
    assert_eq!(pragma(conn, "journal_mode"), "wal");
    assert_eq!(pragma(conn, "synchronous"), "1", "NORMAL");
    assert_eq!(pragma(conn, "foreign_keys"), "1");
    assert_eq!(pragma(conn, "auto_vacuum"), "2", "INCREMENTAL");
    for table in [
        "runs",
        "targets",
        "output_chunks",
        "output_seen",
        "events",
        "meta",
    ] {
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "table {table}");
    }
    assert_eq!(SCHEMA_VERSION as usize, MIGRATIONS.len());
}

#[test]
fn in_flight_states_match_the_records_and_the_index() {
    let names: Vec<String> = RunState::ALL
        .iter()
        .filter(|s| !s.is_final())
        .map(|s| format!("'{s}'"))
        .collect();
    assert_eq!(IN_FLIGHT_SQL, format!("({})", names.join(", ")));
    assert!(MIGRATIONS[0].contains(&format!("WHERE state IN {IN_FLIGHT_SQL}")));
    let (_dir, store) = temp_store();
    let plan: String = store
        .conn
        .query_row(
            &format!("EXPLAIN QUERY PLAN SELECT id FROM runs WHERE state IN {IN_FLIGHT_SQL}"),
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("runs_in_flight"), "plan: {plan}");
}

#[test]
fn reopen_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let mut store = Store::open(&db_path(&dir)).unwrap();
        store.set_meta("maintenance", "{\"global\":true}").unwrap();
        store
            .create_run(&new_run(
                "backup",
                Some(60_000),
                RunState::Running,
                &["a", "b"],
            ))
            .unwrap()
            .unwrap()
    };
    let mut store = Store::open(&db_path(&dir)).unwrap();
    let run = store.get_run(id).unwrap().unwrap();
    assert_eq!(run.job, "backup");
    assert_eq!(run.targets.len(), 2);
    assert_eq!(
        store.get_meta("maintenance").unwrap().as_deref(),
        Some("{\"global\":true}")
    );
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(&db_path(&dir)).unwrap());
    Connection::open(db_path(&dir))
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = Store::open(&db_path(&dir)).err().unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found: 99, supported, .. } if supported == SCHEMA_VERSION),
        "{err}"
    );
    assert!(err.to_string().contains("newer than version"), "{err}");
    assert!(matches!(
        Store::check(&db_path(&dir)),
        Err(StoreError::TooNew { .. })
    ));
}

#[test]
fn a_foreign_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    Connection::open(db_path(&dir))
        .unwrap()
        .execute_batch("CREATE TABLE notes (x TEXT)")
        .unwrap();
    let err = Store::open(&db_path(&dir)).err().unwrap();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err}");
    let conn = Connection::open(db_path(&dir)).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn check_reads_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    assert!(!Store::check(&path).unwrap().exists);
    assert!(!path.exists(), "check must not create the file");
    {
        let mut store = Store::open(&path).unwrap();
        store
            .create_run(&new_run("a", Some(1), RunState::Running, &["m"]))
            .unwrap();
        store
            .create_run(&new_run("a", Some(2), RunState::Succeeded, &["m"]))
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    // A read-only file proves no write is attempted.
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms).unwrap();
    let report = Store::check(&path).unwrap();
    assert!(report.exists && report.is_ok(), "{report:?}");
    assert_eq!(report.schema_version, SCHEMA_VERSION);
    assert!(!report.needs_migration);
    assert_eq!(report.runs_in_flight, 1);
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // A file the daemon never migrated is reported, not migrated.
    let old = dir.path().join("old.db");
    Connection::open(&old)
        .unwrap()
        .execute_batch("VACUUM")
        .unwrap();
    let report = Store::check(&old).unwrap();
    assert!(report.needs_migration && report.schema_version == 0);
    assert_eq!(
        pragma(&Connection::open(&old).unwrap(), "user_version"),
        "0"
    );
}

#[test]
fn batch_commits_together_and_rolls_back_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db_path(&dir)).unwrap();
    let mut reader = Store::open(&db_path(&dir)).unwrap();

    store.begin_batch().unwrap();
    assert!(store.in_batch());
    let id = store
        .create_run(&new_run("a", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    store
        .append_output(id, "m", 1, Stream::Stdout, b"hello", OutputLimit::default())
        .unwrap();
    // A failing operation undoes itself only.
    assert!(matches!(
        store.append_output(id, "nope", 1, Stream::Stdout, b"x", OutputLimit::default()),
        Err(StoreError::NotFound { .. })
    ));
    store.set_meta("k", "v").unwrap();
    assert!(
        reader.get_run(id).unwrap().is_none(),
        "not visible before commit"
    );
    store.commit_batch().unwrap();
    assert!(!store.in_batch());
    assert_eq!(reader.output(id, "m").unwrap().data, b"hello");
    assert_eq!(reader.get_meta("k").unwrap().as_deref(), Some("v"));

    store.begin_batch().unwrap();
    store
        .create_run(&new_run("a", Some(2), RunState::Running, &["m"]))
        .unwrap();
    store
        .append_output(
            id,
            "m",
            2,
            Stream::Stdout,
            b" world",
            OutputLimit::default(),
        )
        .unwrap();
    store.set_meta("k", "changed").unwrap();
    store.rollback_batch().unwrap();
    assert!(!store.slot_recorded("a", 2).unwrap());
    assert_eq!(store.output(id, "m").unwrap().data, b"hello");
    assert_eq!(store.max_contiguous_seq(id, "m").unwrap(), 1);
    assert_eq!(store.get_meta("k").unwrap().as_deref(), Some("v"));

    assert!(matches!(
        store.commit_batch(),
        Err(StoreError::Invalid { .. })
    ));
    store.begin_batch().unwrap();
    assert!(matches!(
        store.begin_batch(),
        Err(StoreError::Invalid { .. })
    ));
    store.commit_batch().unwrap();
}

#[test]
fn disk_full_is_its_own_error_and_the_store_recovers() {
    let (_dir, mut store) = temp_store();
    let id = store
        .create_run(&new_run("a", None, RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    let pages: i64 = store
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    store
        .conn
        .pragma_update(None, "max_page_count", pages + 4)
        .unwrap();
    // Bytes that do not compress (stored chunks are compressed when that pays).
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let big: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    store.begin_batch().unwrap();
    store.set_meta("before", "1").unwrap();
    let mut full = None;
    for seq in 1..100 {
        if let Err(err) =
            store.append_output(id, "m", seq, Stream::Stdout, &big, OutputLimit::default())
        {
            full = Some((seq, err));
            break;
        }
    }
    let (seq, err) = full.expect("the size limit is reached");
    assert!(
        matches!(
            err,
            StoreError::DiskFull {
                op: Op::AppendOutput
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("database is full"), "{err}");
    // Either the batch survived (statement rollback) or it is reported as lost.
    if store.in_batch() {
        store.commit_batch().unwrap();
        assert_eq!(store.max_contiguous_seq(id, "m").unwrap(), seq - 1);
    } else {
        assert!(matches!(
            store.set_meta("x", "y"),
            Err(StoreError::BatchLost { .. })
        ));
        assert!(matches!(
            store.commit_batch(),
            Err(StoreError::BatchLost { .. })
        ));
    }
    store
        .conn
        .pragma_update(None, "max_page_count", 1 << 30)
        .unwrap();
    store.rollback_batch().unwrap();
    let next = store.max_contiguous_seq(id, "m").unwrap() + 1;
    store
        .append_output(id, "m", next, Stream::Stdout, &big, OutputLimit::default())
        .unwrap();
}

#[test]
fn meta_is_set_replaced_and_deleted() {
    let (_dir, mut store) = temp_store();
    assert_eq!(store.get_meta("maintenance").unwrap(), None);
    store.set_meta("maintenance", "a").unwrap();
    store.set_meta("maintenance", "b").unwrap();
    assert_eq!(store.get_meta("maintenance").unwrap().as_deref(), Some("b"));
    assert!(store.delete_meta("maintenance").unwrap());
    assert!(!store.delete_meta("maintenance").unwrap());
    assert_eq!(store.get_meta("maintenance").unwrap(), None);
}

#[test]
fn events_are_listed_newest_first_with_filters_and_pruned() {
    let (_dir, mut store) = temp_store();
    let event = |at, kind: &str, job: Option<&str>, run| NewEvent {
        at,
        kind: kind.into(),
        job: job.map(String::from),
        run,
        machine: None,
        message: format!("{kind} at {at}"),
        uid: None,
    };
    let mut ids = Vec::new();
    for (at, kind, job, run) in [
        (10, "run_created", Some("a"), Some(1)),
        (20, "target_lost", Some("a"), Some(1)),
        (30, "maintenance_set", None, None),
        (40, "run_created", Some("b"), Some(2)),
    ] {
        ids.push(store.record_event(&event(at, kind, job, run)).unwrap());
    }
    let all = store.list_events(&EventFilter::default()).unwrap();
    assert_eq!(
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        [ids[3], ids[2], ids[1], ids[0]]
    );
    assert_eq!(all[3].event, event(10, "run_created", Some("a"), Some(1)));
    let of_a = store
        .list_events(&EventFilter {
            job: Some("a".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(of_a.len(), 2);
    let created = store
        .list_events(&EventFilter {
            kind: Some("run_created".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(created.len(), 2);
    let of_run = store
        .list_events(&EventFilter {
            run: Some(2),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(of_run[0].event.job.as_deref(), Some("b"));
    let page = store
        .list_events(&EventFilter {
            before_id: Some(ids[2]),
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), [ids[1]]);
    let recent = store
        .list_events(&EventFilter {
            since: Some(30),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(recent.len(), 2);
    assert_eq!(store.prune_events(30).unwrap(), 2);
    assert_eq!(store.list_events(&EventFilter::default()).unwrap().len(), 2);
}

#[test]
fn check_reports_a_damaged_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    {
        let mut store = Store::open(&path).unwrap();
        let id = store
            .create_run(&new_run("a", Some(1), RunState::Running, &["m"]))
            .unwrap()
            .unwrap();
        for seq in 1..=50 {
            store
                .append_output(
                    id,
                    "m",
                    seq,
                    Stream::Stdout,
                    &[b'x'; 3000],
                    OutputLimit::default(),
                )
                .unwrap();
        }
    }
    // Scribble over the pages after the first two (the header and schema stay readable).
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert!(bytes.len() > 8 * page);
    for byte in &mut bytes[2 * page..6 * page] {
        *byte = 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    match Store::check(&path) {
        Ok(report) => assert!(!report.is_ok(), "{report:?}"),
        Err(err) => assert!(
            matches!(err, StoreError::Sql { op: Op::Check, .. }),
            "{err}"
        ),
    }
}
