//! Credential guessing on the API port: every way of presenting a credential (the login
//! form, `Authorization: Bearer`, the session cookie, a `/ws` handshake) is counted by
//! one throttle per client address, so a guesser gets 429 whatever door it knocks on,
//! while a right credential from that address is still served.

use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use super::client::Conn;
use super::*;

/// Bearer guesses on one keep-alive connection for `for_how_long`: (401s, 429s).
fn guess_bearer(c: &mut Conn, for_how_long: Duration) -> (u64, u64) {
    let (mut unauthorized, mut throttled) = (0, 0);
    let started = Instant::now();
    let mut i = 0u64;
    while started.elapsed() < for_how_long {
        i += 1;
        let guess = format!("Bearer guess-{i}");
        match c
            .send("GET", "/api/v1/status", &[("Authorization", &guess)], b"")
            .status
        {
            401 => unauthorized += 1,
            429 => throttled += 1,
            other => panic!("a wrong token got {other}"),
        }
    }
    (unauthorized, throttled)
}

#[test]
fn bearer_cookie_ws_and_login_guesses_share_one_throttle() {
    let (_d, port) = start("");
    let mut c = Conn::from_stream(connect_from(Ipv4Addr::new(127, 0, 0, 7), port));
    let (wrong, throttled) = guess_bearer(&mut c, Duration::from_secs(1));
    eprintln!("bearer guesses in 1 s: {wrong} answered 401, {throttled} answered 429");
    assert!(wrong <= 5, "{wrong} guesses were checked in a second");
    assert!(throttled > 0);
    // The right token from that address is served, and so is a login with it; a wrong
    // login and a /ws handshake with a wrong token wait.
    let right = c.send("GET", "/api/v1/status", &[AUTH], b"");
    assert_eq!(right.status, 200, "{}", right.text());
    let mut login = |token: &str| {
        c.send(
            "POST",
            "/api/v1/login",
            &[("Content-Type", "application/json")],
            format!("{{\"token\": \"{token}\"}}").as_bytes(),
        )
    };
    assert_eq!(login(TOKEN).status, 200);
    let wrong = login("nope");
    assert_eq!(wrong.status, 429);
    assert_eq!(wrong.code(), "too_many_requests");
    let ws = c.send(
        "GET",
        "/ws",
        &[
            ("Authorization", "Bearer nope"),
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ],
        b"",
    );
    assert_eq!(ws.status, 429);

    // Another address is not held back; its forged cookies and /ws guesses count too.
    let other = Ipv4Addr::new(127, 0, 0, 8);
    let mut o = Conn::from_stream(connect_from(other, port));
    assert_eq!(o.send("GET", "/api/v1/status", &[AUTH], b"").status, 200);
    for i in 0..5 {
        let cookie = format!("sp_session=v1:9999999999:{i:032x}:admin:{i:064x}");
        let r = o.send("GET", "/api/v1/status", &[("Cookie", &cookie)], b"");
        assert_eq!(r.status, 401, "forged cookie {i}");
    }
    let r = o.send(
        "GET",
        "/api/v1/status",
        &[("Cookie", "sp_session=x:y")],
        b"",
    );
    assert_eq!(r.status, 429, "the sixth forged cookie");
    // A third address guessing through /ws handshakes.
    let third = Ipv4Addr::new(127, 0, 0, 9);
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let mut t = Conn::from_stream(connect_from(third, port));
        let r = t.send(
            "GET",
            "/ws",
            &[
                ("Authorization", "Bearer wrong"),
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ],
            b"",
        );
        statuses.push(r.status);
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429]);
    // Asking without any credential is not a guess.
    let mut n = Conn::from_stream(connect_from(Ipv4Addr::new(127, 0, 0, 10), port));
    for _ in 0..10 {
        assert_eq!(n.send("GET", "/api/v1/status", &[], b"").status, 401);
    }
    assert_eq!(n.send("GET", "/api/v1/status", &[AUTH], b"").status, 200);
}

/// One raw request on a fresh connection.
fn raw(port: u16, text: &str) -> client::Resp {
    use std::io::Write;
    let mut c = Conn::open(port);
    c.stream.write_all(text.as_bytes()).expect("send");
    c.read_response(false).expect("an answer")
}

#[test]
fn open_api_answers_only_loopback_hosts_and_one_host_header() {
    let open_cfg = "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_auth: none\n";
    let (_d, port) = start_with(open_cfg, "");
    let get = |path: &str, host: &str| {
        raw(
            port,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        )
    };
    for path in ["/api/v1/jobs", "/api/v1/status", "/metrics", "/", "/app.js"] {
        assert_eq!(
            get(path, &format!("127.0.0.1:{port}")).status,
            200,
            "{path}"
        );
        assert_eq!(
            get(path, &format!("localhost:{port}")).status,
            200,
            "{path}"
        );
        let rebound = get(path, &format!("evil.example:{port}"));
        assert_eq!(rebound.status, 403, "{path}: {}", rebound.text());
    }
    let v6 = get("/api/v1/jobs", &format!("[::1]:{port}"));
    assert_eq!(v6.status, 200);
    // Two Host headers: refused whichever comes first.
    for (a, b) in [("127.0.0.1", "evil.example"), ("evil.example", "127.0.0.1")] {
        let r = raw(
            port,
            &format!("GET /api/v1/jobs HTTP/1.1\r\nHost: {a}\r\nHost: {b}\r\n\r\n"),
        );
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("Host"), "{}", r.text());
    }
}

#[test]
fn output_offsets_past_any_output_are_bad_requests() {
    let (d, port) =
        start("offs:\n  schedule: '@yearly'\n  targets: [off1]\n  command: 'echo hello'\n");
    let (run, code) = d.run_wait("offs");
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_u64().expect("run id");
    let path = |q: &str| format!("/api/v1/runs/{id}/targets/off1/output?{q}");
    for q in [
        "from=18446744073709551615",
        "from=9223372036854775808",
        "tail=18446744073709551615",
    ] {
        let r = get(port, &path(q));
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        assert!(r.text().contains("past any output"), "{}", r.text());
    }
    let edge = get(port, &path("from=9223372036854775807"));
    assert_ne!(edge.status, 500, "{}", edge.text());
    assert_eq!(get(port, &path("from=0")).json()["data"], "hello\n");
}

#[test]
fn a_ws_opened_with_a_session_cannot_run_jobs_after_logout() {
    use tungstenite::client::IntoClientRequest;
    let (d, port) =
        start("after_logout:\n  schedule: '@yearly'\n  targets: [lo1]\n  command: 'echo ran'\n");
    let login = client::request(
        port,
        "POST",
        "/api/v1/login",
        &[("Content-Type", "application/json")],
        format!("{{\"token\": \"{TOKEN}\"}}").as_bytes(),
    );
    assert_eq!(login.status, 200, "{}", login.text());
    let cookie = login
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("Cookie", cookie.parse().expect("header"));
    let (mut ws, _) = tungstenite::client(req, stream).expect("/ws with the session cookie");
    assert_eq!(next_msg(&mut ws).expect("config")["type"], "config");

    let logout = client::request(port, "POST", "/api/v1/logout", &[("Cookie", &cookie)], b"");
    assert_eq!(logout.status, 204);
    ws_send(&mut ws, serde_json::json!({"run": "after_logout"}));
    // An error, then the end of the connection; never a run.
    let mut saw_error = false;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        match next_msg(&mut ws) {
            Some(m) if m.get("error").is_some() => saw_error = true,
            Some(_) => {}
            None => break,
        }
    }
    assert!(saw_error, "the /ws client is told its session ended");
    std::thread::sleep(Duration::from_secs(1));
    assert!(d.runs("after_logout").is_empty(), "no run was started");
}
