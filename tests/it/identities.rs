//! Named API identities with roles against a real daemon: viewer, operator and admin
//! over HTTP and `/ws`, their names in the audit trail, login throttling, and the
//! Origin/Host checks that remain with `api_auth: none`.

use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tungstenite::client::IntoClientRequest;

use std::io::Write;

use crate::api::client::{Conn, request};
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

#[test]
fn failed_logins_are_throttled_per_address() {
    let (_d, port) = start_with(&identities_config(), JOBS);
    let ct = ("Content-Type", "application/json");
    for _ in 0..5 {
        let r = request(
            port,
            "POST",
            "/api/v1/login",
            &[ct],
            br#"{"token":"guess"}"#,
        );
        assert_eq!(r.status, 401, "{}", r.text());
    }
    let body = json!({ "token": VIEWER }).to_string();
    let r = request(port, "POST", "/api/v1/login", &[ct], body.as_bytes());
    assert_eq!(r.status, 429, "even the right token waits: {}", r.text());
    // One throttle for every credential: a Bearer token from that address waits too
    // (api/guard.rs covers the cookie and /ws).
    let auth = bearer(VIEWER);
    let held = request(
        port,
        "GET",
        "/api/v1/jobs",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(held.status, 429, "{}", held.text());
    assert_eq!(held.header("retry-after"), Some("60"));
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
