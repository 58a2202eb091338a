//! Test helper: a database as an older build left it — the first `version` migrations of
//! this build, then `rows` — for the tests that a newer build migrates it and keeps it.

use std::path::Path;

/// A SQLite file at `path` at schema `version`, holding `rows`.
pub(crate) fn sqlite(path: &Path, version: usize, rows: &str) {
    use crate::roles::db::schema::{APPLICATION_ID, MIGRATIONS};
    let conn = rusqlite::Connection::open(path).unwrap();
    for sql in &MIGRATIONS[..version] {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch(rows).unwrap();
    conn.pragma_update(None, "user_version", version as i64)
        .unwrap();
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .unwrap();
}

/// A fresh PostgreSQL database at schema `version`, holding `rows`: its URL and a client
/// on it. `None` where the tests run without PostgreSQL (see `pg_cluster`).
pub(crate) fn postgres(version: usize, rows: &str) -> Option<(String, ::postgres::Client)> {
    use crate::roles::db::pg::schema::MIGRATIONS;
    let url = crate::roles::db::pg_cluster::fresh_database()?;
    let mut admin = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE TABLE saltpeter_schema (application TEXT NOT NULL, version INTEGER NOT NULL);
             INSERT INTO saltpeter_schema VALUES ('saltpeter', {version});"
        ))
        .unwrap();
    for sql in &MIGRATIONS[..version] {
        admin.batch_execute(sql).unwrap();
    }
    admin.batch_execute(rows).unwrap();
    Some((url, admin))
}
