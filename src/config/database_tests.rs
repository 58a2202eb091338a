use super::*;

fn ca() -> tempfile::NamedTempFile {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["test ca".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(&mut file, cert.pem().as_bytes()).expect("write");
    file
}

#[test]
fn sslmode_and_sslrootcert_are_taken_out_of_the_url_for_the_driver() {
    let tls = resolve(
        "postgres://sp:pw@db.example/sp?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        None,
    )
    .expect("resolves");
    assert_eq!(tls.mode, SslMode::VerifyFull);
    assert_eq!(
        tls.verify,
        Verify::ChainAndName(CaSource::File("/etc/ca.pem".into()))
    );
    assert_eq!(
        tls.driver_url,
        "postgres://sp:pw@db.example/sp?application_name=x&sslmode=require"
    );
    let tls = resolve(
        "postgres://db/sp?sslmode=verify-ca",
        Some(Path::new("/ca.pem")),
    )
    .unwrap();
    assert_eq!(tls.verify, Verify::Chain(CaSource::File("/ca.pem".into())));
    let tls = resolve(
        "postgres://db/sp?sslmode=verify-full&sslrootcert=system",
        None,
    )
    .unwrap();
    assert_eq!(tls.verify, Verify::ChainAndName(CaSource::System));
}

#[test]
fn require_checks_nothing_but_the_chain_when_a_ca_is_given_as_libpq_does() {
    let tls = resolve("postgres://db/sp?sslmode=require", None).unwrap();
    assert_eq!(tls.verify, Verify::Nothing);
    let tls = resolve(
        "postgres://db/sp?sslmode=require",
        Some(Path::new("/ca.pem")),
    )
    .unwrap();
    assert_eq!(tls.verify, Verify::Chain(CaSource::File("/ca.pem".into())));
    let tls = resolve("postgres://db/sp", None).unwrap();
    assert_eq!(tls.mode, SslMode::Prefer, "libpq's default");
    assert_eq!(tls.driver_url, "postgres://db/sp?sslmode=prefer");
}

#[test]
fn over_a_unix_socket_tls_is_not_asked_for_as_in_libpq() {
    let tls = resolve("postgres://sp@%2Frun%2Fpostgresql/sp?sslmode=require", None).unwrap();
    assert_eq!(tls.mode, SslMode::Require);
    assert_eq!(
        tls.driver_url,
        "postgres://sp@%2Frun%2Fpostgresql/sp?sslmode=disable"
    );
    let tls = resolve("postgres://sp@%2Frun%2Fpostgresql/sp", None).unwrap();
    assert_eq!(
        tls.driver_url,
        "postgres://sp@%2Frun%2Fpostgresql/sp?sslmode=disable"
    );
}

#[test]
fn verifying_modes_without_a_ca_and_conflicting_cas_are_refused() {
    let err = resolve("postgres://db/sp?sslmode=verify-full", None).unwrap_err();
    assert!(err.contains("database_ca_file"), "{err}");
    let err = resolve(
        "postgres://db/sp?sslmode=verify-full&sslrootcert=/a.pem",
        Some(Path::new("/b.pem")),
    )
    .unwrap_err();
    assert!(err.contains("differ"), "{err}");
    let err = resolve("postgres://db/sp?sslrootcert=ca.pem", None).unwrap_err();
    assert!(err.contains("absolute"), "{err}");
    let err = resolve("postgres://db/sp?sslmode=verify", None).unwrap_err();
    assert!(err.contains("verify-full"), "{err}");
}

#[test]
fn local_hosts() {
    for host in [
        "/run/postgresql",
        "localhost",
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "[::1]",
    ] {
        assert!(is_local_host(host), "{host}");
    }
    for host in [
        "192.0.2.1",
        "db.example",
        "10.0.0.1",
        "::2",
        "localhost.example",
    ] {
        assert!(!is_local_host(host), "{host}");
    }
}

#[test]
fn plain_text_to_a_remote_host_is_refused_unless_allowed() {
    for url in [
        "postgres://sp:hunter2@192.0.2.1/sp",
        "postgres://sp:hunter2@192.0.2.1/sp?sslmode=disable",
        "postgres://sp:hunter2@192.0.2.1/sp?sslmode=prefer",
        "postgres://sp@localhost/sp?hostaddr=192.0.2.1",
        "postgres://sp@localhost,192.0.2.1/sp",
    ] {
        let err = check(url, None, false).unwrap_err();
        assert!(
            err.contains("192.0.2.1") && err.contains("database_plaintext_ok"),
            "{url}: {err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(check(url, None, true), Ok(()), "{url}");
    }
    for url in [
        "postgres://sp@%2Frun%2Fpostgresql/sp",
        "postgres://sp@localhost/sp",
        "postgres://sp@127.0.0.1:5433/sp?sslmode=disable",
        "postgres://sp@[::1]/sp",
        "postgres://sp@192.0.2.1/sp?sslmode=require",
    ] {
        assert_eq!(check(url, None, false), Ok(()), "{url}");
    }
}

#[test]
fn the_ca_file_must_be_a_readable_pem_bundle() {
    let ca = ca();
    let url = "postgres://sp@192.0.2.1/sp?sslmode=verify-full";
    assert_eq!(check(url, Some(ca.path()), false), Ok(()));
    let err = check(url, Some(Path::new("/nonexistent/ca.pem")), false).unwrap_err();
    assert!(
        err.contains("database_ca_file") && err.contains("/nonexistent/ca.pem"),
        "{err}"
    );
    let garbage = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(garbage.path(), "not a certificate").unwrap();
    let err = check(url, Some(garbage.path()), false).unwrap_err();
    assert!(err.contains("no PEM certificate"), "{err}");
}

#[test]
fn a_url_the_driver_cannot_read_is_refused_without_echoing_it() {
    let err = check(
        "postgres://sp:hunter2@db/sp?sslmode=require&nonsense=1",
        None,
        false,
    )
    .unwrap_err();
    assert!(err.contains("nonsense"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// The start-up read of the settings refuses what the rule refuses, naming the file
/// and the line; a bad `database_ca_file` value too (its default would be no CA).
#[test]
fn the_daemon_does_not_start_on_refused_database_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db.yaml");
    let cases = [
        (
            "saltpeter_config:\n  database_url: postgres://sp:hunter2@192.0.2.1/sp\n",
            "database_plaintext_ok",
        ),
        (
            "saltpeter_config:\n  database_url: postgres://sp@192.0.2.1/sp?sslmode=verify-full\n  \
             database_ca_file: ca.pem\n",
            "not an absolute path",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&file, text).unwrap();
        let err = crate::config::load_settings(dir.path())
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"))
            .to_string();
        assert!(
            err.contains(expected) && err.contains("db.yaml, line "),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
    std::fs::write(
        &file,
        "saltpeter_config:\n  database_url: postgres://sp@192.0.2.1/sp\n  \
         database_plaintext_ok: true\n",
    )
    .unwrap();
    let settings = crate::config::load_settings(dir.path()).expect("allowed explicitly");
    assert!(settings.database_plaintext_ok);
}
