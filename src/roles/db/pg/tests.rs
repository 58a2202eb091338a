//! PostgreSQL-only checks (the shared suite is `storage_tests.rs`): URLs never show a
//! password, a server going away and coming back, one leader at a time, databases that
//! are not ours.

use super::*;
use crate::roles::db::storage::Storage;
use crate::roles::db::store::tests::new_run;
use crate::wire::db::{OutputLimit, OutputQuery};
use crate::wire::records::RunState;
use crate::wire::wrapper::Stream;

const ROOMY: OutputLimit = OutputLimit {
    head_bytes: 1 << 20,
    tail_bytes: 1 << 20,
};

#[test]
fn passwords_never_show() {
    assert_eq!(
        redact("postgres://sp:s3cret@db.example:5432/saltpeter"),
        "postgres://sp:***@db.example:5432/saltpeter"
    );
    assert_eq!(
        redact("postgresql://sp@db/saltpeter?password=s3cret&sslmode=disable"),
        "postgresql://sp@db/saltpeter?password=***&sslmode=disable"
    );
    assert_eq!(
        redact("postgres://sp:p@ss@db/x"),
        "postgres://sp:***@db/x",
        "an @ in the password"
    );
    assert_eq!(
        redact("host=/run password=x user=sp"),
        "host=/run password=*** user=sp"
    );
    assert_eq!(
        redact(
            "postgres://sp:s3cret@db/x?sslmode=verify-full&sslrootcert=/etc/ca.pem&sslpassword=k3y"
        ),
        "postgres://sp:***@db/x?sslmode=verify-full&sslrootcert=/etc/ca.pem&sslpassword=***",
        "the TLS parameters"
    );
    assert_eq!(
        redact("host=/run sslpassword=k3y"),
        "host=/run sslpassword=***"
    );
    assert_eq!(redact("postgres://db/x"), "postgres://db/x");
    assert!(is_postgres_url("postgresql://x") && !is_postgres_url("/var/lib/x.db"));
}

/// PostgreSQL only: the server going away fails the batch (nothing acknowledged), and
/// the store connects again by itself once the server is back; committed data stays.
#[test]
fn postgres_lost_and_back() {
    let Some(cluster) = crate::roles::db::pg_cluster::private_cluster() else {
        return;
    };
    let url = cluster.fresh_database();
    let mut s = PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    let s: &mut dyn Storage = &mut s;
    let run = s
        .create_run(&new_run("j", Some(1), RunState::Running, &["m"]))
        .unwrap()
        .unwrap();
    s.append_output(run, "m", 1, Stream::Stdout, b"kept ", ROOMY)
        .unwrap();
    assert!(s.hold_lease().unwrap(), "the only daemon leads");

    cluster.stop_immediately();
    let lost = s.begin_batch().and_then(|()| {
        s.append_output(run, "m", 2, Stream::Stdout, b"lost", ROOMY)
            .map(|_| ())
    });
    let lost = lost.unwrap_err();
    assert!(
        matches!(
            lost,
            StoreError::BatchLost { .. } | StoreError::Postgres { .. }
        ),
        "{lost}"
    );
    let _ = s.rollback_batch();
    let again = s.begin_batch().unwrap_err();
    assert!(
        again
            .to_string()
            .contains("could not connect to the database"),
        "{again}"
    );
    assert!(s.hold_lease().is_err(), "no lease without the database");

    cluster.start_again();
    s.begin_batch().unwrap();
    let stored = s
        .append_output(run, "m", 2, Stream::Stdout, b"resent", ROOMY)
        .unwrap();
    s.commit_batch().unwrap();
    assert_eq!(stored.contiguous_seq, 2);
    let out = s.read_output(run, "m", &OutputQuery::default()).unwrap();
    assert_eq!(out.data, b"kept resent");
    assert!(s.hold_lease().unwrap(), "the lease is taken again");
}

/// PostgreSQL only: two daemons on one database, one lease; the lease passes on when
/// its holder's connection ends.
#[test]
fn postgres_one_leader_at_a_time() {
    let Some(url) = crate::roles::db::pg_cluster::fresh_database() else {
        return;
    };
    let mut a = PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    let mut b = PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    assert!(a.hold_lease().unwrap());
    assert!(!b.hold_lease().unwrap(), "a holds it");
    assert!(a.hold_lease().unwrap(), "a keeps it");
    drop(a);
    let took = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        b.hold_lease().unwrap()
    });
    assert!(took, "b takes the lease once a's session ended");
}

/// Both backends refuse a database that is not theirs or is newer than the build.
#[test]
fn postgres_refuses_a_foreign_database() {
    let Some(url) = crate::roles::db::pg_cluster::fresh_database() else {
        return;
    };
    let mut admin = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE TABLE unrelated (x INT)")
        .unwrap();
    let err = PgStore::connect(&url)
        .err()
        .expect("a foreign database is refused");
    assert!(
        err.to_string().contains("not a saltpeter database"),
        "{err}"
    );
    admin
        .batch_execute(
            "DROP TABLE unrelated; CREATE TABLE saltpeter_schema (application TEXT, version INT);
             INSERT INTO saltpeter_schema VALUES ('saltpeter', 999)",
        )
        .unwrap();
    let err = PgStore::connect(&url)
        .err()
        .expect("a newer schema is refused");
    assert!(err.to_string().contains("newer than version"), "{err}");
}

#[test]
fn postgres_has_every_migration_of_sqlite() {
    assert_eq!(
        super::schema::SCHEMA_VERSION,
        crate::roles::db::schema::SCHEMA_VERSION
    );
}

/// Polls `store` for what it heard until `want` payloads came (or 10 s passed).
fn hear(store: &mut dyn Storage, want: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut heard = Vec::new();
    while heard.len() < want && std::time::Instant::now() < deadline {
        match store.hear_live(true, 100) {
            Ok(Some(h)) => heard.extend(h.payloads),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("{e}"),
        }
    }
    heard
}

/// PostgreSQL only: a standby hears what a batch announces once the batch commits,
/// nothing of a batch rolled back, and a new listening connection says it is new.
#[test]
fn postgres_announcements_are_heard_after_the_commit_only() {
    let Some(url) = crate::roles::db::pg_cluster::fresh_database() else {
        return;
    };
    let mut leader = PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    let mut standby = PgStore::connect(&url).unwrap_or_else(|e| panic!("{e}"));
    let (leader, standby): (&mut dyn Storage, &mut dyn Storage) = (&mut leader, &mut standby);
    let first = standby
        .hear_live(true, 100)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.is_some_and(|h| h.fresh && h.payloads.is_empty()));

    let announce = |store: &mut dyn Storage, what: &[&str], commit: bool| {
        let what: Vec<String> = what.iter().map(|s| s.to_string()).collect();
        store.begin_batch().unwrap_or_else(|e| panic!("{e}"));
        store.announce_live(&what).unwrap_or_else(|e| panic!("{e}"));
        let end = match commit {
            true => store.commit_batch(),
            false => store.rollback_batch(),
        };
        end.unwrap_or_else(|e| panic!("{e}"));
    };
    announce(leader, &["run 1 0", "output 1 7"], true);
    assert_eq!(hear(standby, 2), ["run 1 0", "output 1 7"]);
    announce(leader, &["run 2 0"], false);
    announce(leader, &["run 3 0"], true);
    // Heard in commit order: a rolled back "run 2" would come first.
    assert_eq!(
        hear(standby, 1),
        ["run 3 0"],
        "a batch rolled back is not heard"
    );

    // Not listening: what is announced meanwhile is missed, and the next connection
    // says so (main then reads every run in flight again).
    assert!(matches!(standby.hear_live(false, 100), Ok(None)));
    announce(leader, &["run 4 0"], true);
    let again = standby
        .hear_live(true, 100)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(again.is_some_and(|h| h.fresh && h.payloads.is_empty()));
}
