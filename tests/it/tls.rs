//! TLS on the wrapper port and the API, as a fresh install gets it (no `tls: false`):
//! real TLS clients (curl, openssl) against both ports, a job run end to end by a wrapper
//! pinning the daemon's self-signed certificate, a wrapper refused with a wrong pin, and
//! the start-up checks (plain text only on loopback, a missing certificate file).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api::TOKEN;
use crate::util::*;

/// Later files win: this turns the test base's `tls: false` back to the default.
pub fn tls_config(extra: &str) -> String {
    format!(
        "saltpeter_config:\n  tls: true\n  api_ws: true\n  api_ws_port: 0\n  api_token: {TOKEN}\n  \
         heartbeat: 1\n  pickup_timeout: 5\n  hello_timeout: 2\n{extra}"
    )
}

pub fn start_tls(jobs: &str) -> (Daemon, u16) {
    let d = Daemon::start(&[("01-tls.yaml", &tls_config("")), ("jobs.yaml", jobs)]);
    let port = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    (d, port)
}

/// `openssl x509 -fingerprint -sha256` of a PEM file, as lower-case hex.
fn file_fingerprint(path: &std::path::Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(path)
        .output()
        .expect("openssl x509");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split('=').nth(1).expect("fingerprint line").trim();
    hex.replace(':', "").to_lowercase()
}

/// The certificate a port serves, fingerprinted by openssl.
fn served_fingerprint(port: u16) -> String {
    let s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let out = s_client.wait_with_output().expect("s_client output");
    let pem = String::from_utf8_lossy(&out.stdout).to_string();
    let tmp = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(tmp.path(), &pem).expect("write pem");
    assert!(
        pem.contains("BEGIN CERTIFICATE"),
        "no certificate served: {pem}"
    );
    file_fingerprint(tmp.path())
}

fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

#[test]
fn tls_by_default_on_both_ports_and_wrappers_pin_it() {
    let (d, port) = start_tls(
        "tlshello:\n  schedule: '@daily'\n  targets: [t1]\n  \
         command: 'echo over-tls-$SP_MACHINE'\n  env:\n    SECRET_ENV: hunter2-never-shown\n",
    );
    let cert = d.state_dir().join("tls-cert.pem");
    let key = d.state_dir().join("tls-key.pem");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).expect("key").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the private key is the daemon's alone");
    let pin = file_fingerprint(&cert);
    assert_eq!(
        served_fingerprint(port),
        pin,
        "the API serves the state dir's certificate"
    );
    assert_eq!(
        served_fingerprint(d.wrapper_port()),
        pin,
        "so does the wrapper port"
    );

    // curl, trusting exactly this certificate.
    let url = format!("https://localhost:{port}/api/v1/jobs");
    let cafile = path_str(&cert).to_string();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, body) = curl(&["--cacert", &cafile, "-H", &auth, &url]);
    assert_eq!(code, 0, "curl over TLS: {body}");
    assert!(body.contains("\"tlshello\""), "{body}");
    // Plain HTTP on the TLS port gets no answer.
    let (_, plain) = curl(&[&format!("http://127.0.0.1:{port}/api/v1/jobs")]);
    assert!(!plain.contains("tlshello"), "{plain}");

    // A job end to end: the wrapper connects with wss:// and the pin main gave it.
    let (run, code) = d.run_wait("tlshello");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("id");
    assert_eq!(d.output(id, "t1"), "over-tls-t1\n");
    let log = d.log_text();
    assert!(log.contains(&format!("sha256 {pin}")), "{log}");
    assert!(!log.contains("hunter2-never-shown"));
}

#[test]
fn a_wrapper_refuses_a_certificate_that_is_not_pinned() {
    let (d, _port) =
        start_tls("tlsidle:\n  schedule: '@daily'\n  targets: [t1]\n  command: 'true'\n");
    let wrong = "00".repeat(32);
    let url = format!(
        "wss://127.0.0.1:{}/wrapper/v1#sha256={wrong}",
        d.wrapper_port()
    );
    let log = d.root.path().join("wrapper.log");
    let mut child = Command::new(WRAPPER)
        .env("SP_URL", &url)
        .env("SP_RUN", "999")
        .env("SP_MACHINE", "t1")
        .env("SP_TOKEN", "not-a-token")
        .env("SP_WRAPPER_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("wrapper");
    let deadline = Instant::now() + HANG;
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("not the pinned one") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(text.contains("not the pinned one"), "{text}");
    assert!(!text.contains("welcome"), "{text}");
}

#[test]
fn plain_text_only_on_loopback() {
    let mut d = Daemon::prepare(&[(
        "01-plain.yaml",
        "saltpeter_config:\n  tls: false\n  machines_ws_bind_addr: 0.0.0.0\n",
    )]);
    d.spawn();
    assert_eq!(d.wait_exit().code(), Some(2), "{}", d.log_text());
    assert!(
        d.log_text().contains("saltpeter_config.tls is false"),
        "{}",
        d.log_text()
    );
}

#[test]
fn a_missing_certificate_file_stops_the_start() {
    let mut d = Daemon::prepare(&[(
        "01-cert.yaml",
        "saltpeter_config:\n  tls: true\n  tls_cert: /nonexistent/sp-cert.pem\n  \
         tls_key: /nonexistent/sp-key.pem\n",
    )]);
    d.spawn();
    assert_eq!(d.wait_exit().code(), Some(2), "{}", d.log_text());
    assert!(
        d.log_text()
            .contains("cannot read TLS file /nonexistent/sp-cert.pem"),
        "{}",
        d.log_text()
    );
}
