//! Notifications over TLS: an HTTPS receiver and an SMTP server with STARTTLS (and one
//! with TLS from the first byte) started by the test, with certificates of a CA the test
//! makes and the daemon trusts through `notify_ca_file`; a receiver whose certificate that
//! CA did not sign is refused, and the failure is recorded with its cause.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;

use crate::util::*;

/// A CA, a server certificate it signed for 127.0.0.1, and the CA's PEM.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    )
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "saltpeter test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    Pki {
        ca_pem: ca_cert.pem(),
        server: server_config(vec![leaf.der().clone()], key),
    }
}

/// A server certificate no configured CA signed.
fn stranger() -> Arc<rustls::ServerConfig> {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.signing_key.serialize_der()));
    server_config(vec![c.cert.der().clone()], key)
}

fn tls(tcp: TcpStream, config: &Arc<rustls::ServerConfig>) -> Conn {
    let conn = rustls::ServerConnection::new(Arc::clone(config)).unwrap();
    Conn::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// One request the HTTPS server received: its headers (names in lower case) and body.
type Post = (Vec<(String, String)>, String);

/// An HTTPS server: each request's headers and body go to the channel; answers 200.
fn https_server(config: Arc<rustls::ServerConfig>) -> (u16, std::sync::mpsc::Receiver<Post>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(HANG));
            let mut r = BufReader::new(tls(stream, &config));
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                continue; // the handshake failed (a refused certificate)
            }
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 {
                    break;
                }
                let Some((n, v)) = h.trim_end().split_once(':') else {
                    break;
                };
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            if r.read_exact(&mut body).is_err() {
                continue;
            }
            let w = r.get_mut();
            let _ =
                w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            let _ = w.flush();
            if let Conn::Tls(s) = w {
                s.conn.send_close_notify();
                let _ = s.flush();
            }
            let _ = tx.send((headers, String::from_utf8_lossy(&body).into_owned()));
        }
    });
    (port, rx)
}

fn events(d: &Daemon, kind: &str) -> Vec<Value> {
    d.ctl_json(&["events", "--kind", kind, "--limit", "500"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn hmac_hex(key: &str, body: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let bytes = mac.finalize().into_bytes();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn an_https_webhook_is_signed_and_a_wrong_certificate_is_refused() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("private-ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (good, posts) = https_server(Arc::clone(&pki.server));
    let (bad, _) = https_server(stranger());
    let config = format!("saltpeter_config:\n  notify_ca_file: {}\n", path_str(&ca));
    let jobs = format!(
        "tlsjob:\n  schedule: '@yearly'\n  targets: [t1]\n  command: 'echo over tls; exit 4'\n  notify:\n    \
         - webhook: https://127.0.0.1:{good}/hook\n      secret: tls-hmac-key\n    \
         - webhook: https://127.0.0.1:{bad}/stranger\n"
    );
    let d = Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-tls.yaml", &config),
        ("jobs.yaml", &jobs),
    ]);
    let (run, code) = d.run_wait("tlsjob");
    assert_eq!(code, 1, "{run}");
    let (headers, body) = posts
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("no HTTPS post arrived\n{}", d.log_text()));
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["run"], run["id"]);
    assert_eq!(json["targets"][0]["output_tail"], "over tls\n");
    let sig = headers
        .iter()
        .find(|(n, _)| n == "x-saltpeter-signature")
        .map(|(_, v)| v.clone());
    assert_eq!(
        sig,
        Some(format!("sha256={}", hmac_hex("tls-hmac-key", &body)))
    );
    // The stranger's certificate: a failed attempt whose cause names the certificate.
    let failed = wait_until("the refused delivery recorded", HANG, || {
        let e = events(&d, "notification_failed");
        (!e.is_empty()).then_some(e)
    });
    let why = failed[0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("certificate"), "{why}");
    assert!(
        why.contains(&format!("127.0.0.1:{bad}")) || why.contains("127.0.0.1"),
        "{why}"
    );
    let list = d.ctl_json(&["deliveries", "--job", "tlsjob"]);
    let stranger = list
        .as_array()
        .unwrap()
        .iter()
        .find(|x| {
            // Shown as its scheme and host (its path is never shown).
            x["destination"]
                .as_str()
                .unwrap_or("")
                .contains(&format!(":{bad}/…"))
        })
        .cloned()
        .expect("the stranger's delivery");
    assert_eq!(stranger["state"], "pending", "retried later: {stranger}");
    assert!(
        stranger["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("certificate"),
        "{stranger}"
    );
    wait_until("the good one delivered", HANG, || {
        let e = events(&d, "notification_delivered");
        e.iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("HTTP 200"))
            .then_some(())
    });
}

/// An SMTP server: STARTTLS offered in clear (or TLS from the first byte), AUTH offered
/// only under TLS with `mechanisms`; each session's commands (a `[tls]` mark once under
/// TLS) and DATA go to the channel.
fn smtp_server(
    config: Arc<rustls::ServerConfig>,
    implicit: bool,
    mechanisms: &'static str,
) -> (u16, std::sync::mpsc::Receiver<(Vec<String>, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(HANG));
            let conn = if implicit {
                tls(stream, &config)
            } else {
                Conn::Plain(stream)
            };
            let mut secure = implicit;
            let mut r = BufReader::new(conn);
            let mut commands = Vec::new();
            let mut data = String::new();
            let _ = r.get_mut().write_all(b"220 test.example ESMTP\r\n");
            let _ = r.get_mut().flush();
            let mut login_step = 0;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let cmd = line.trim_end().to_string();
                commands.push(if secure {
                    format!("[tls] {cmd}")
                } else {
                    cmd.clone()
                });
                let upper = cmd.to_ascii_uppercase();
                let answer: Vec<u8> = if login_step > 0 {
                    login_step -= 1;
                    if login_step == 0 {
                        b"235 welcome\r\n".to_vec()
                    } else {
                        b"334 UGFzc3dvcmQ6\r\n".to_vec()
                    }
                } else if upper.starts_with("EHLO") {
                    if secure {
                        format!("250-test.example\r\n250 AUTH {mechanisms}\r\n").into_bytes()
                    } else {
                        b"250-test.example\r\n250 STARTTLS\r\n".to_vec()
                    }
                } else if upper == "STARTTLS" {
                    let _ = r.get_mut().write_all(b"220 go ahead\r\n");
                    let _ = r.get_mut().flush();
                    let Conn::Plain(tcp) = r.into_inner() else {
                        break;
                    };
                    r = BufReader::new(tls(tcp, &config));
                    secure = true;
                    continue;
                } else if upper.starts_with("AUTH PLAIN ") {
                    b"235 welcome\r\n".to_vec()
                } else if upper == "AUTH LOGIN" {
                    login_step = 2;
                    b"334 VXNlcm5hbWU6\r\n".to_vec()
                } else if upper == "DATA" {
                    let _ = r.get_mut().write_all(b"354 go on\r\n");
                    let _ = r.get_mut().flush();
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == ".\r\n" {
                            break;
                        }
                        data.push_str(&l);
                    }
                    b"250 queued as 77\r\n".to_vec()
                } else if upper == "QUIT" {
                    let _ = r.get_mut().write_all(b"221 bye\r\n");
                    let _ = r.get_mut().flush();
                    break;
                } else {
                    b"250 ok\r\n".to_vec()
                };
                let _ = r.get_mut().write_all(&answer);
                let _ = r.get_mut().flush();
            }
            let _ = tx.send((commands, data));
        }
    });
    (port, rx)
}

fn mail_daemon(ca: &std::path::Path, port: u16, tls: &str) -> Daemon {
    let config = format!(
        "saltpeter_config:\n  smtp: 127.0.0.1:{port}\n  smtp_tls: {tls}\n  smtp_user: sp-user\n  \
         smtp_password: 'mail-password-never-logged'\n  notify_ca_file: {}\n  \
         mail_from: saltpeter@test.example\n  notify:\n    - on: failure\n      email: ops@example.com\n",
        path_str(ca)
    );
    let job =
        "mailjob:\n  schedule: '@yearly'\n  targets: [m1]\n  command: 'echo mail body; exit 2'\n";
    Daemon::start(&[
        ("01-fast.yaml", FAST),
        ("02-mail.yaml", &config),
        ("jobs.yaml", job),
    ])
}

#[test]
fn mail_goes_through_starttls_with_a_login() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (port, mails) = smtp_server(Arc::clone(&pki.server), false, "LOGIN PLAIN");
    let d = mail_daemon(&ca, port, "starttls");
    let (run, _) = d.run_wait("mailjob");
    let (commands, data) = mails
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("no mail arrived\n{}", d.log_text()));
    let plain = saltpeter::base64(b"\0sp-user\0mail-password-never-logged");
    let expected = [
        "STARTTLS".to_string(),
        format!("[tls] AUTH PLAIN {plain}"),
        "[tls] MAIL FROM:<saltpeter@test.example>".to_string(),
        "[tls] RCPT TO:<ops@example.com>".to_string(),
    ];
    for e in &expected {
        assert!(commands.contains(e), "{e} missing from {commands:?}");
    }
    assert!(
        commands.iter().position(|c| c == "STARTTLS")
            < commands.iter().position(|c| c.contains("AUTH")),
        "{commands:?}"
    );
    assert!(data.contains(&format!("run {}", run["id"])), "{data}");
    assert!(data.contains("mail body"), "{data}");
    wait_until("the delivered event", HANG, || {
        events(&d, "notification_delivered")
            .iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("queued as 77"))
            .then_some(())
    });
    assert!(!d.log_text().contains("mail-password-never-logged"));
    let jobs = d.ctl(&["show", "mailjob"]);
    assert!(!String::from_utf8_lossy(&jobs.stdout).contains("mail-password-never-logged"));
}

#[test]
fn mail_goes_through_implicit_tls_with_auth_login() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (port, mails) = smtp_server(Arc::clone(&pki.server), true, "LOGIN");
    let d = mail_daemon(&ca, port, "tls");
    d.run_wait("mailjob");
    let (commands, data) = mails
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("no mail arrived\n{}", d.log_text()));
    let user = saltpeter::base64(b"sp-user");
    let password = saltpeter::base64(b"mail-password-never-logged");
    let at = commands.iter().position(|c| c == "[tls] AUTH LOGIN");
    assert!(at.is_some(), "{commands:?}");
    let at = at.unwrap();
    assert_eq!(commands[at + 1], format!("[tls] {user}"));
    assert_eq!(commands[at + 2], format!("[tls] {password}"));
    assert!(
        commands.iter().all(|c| c.starts_with("[tls] ")),
        "{commands:?}"
    );
    assert!(data.contains("mail body"), "{data}");
}

#[test]
fn a_missing_ca_file_or_a_bad_smtp_setting_is_an_error_at_its_line() {
    let (passed, text) = config_check(
        "config.yaml",
        "saltpeter_config:\n  notify_ca_file: /nonexistent/ca.pem\n  smtp_tls: sometimes\n  smtp: 'smtp://mail.example'\n",
    );
    assert!(!passed, "{text}");
    assert!(
        text.contains("config.yaml:2") && text.contains("/nonexistent/ca.pem"),
        "{text}"
    );
    assert!(
        text.contains("config.yaml:3") && text.contains("sometimes"),
        "{text}"
    );
    assert!(
        text.contains("config.yaml:4") && text.contains("smtp://mail.example"),
        "{text}"
    );
}
