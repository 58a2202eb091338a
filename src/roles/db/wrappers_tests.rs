//! The fleet state of wrapper builds (`wrappers.rs`), part of the
//! suite run on both backends: upserts, newer wins, forgetting, the order of the listing,
//! the bounds, batches; then a reopen and the migration of a version 5 database, each
//! written once per backend.

use crate::roles::db::storage::Storage;
use crate::roles::db::store::StoreError;
use crate::roles::db::wrappers::{MAX_PATH_BYTES, MAX_PATHS_PER_MINION};
use crate::wire::db::{DbReply, DbRequest, WrapperSeen};

on_both_backends!(
    wrappers_upsert_by_minion_and_path,
    an_older_report_never_overwrites_a_newer_one,
    a_forgotten_wrapper_is_gone,
    wrappers_list_by_minion_then_path_byte_wise,
    a_minion_keeps_its_most_recently_seen_paths,
    an_oversized_row_fails_its_whole_request,
    wrapper_writes_are_durable_with_their_batch,
);

fn seen(minion: &str, path: &str, sha256: &str, at: i64) -> WrapperSeen {
    WrapperSeen {
        minion: minion.into(),
        path: path.into(),
        sha256: sha256.into(),
        seen: at,
    }
}

const WRAPPER: &str = "/usr/bin/saltpeter-wrapper";
const LOCAL: &str = "/usr/local/bin/saltpeter-wrapper";

fn wrappers_upsert_by_minion_and_path(s: &mut dyn Storage) {
    assert_eq!(s.wrappers().unwrap(), []);
    s.record_wrappers(&[
        seen("web1", WRAPPER, "aa", 100),
        seen("web1", LOCAL, "bb", 100),
        seen("db1", WRAPPER, "aa", 100),
    ])
    .unwrap();
    s.record_wrappers(&[seen("web1", WRAPPER, "cc", 200)])
        .unwrap();
    s.record_wrappers(&[]).unwrap();
    assert_eq!(
        s.wrappers().unwrap(),
        [
            seen("db1", WRAPPER, "aa", 100),
            seen("web1", WRAPPER, "cc", 200),
            seen("web1", LOCAL, "bb", 100),
        ]
    );
}

fn an_older_report_never_overwrites_a_newer_one(s: &mut dyn Storage) {
    s.record_wrappers(&[seen("web1", WRAPPER, "new", 200)])
        .unwrap();
    s.record_wrappers(&[seen("web1", WRAPPER, "old", 100)])
        .unwrap();
    assert_eq!(s.wrappers().unwrap(), [seen("web1", WRAPPER, "new", 200)]);
    // The same instant: the incoming row wins.
    s.record_wrappers(&[seen("web1", WRAPPER, "same", 200)])
        .unwrap();
    assert_eq!(s.wrappers().unwrap(), [seen("web1", WRAPPER, "same", 200)]);
    // Within one request as across requests, whatever the order.
    s.record_wrappers(&[
        seen("web2", WRAPPER, "later", 300),
        seen("web2", WRAPPER, "earlier", 250),
    ])
    .unwrap();
    assert_eq!(
        s.wrappers().unwrap()[1],
        seen("web2", WRAPPER, "later", 300)
    );
}

fn a_forgotten_wrapper_is_gone(s: &mut dyn Storage) {
    s.record_wrappers(&[
        seen("web1", WRAPPER, "aa", 100),
        seen("web1", LOCAL, "bb", 100),
        seen("web2", WRAPPER, "aa", 100),
    ])
    .unwrap();
    assert!(s.forget_wrapper("web1", WRAPPER).unwrap());
    assert!(!s.forget_wrapper("web1", WRAPPER).unwrap(), "already gone");
    assert!(!s.forget_wrapper("nobody", WRAPPER).unwrap());
    assert_eq!(
        s.wrappers().unwrap(),
        [
            seen("web1", LOCAL, "bb", 100),
            seen("web2", WRAPPER, "aa", 100)
        ]
    );
    // Seen again after it was forgotten: a new row, whatever its instant.
    s.record_wrappers(&[seen("web1", WRAPPER, "dd", 50)])
        .unwrap();
    assert_eq!(s.wrappers().unwrap().len(), 3);
}

/// Byte-wise, as SQLite compares text: upper case before lower case, `-` before
/// letters (a locale's collation would say otherwise).
fn wrappers_list_by_minion_then_path_byte_wise(s: &mut dyn Storage) {
    let rows = [
        seen("web1", "/b", "x", 1),
        seen("Web1", "/a", "x", 1),
        seen("web1", "/B", "x", 1),
        seen("a-b", "/a", "x", 1),
        seen("aa", "/a", "x", 1),
        seen("web1", "/a-b", "x", 1),
        seen("web1", "/aa", "x", 1),
    ];
    s.record_wrappers(&rows).unwrap();
    let listed: Vec<(String, String)> = s
        .wrappers()
        .unwrap()
        .into_iter()
        .map(|w| (w.minion, w.path))
        .collect();
    let mut expected: Vec<(String, String)> = rows
        .iter()
        .map(|w| (w.minion.clone(), w.path.clone()))
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(listed[0].0, "Web1");
    assert_eq!(listed[1].0, "a-b");
}

fn a_minion_keeps_its_most_recently_seen_paths(s: &mut dyn Storage) {
    let extra = 4;
    let rows: Vec<WrapperSeen> = (0..MAX_PATHS_PER_MINION + extra)
        .map(|i| seen("web1", &format!("/opt/w{i:02}"), "aa", i as i64))
        .collect();
    s.record_wrappers(&rows).unwrap();
    s.record_wrappers(&[seen("web2", WRAPPER, "aa", 0)])
        .unwrap();
    let kept = s.wrappers().unwrap();
    let web1: Vec<&WrapperSeen> = kept.iter().filter(|w| w.minion == "web1").collect();
    assert_eq!(web1.len(), MAX_PATHS_PER_MINION);
    assert!(
        web1.iter().all(|w| w.seen >= extra as i64),
        "the least recently seen went: {web1:?}"
    );
    assert!(kept.iter().any(|w| w.minion == "web2"), "others untouched");
    // A path seen again is no longer among the oldest.
    s.record_wrappers(&[seen("web1", "/opt/w00", "aa", 1_000)])
        .unwrap();
    let kept = s.wrappers().unwrap();
    assert!(kept.iter().any(|w| w.path == "/opt/w00"));
    assert!(!kept.iter().any(|w| w.path == "/opt/w04"), "now the oldest");
}

fn an_oversized_row_fails_its_whole_request(s: &mut dyn Storage) {
    let long = format!("/{}", "p".repeat(MAX_PATH_BYTES));
    let err = s
        .record_wrappers(&[seen("web1", WRAPPER, "aa", 1), seen("web1", &long, "aa", 1)])
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("wrapper path"), "{err}");
    assert_eq!(
        s.wrappers().unwrap(),
        [],
        "nothing of the request is written"
    );
    let at_bound = format!("/{}", "p".repeat(MAX_PATH_BYTES - 1));
    s.record_wrappers(&[seen("web1", &at_bound, "aa", 1)])
        .unwrap();
    assert_eq!(s.wrappers().unwrap()[0].path, at_bound, "stored whole");
}

fn wrapper_writes_are_durable_with_their_batch(s: &mut dyn Storage) {
    s.begin_batch().unwrap();
    s.record_wrappers(&[seen("web1", WRAPPER, "aa", 1)])
        .unwrap();
    s.rollback_batch().unwrap();
    assert_eq!(s.wrappers().unwrap(), [], "rolled back");

    let calls = [
        (
            1,
            DbRequest::RecordWrappers(vec![
                seen("web1", WRAPPER, "aa", 1),
                seen("web2", WRAPPER, "aa", 1),
            ]),
        ),
        (
            2,
            DbRequest::ForgetWrapper {
                minion: "web2".into(),
                path: WRAPPER.into(),
            },
        ),
        (3, DbRequest::Wrappers),
    ];
    let results = crate::roles::db::apply_batch(s, &calls).unwrap();
    assert!(matches!(results[0], Ok(DbReply::Done)), "{results:?}");
    assert!(matches!(results[1], Ok(DbReply::Done)), "{results:?}");
    match &results[2] {
        Ok(DbReply::Wrappers(rows)) => assert_eq!(rows, &[seen("web1", WRAPPER, "aa", 1)]),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.wrappers().unwrap(), [seen("web1", WRAPPER, "aa", 1)]);
}

/// What a database holds is there again once it is opened anew (a restart; on
/// PostgreSQL also another server of the same database).
fn wrappers_survive_a_reopen(open: &dyn Fn() -> Box<dyn Storage>) {
    {
        let mut s = open();
        s.begin_batch().unwrap();
        s.record_wrappers(&[
            seen("web1", WRAPPER, "aa", 10),
            seen("db1", WRAPPER, "bb", 20),
        ])
        .unwrap();
        s.commit_batch().unwrap();
    }
    let mut s = open();
    assert_eq!(
        s.wrappers().unwrap(),
        [
            seen("db1", WRAPPER, "bb", 20),
            seen("web1", WRAPPER, "aa", 10)
        ]
    );
}

#[test]
fn sqlite_wrappers_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saltpeter.db");
    wrappers_survive_a_reopen(&|| {
        Box::new(crate::roles::db::store::Store::open(&path).unwrap_or_else(|e| panic!("{e}")))
    });
}

#[test]
fn postgres_wrappers_survive_a_reopen() {
    let Some(url) = crate::roles::db::pg_cluster::fresh_database() else {
        return;
    };
    wrappers_survive_a_reopen(&|| {
        Box::new(crate::roles::db::pg::PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}")))
    });
}

/// After the migration, a version 5 database keeps what it held and has the table.
fn migrated_from_version_5(s: &mut dyn Storage) {
    assert_eq!(s.get_meta("kept").unwrap().as_deref(), Some("yes"));
    assert_eq!(s.wrappers().unwrap(), []);
    s.record_wrappers(&[seen("web1", WRAPPER, "aa", 1)])
        .unwrap();
    assert_eq!(s.wrappers().unwrap().len(), 1);
}

#[test]
fn sqlite_a_version_5_database_gets_the_table() {
    use crate::roles::db::schema::SCHEMA_VERSION;
    const { assert!(SCHEMA_VERSION >= 6) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saltpeter.db");
    crate::roles::db::schema_at::sqlite(
        &path,
        5,
        "INSERT INTO meta (key, value) VALUES ('kept', 'yes')",
    );
    let report = crate::roles::db::store::Store::check(&path).unwrap();
    assert!(
        report.needs_migration && report.schema_version == 5,
        "{report:?}"
    );
    let mut store = crate::roles::db::store::Store::open(&path).unwrap();
    let version: u32 = store
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    migrated_from_version_5(&mut store);
}

#[test]
fn postgres_a_version_5_database_gets_the_table() {
    use crate::roles::db::pg::schema::SCHEMA_VERSION;
    let Some((url, mut admin)) = crate::roles::db::schema_at::postgres(
        5,
        "INSERT INTO meta (key, value) VALUES ('kept', 'yes')",
    ) else {
        return;
    };
    let mut store = crate::roles::db::pg::PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    let version: i32 = admin
        .query_one("SELECT version FROM saltpeter_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version as u32, SCHEMA_VERSION);
    migrated_from_version_5(&mut store);
}
