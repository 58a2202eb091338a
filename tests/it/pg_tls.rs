//! TLS to PostgreSQL (docs/ha.md, "TLS to PostgreSQL"): a cluster with `ssl = on`, a
//! server certificate for localhost / 127.0.0.1 signed by a CA made here, and
//! `hostssl` lines only, so the server itself refuses plain text over TCP
//! (`tests/support/pg_cluster.rs`; without PostgreSQL these fail, unless
//! `SALTPETER_TEST_SKIP` names `postgres`). The daemon is the real binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::ha::{server_with, wait_role};
use crate::pg_cluster::{self, PgCluster, Ssl};
use crate::util::*;

const HELLO: &str =
    "hello:\n  schedule: '@yearly'\n  targets: [m1]\n  command: 'echo hello over tls'\n";

/// The cluster with TLS of this process, its CA file and a CA that did not sign it.
struct TlsCluster {
    cluster: PgCluster,
    ca_file: PathBuf,
    other_ca_file: PathBuf,
}

/// A CA: its certificate (PEM) and what signs with it.
fn new_ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().expect("CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("CA certificate");
    (cert.pem(), rcgen::Issuer::new(params, key))
}

fn shared() -> Option<&'static TlsCluster> {
    static SHARED: OnceLock<Option<TlsCluster>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let (ca_pem, issuer) = new_ca("saltpeter test database CA");
            let (other_pem, _) = new_ca("saltpeter test stranger CA");
            let key = rcgen::KeyPair::generate().expect("server key");
            let params = rcgen::CertificateParams::new(vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
            ])
            .expect("server params");
            let cert = params.signed_by(&key, &issuer).expect("server certificate");
            let cluster = pg_cluster::private_ssl_cluster(&Ssl {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            })?;
            let dir = tempfile::tempdir().expect("CA directory").keep();
            let ca_file = dir.join("db-ca.pem");
            let other_ca_file = dir.join("other-ca.pem");
            std::fs::write(&ca_file, ca_pem).expect("write the CA");
            std::fs::write(&other_ca_file, other_pem).expect("write the other CA");
            Some(TlsCluster {
                cluster,
                ca_file,
                other_ca_file,
            })
        })
        .as_ref()
}

/// A new database of the cluster: its name.
fn fresh_name(cluster: &PgCluster) -> String {
    let url = cluster.fresh_database();
    url.rsplit('/').next().expect("a database name").to_string()
}

fn ca_line(path: &Path) -> String {
    format!("  database_ca_file: {}\n", path.display())
}

/// A daemon on `url` that leads, runs `hello` and stores its run.
fn runs_a_job(url: &str, extra: &str) -> Daemon {
    let port = free_port();
    let d = server_with(url, "tls", port, &[port], HELLO, extra);
    wait_role(&d, "leader");
    let (run, code) = d.run_wait("hello");
    assert_eq!(code, 0, "{run}\n{}", d.log_text());
    let id = run["id"].as_u64().expect("run id");
    assert_eq!(d.output(id, "m1"), "hello over tls\n");
    d
}

/// A daemon on `url` that must refuse to start: its log.
fn refused(url: &str, extra: &str) -> String {
    let mut d = Daemon::prepare(&[(
        "02-db.yaml",
        &format!("saltpeter_config:\n  database_url: '{url}'\n{extra}"),
    )]);
    d.spawn();
    let status = d.wait_exit();
    let log = d.log_text();
    assert_eq!(status.code(), Some(2), "{log}");
    log
}

#[test]
fn verify_full_with_the_ca_runs_a_job_over_tls_and_plain_text_is_refused_by_the_server() {
    let Some(tls) = shared() else {
        return;
    };
    let db = fresh_name(&tls.cluster);
    let url = tls.cluster.tcp_url("localhost", &db, "sslmode=verify-full");
    let d = runs_a_job(&url, &ca_line(&tls.ca_file));
    // The run is in PostgreSQL, and the daemon's connections are encrypted.
    let mut admin = postgres::Client::connect(&tls.cluster.url(&db), postgres::NoTls)
        .expect("admin connection over the socket");
    let runs: i64 = admin
        .query_one("SELECT count(*) FROM runs", &[])
        .expect("runs")
        .get(0);
    assert_eq!(runs, 1);
    let plain: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name LIKE 'saltpeter-db%' AND NOT s.ssl",
            &[],
        )
        .expect("pg_stat_ssl")
        .get(0);
    let encrypted: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name LIKE 'saltpeter-db%' AND s.ssl",
            &[],
        )
        .expect("pg_stat_ssl")
        .get(0);
    assert_eq!(plain, 0, "a connection of the daemon is in plain text");
    assert!(encrypted >= 1, "no encrypted connection of the daemon");
    drop(d);
    // The server refuses plain text over TCP (hostssl only): the test is meaningful.
    let plain_url = tls.cluster.tcp_url("127.0.0.1", &db, "sslmode=disable");
    let err = postgres::Client::connect(&plain_url, postgres::NoTls)
        .err()
        .expect("plain text must be refused");
    assert!(
        format!("{err:?}").contains("no encryption"),
        "refused for another reason: {err:?}"
    );
}

#[test]
fn sslmode_require_without_a_ca_runs_a_job() {
    let Some(tls) = shared() else {
        return;
    };
    let db = fresh_name(&tls.cluster);
    let url = tls.cluster.tcp_url("127.0.0.1", &db, "sslmode=require");
    drop(runs_a_job(&url, ""));
}

#[test]
fn a_certificate_of_another_ca_or_for_another_name_is_refused_with_a_clear_error() {
    let Some(tls) = shared() else {
        return;
    };
    let db = fresh_name(&tls.cluster);
    // Another CA: not trusted.
    let url = tls.cluster.tcp_url("localhost", &db, "sslmode=verify-full");
    let log = refused(&url, &ca_line(&tls.other_ca_file));
    let other = tls.other_ca_file.display().to_string();
    assert!(
        log.contains("the certificate of the database server localhost is not trusted")
            && log.contains(&other),
        "{log}"
    );
    // The URL's sslrootcert is the same setting.
    let url = tls.cluster.tcp_url(
        "localhost",
        &db,
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    );
    let log = refused(&url, "");
    assert!(log.contains("is not trusted"), "{log}");
    // The right CA, a name the certificate does not hold (hostaddr: the TCP address).
    let url = tls
        .cluster
        .tcp_url("db.example", &db, "sslmode=verify-full&hostaddr=127.0.0.1");
    let log = refused(&url, &ca_line(&tls.ca_file));
    assert!(
        log.contains("the certificate of the database server db.example does not name db.example"),
        "{log}"
    );
    // verify-ca checks the chain only: the same name is fine.
    let url = tls
        .cluster
        .tcp_url("db.example", &db, "sslmode=verify-ca&hostaddr=127.0.0.1");
    let port = free_port();
    let d = server_with(&url, "tls", port, &[port], HELLO, &ca_line(&tls.ca_file));
    wait_role(&d, "leader");
}

#[test]
fn plain_text_to_a_remote_database_is_refused_at_load_unless_allowed() {
    // Nothing connects: the configuration is refused before any role starts.
    let url = "postgres://sp:hunter2@192.0.2.1/sp";
    let log = refused(url, "");
    assert!(
        log.contains("02-db.yaml")
            && log.contains("database_url")
            && log.contains("192.0.2.1")
            && log.contains("database_plaintext_ok"),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "the password leaked: {log}");
    let (ok, text) = config_check(
        "db.yaml",
        &format!("saltpeter_config:\n  database_url: '{url}?sslmode=disable'\n"),
    );
    assert!(!ok && text.contains("database_plaintext_ok"), "{text}");
    let (ok, text) = config_check(
        "db.yaml",
        &format!("saltpeter_config:\n  database_url: '{url}'\n  database_plaintext_ok: true\n"),
    );
    assert!(ok, "{text}");
    // A CA file that is not there is named.
    let log = refused(
        "postgres://sp@192.0.2.1/sp?sslmode=verify-full",
        "  database_ca_file: /nonexistent/db-ca.pem\n",
    );
    assert!(log.contains("/nonexistent/db-ca.pem"), "{log}");
}
