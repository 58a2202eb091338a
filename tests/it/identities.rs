//! Named API identities with roles against a real daemon: viewer, operator and admin
//! over HTTP and `/ws`, their names in the audit trail (also of a request that waited for
//! start-up), the throttle of wrong credentials (right ones always pass), and the
//! Origin/Host checks that remain with `api_auth: none`.

use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tungstenite::client::IntoClientRequest;

use std::io::Write;

use crate::api::client::{Conn, Resp, request};
use crate::api::{Ws, next_msg, start_with, ws_send};
use crate::util::*;

const VIEWER: &str = "viewer-token-1";
const OPERATOR: &str = "operator-token-2";
const ADMIN: &str = "admin-token-3";

fn sha(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn identities_config() -> String {
    format!(
        "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  heartbeat: 1\n  \
         pickup_timeout: 5\n  hello_timeout: 2\n  api_tokens:\n    \
         - {{name: vera, role: viewer, token_sha256: {}}}\n    \
         - {{name: otto, role: operator, token_sha256: {}}}\n    \
         - {{name: ada, role: admin, token_sha256: {}}}\n",
        sha(VIEWER),
        sha(OPERATOR),
        sha(ADMIN)
    )
}

const JOBS: &str = "idgreet:\n  schedule: '@daily'\n  targets: [r1]\n  command: 'echo hi'\n\
                    idgreet2:\n  schedule: '@daily'\n  targets: [r2]\n  command: 'echo hi'\n\
                    idgreet3:\n  schedule: '@daily'\n  targets: [r3]\n  command: 'echo hi'\n";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn events(d: &Daemon) -> String {
    d.ctl_json(&["events"]).to_string()
}

fn ws_as(port: u16, token: &str) -> Ws {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("Authorization", bearer(token).parse().expect("header"));
    tungstenite::client(req, stream).expect("handshake").0
}

#[test]
fn roles_over_http_and_ws_with_names_in_the_audit_trail() {
    let (d, port) = start_with(&identities_config(), JOBS);
    let (v, o, a) = (bearer(VIEWER), bearer(OPERATOR), bearer(ADMIN));
    let as_ = |t: &str| [("Authorization", t.to_string())];
    let call = |method: &str, path: &str, token: &str| {
        let h = as_(token);
        let headers: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        request(port, method, path, &headers, b"")
    };

    // Viewer: reads, but neither runs nor changes maintenance.
    assert_eq!(call("GET", "/api/v1/jobs", &v).status, 200);
    let refused = call("POST", "/api/v1/jobs/idgreet/run", &v);
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(
        refused.text().contains("vera has the viewer role"),
        "{}",
        refused.text()
    );
    assert_eq!(call("GET", "/api/v1/maintenance", &v).status, 200);
    // Operator: runs.
    let ran = call("POST", "/api/v1/jobs/idgreet/run", &o);
    assert_eq!(ran.status, 202, "{}", ran.text());
    // Admin: runs too.
    assert_eq!(call("POST", "/api/v1/jobs/idgreet2/run", &a).status, 202);
    assert_eq!(call("GET", "/api/v1/jobs", &bearer("nobody")).status, 401);

    // /ws: the viewer's command is refused in place, the operator's runs.
    let mut ws = ws_as(port, VIEWER);
    ws_send(&mut ws, json!({"run": "idgreet"}));
    let answer = (0..50)
        .filter_map(|_| next_msg(&mut ws))
        .find(|m| m.get("error").is_some())
        .expect("an error answer");
    assert!(
        answer["error"].as_str().unwrap().contains("viewer"),
        "{answer}"
    );
    let mut ws = ws_as(port, OPERATOR);
    ws_send(&mut ws, json!({"run": "idgreet3"}));

    let trail = wait_until("the audit names", HANG, || {
        let text = events(&d);
        let runs = text.matches("manual run requested (by api:otto)").count();
        (runs >= 2 && text.contains("(by api:ada)")).then_some(text)
    });
    assert!(
        !trail.contains("api:vera"),
        "refused requests do not run: {trail}"
    );
}

/// One request on a fresh connection from `src` (a loopback address of its own).
fn from(
    src: Ipv4Addr,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    Conn::from_stream(connect_from(src, port)).send(method, path, headers, body)
}

/// The throttle holds back wrong credentials only: after 5 wrong tokens from an address,
/// the right token, a valid session cookie, a `/metrics` scrape, a login and a `/ws`
/// handshake from it are served, while every wrong credential (token, forged cookie,
/// login) gets 429 for the rest of the minute.
#[test]
fn wrong_credentials_are_throttled_and_right_ones_pass() {
    let (_d, port) = start_with(&identities_config(), JOBS);
    let ct = ("Content-Type", "application/json");
    let addr = Ipv4Addr::new(127, 0, 0, 31);
    // A dashboard session opened before the guessing starts.
    let body = json!({ "token": VIEWER }).to_string();
    let login = from(addr, port, "POST", "/api/v1/login", &[ct], body.as_bytes());
    assert_eq!(login.status, 200, "{}", login.text());
    let cookie = login
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    for _ in 0..5 {
        let guess = from(
            addr,
            port,
            "POST",
            "/api/v1/login",
            &[ct],
            br#"{"token":"guess"}"#,
        );
        assert_eq!(guess.status, 401, "{}", guess.text());
    }
    let wrong = [("Authorization", "Bearer guess")];
    let held = from(addr, port, "GET", "/api/v1/jobs", &wrong, b"");
    assert_eq!(held.status, 429, "{}", held.text());
    assert_eq!(held.header("retry-after"), Some("60"));

    let right = bearer(VIEWER);
    let right = [("Authorization", right.as_str())];
    let r = from(addr, port, "GET", "/api/v1/jobs", &right, b"");
    eprintln!("the right token after 5 wrong ones: {}", r.status);
    assert_eq!(r.status, 200, "{}", r.text());
    let c = [("Cookie", cookie.as_str())];
    assert_eq!(from(addr, port, "GET", "/api/v1/jobs", &c, b"").status, 200);
    let metrics = from(addr, port, "GET", "/metrics", &right, b"");
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    assert!(metrics.text().contains("saltpeter_"), "{}", metrics.text());
    let again = from(addr, port, "POST", "/api/v1/login", &[ct], body.as_bytes());
    assert_eq!(again.status, 200, "{}", again.text());
    let upgrade = |auth: &'static str| {
        let headers = [
            ("Authorization", auth),
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        from(addr, port, "GET", "/ws", &headers, b"").status
    };
    assert_eq!(upgrade("Bearer viewer-token-1"), 101);

    // Wrong ones still wait, whatever the door.
    assert_eq!(
        from(addr, port, "GET", "/api/v1/jobs", &wrong, b"").status,
        429
    );
    let forged = [("Cookie", "sp_session=v1:9999999999:00:ada:00")];
    assert_eq!(
        from(addr, port, "GET", "/api/v1/jobs", &forged, b"").status,
        429
    );
    let guess = from(
        addr,
        port,
        "POST",
        "/api/v1/login",
        &[ct],
        br#"{"token":"guess"}"#,
    );
    assert_eq!(guess.status, 429, "{}", guess.text());
    assert_eq!(upgrade("Bearer guess"), 429);
    let scrape = from(addr, port, "GET", "/metrics", &wrong, b"");
    assert_eq!(scrape.status, 429, "{}", scrape.text());
    // Another address is not held back.
    let other = Ipv4Addr::new(127, 0, 0, 32);
    assert_eq!(
        from(other, port, "GET", "/api/v1/jobs", &wrong, b"").status,
        401
    );
}

#[test]
fn session_cookie_is_random_and_logout_revokes_it() {
    let (_d, port) = start_with(&identities_config(), JOBS);
    let ct = ("Content-Type", "application/json");
    let body = json!({ "token": OPERATOR }).to_string();
    let login = || {
        let r = request(port, "POST", "/api/v1/login", &[ct], body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("set-cookie").expect("cookie").to_string()
    };
    let (first, second) = (login(), login());
    let cookie = first.split(';').next().unwrap().to_string();
    assert_ne!(
        cookie,
        second.split(';').next().unwrap(),
        "random per login"
    );
    for attr in ["HttpOnly", "SameSite=Strict", "Max-Age="] {
        assert!(first.contains(attr), "{first}");
    }
    assert!(
        !first.contains("Secure"),
        "plain port: no Secure (the test base has tls: false)"
    );
    let c = ("Cookie", cookie.as_str());
    assert_eq!(request(port, "GET", "/api/v1/jobs", &[c], b"").status, 200);
    assert_eq!(
        request(port, "POST", "/api/v1/logout", &[c], b"").status,
        204
    );
    assert_eq!(
        request(port, "GET", "/api/v1/jobs", &[c], b"").status,
        401,
        "revoked"
    );
}

#[test]
fn open_api_refuses_cross_origin_changes() {
    let open = "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_auth: none\n";
    let (d, port) = start_with(open, JOBS);
    // What a web page elsewhere makes the operator's browser send: refused.
    let cross = request(
        port,
        "POST",
        "/api/v1/jobs/idgreet/run",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        b"x",
    );
    assert_eq!(cross.status, 403, "{}", cross.text());
    // A DNS name rebound to 127.0.0.1: the Host is not a loopback name.
    let mut raw = Conn::open(port);
    raw.stream
        .write_all(
            b"POST /api/v1/jobs/idgreet/run HTTP/1.1\r\nHost: evil.example:1\r\n\
              Content-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .expect("send");
    let rebound = raw.read_response(false).expect("an answer");
    assert_eq!(rebound.status, 403, "{}", rebound.text());
    let ws_cross = request(
        port,
        "GET",
        "/ws",
        &[
            ("Origin", "http://evil.example"),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ],
        b"",
    );
    assert_eq!(ws_cross.status, 403);
    // The same request from this origin (or from curl, with no Origin) works.
    let same = request(
        port,
        "POST",
        "/api/v1/jobs/idgreet/run",
        &[("Origin", "http://127.0.0.1")],
        b"",
    );
    assert_eq!(same.status, 202, "{}", same.text());
    let runs: Vec<Value> = d.wait_final_runs("idgreet", 1);
    assert_eq!(runs.len(), 1, "only the same-origin request ran");
    assert!(events(&d).contains("(by api:anonymous)"));
}

#[test]
fn webhook_paths_are_shown_to_nobody() {
    let jobs = "hooked:\n  schedule: '@yearly'\n  targets: [w1]\n  command: 'exit 1'\n  \
                notify:\n    webhook: http://127.0.0.1:1/hooks/T0/secret-path\n";
    let (d, port) = start_with(&identities_config(), jobs);
    d.run_wait("hooked");
    let list = |token: &str| {
        let auth = bearer(token);
        request(
            port,
            "GET",
            "/api/v1/deliveries",
            &[("Authorization", auth.as_str())],
            b"",
        )
        .text()
    };
    // An admin, a viewer and the admin socket see the scheme and host only.
    let admin = wait_until("the delivery listed", Duration::from_secs(60), || {
        let text = list(ADMIN);
        text.contains("http://127.0.0.1:1/…").then_some(text)
    });
    assert!(!admin.contains("secret-path"), "{admin}");
    let viewer = list(VIEWER);
    assert!(viewer.contains("http://127.0.0.1:1/…"), "{viewer}");
    assert!(!viewer.contains("secret-path"), "{viewer}");
    let ctl = d.ctl_json(&["deliveries"]).to_string();
    assert!(!ctl.contains("secret-path"), "{ctl}");
}

/// A change asked over the API while start-up still loads what it depends on waits for
/// start-up (`Boot::park`), and is then made as the identity that asked: the audit trail
/// names `api:otto`, not saltpeterctl.
#[test]
fn a_request_parked_during_start_up_keeps_its_identity() {
    let mut d = Daemon::start(&[("01-api.yaml", &identities_config()), ("jobs.yaml", JOBS)]);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit().success(), "{}", d.log_tail(20));
    // Start-up cannot read `meta` (a view that fails on every row) and asks again every
    // second: the start-up hold lasts until the table is back.
    let db = rusqlite::Connection::open(d.state_dir().join("saltpeter.db")).expect("open db");
    db.execute_batch(
        "ALTER TABLE meta RENAME TO meta_kept;
         CREATE VIEW meta AS SELECT abs(-9223372036854775808) AS key, '' AS value;",
    )
    .expect("hide meta");
    d.start_again();
    wait_until("start-up to fail a load", HANG, || {
        d.log_text()
            .contains("start-up could not load")
            .then_some(())
    });
    let port = d.ctl_json(&["status"])["api_port"]
        .as_u64()
        .expect("api_port") as u16;
    let auth = bearer(OPERATOR);
    let mut c = Conn::open(port);
    c.stream
        .write_all(&crate::api::client::request_bytes(
            "PUT",
            "/api/v1/maintenance",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            br#"{"add": "parked1"}"#,
        ))
        .expect("send");
    // Parked: no answer while start-up holds.
    c.stream
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    let early = std::io::Read::read(&mut c.stream, &mut byte);
    assert!(early.is_err(), "answered during start-up: {early:?}");
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    db.execute_batch("DROP VIEW meta; ALTER TABLE meta_kept RENAME TO meta;")
        .expect("bring meta back");
    let r = c
        .read_response(false)
        .expect("an answer once start-up is done");
    assert_eq!(r.status, 200, "{}", r.text());
    let trail = wait_until("the maintenance event", HANG, || {
        let e = events(&d);
        e.contains("parked1 in maintenance").then_some(e)
    });
    assert!(
        trail.contains("parked1 in maintenance (by api:otto)"),
        "{trail}"
    );
    assert!(!trail.contains("by saltpeterctl"), "{trail}");
}
