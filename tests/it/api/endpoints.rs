//! Every endpoint of `/api/v1`, `/healthz`, `/metrics` and the dashboard's files, with
//! their error cases, and authentication.

use serde_json::json;

use super::client::{Conn, request};
use super::*;

fn jobs_yaml(machine: &str) -> String {
    format!(
        "greet:\n  schedule: '*/5 * * * *'\n  targets: [{machine}]\n  \
         command: 'printf \"hello from $SP_MACHINE\\n\"; printf \"second line\\n\"'\n  \
         env:\n    API_KEY: {SECRET}\n\
         failing:\n  schedule: '@yearly'\n  targets: [{machine}]\n  command: 'exit 3'\n\
         broken:\n  schedule: '61 * * * *'\n  targets: [{machine}]\n  command: 'true'\n"
    )
}

#[test]
fn api_endpoints_round_trip() {
    let (d, port) = start(&jobs_yaml("api1"));

    let health = request(port, "GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200, "{}", health.text());
    assert_eq!(health.json()["status"], "ok");

    let status = get(port, "/api/v1/status");
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["api_port"], port);
    assert_eq!(status.json()["jobs"], 3);

    let errors = get(port, "/api/v1/config/errors").json();
    let errors = errors["errors"].as_array().expect("errors").clone();
    assert!(
        errors.iter().any(|e| e.as_str().unwrap().contains("61")),
        "the broken job's error is listed: {errors:?}"
    );

    let jobs = get(port, "/api/v1/jobs").json();
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broken", "failing", "greet"]);
    let broken = &jobs[0];
    assert_eq!(broken["enabled"], false);
    assert!(broken["error"].is_string());

    let job = get(port, "/api/v1/jobs/greet?next=3");
    assert_eq!(job.status, 200, "{}", job.text());
    let job = job.json();
    assert_eq!(job["next_runs"].as_array().unwrap().len(), 3);
    assert_eq!(job["config"]["env"]["API_KEY"], "***");
    assert_eq!(job["config"]["min"], "*/5");
    assert_eq!(get(port, "/api/v1/jobs/nope").status, 404);
    assert_eq!(get(port, "/api/v1/jobs/greet?next=x").status, 400);

    // Run now, then the run with its targets and output.
    let started = post(port, "/api/v1/jobs/greet/run", b"");
    assert_eq!(started.status, 202, "{}", started.text());
    let run = started.json()["run"].as_u64().unwrap();
    let record = d.wait_run_final(run);
    assert_eq!(record["state"], "succeeded", "{record}");
    assert_eq!(post(port, "/api/v1/jobs/nope/run", b"").status, 404);
    let disabled = post(port, "/api/v1/jobs/broken/run", b"");
    assert_eq!(disabled.status, 409, "{}", disabled.text());
    assert_eq!(disabled.code(), "conflict");

    let one = get(port, &format!("/api/v1/runs/{run}")).json();
    assert_eq!(one["id"], run);
    assert_eq!(one["targets"][0]["machine"], "api1");
    assert_eq!(one["targets"][0]["exit_code"], 0);
    assert_eq!(get(port, "/api/v1/runs/999999").status, 404);
    assert_eq!(get(port, "/api/v1/runs/abc").status, 400);

    let out = get(port, &format!("/api/v1/runs/{run}/targets/api1/output")).json();
    assert_eq!(out["data"], "hello from api1\nsecond line\n");
    assert_eq!(out["total_bytes"], 28);
    assert_eq!(out["next_from"], 28);
    let tail = get(
        port,
        &format!("/api/v1/runs/{run}/targets/api1/output?tail=12"),
    )
    .json();
    assert_eq!(tail["data"], "second line\n");
    let range = get(
        port,
        &format!("/api/v1/runs/{run}/targets/api1/output?from=6&max_bytes=4"),
    )
    .json();
    assert_eq!(range["data"], "from");
    assert_eq!(range["next_from"], 10);
    let raw = get(
        port,
        &format!("/api/v1/runs/{run}/targets/api1/output?format=raw"),
    );
    assert_eq!(raw.header("content-type"), Some("application/octet-stream"));
    assert_eq!(raw.body, b"hello from api1\nsecond line\n");
    assert_eq!(raw.header("x-saltpeter-next-from"), Some("28"));
    assert_eq!(
        get(port, &format!("/api/v1/runs/{run}/targets/nobody/output")).status,
        404
    );
    assert_eq!(
        get(
            port,
            &format!("/api/v1/runs/{run}/targets/api1/output?format=xml")
        )
        .status,
        400
    );

    // Runs by filter, with paging.
    let failing_run = post(port, "/api/v1/jobs/failing/run", b"").json()["run"]
        .as_u64()
        .unwrap();
    d.wait_run_final(failing_run);
    let second = post(port, "/api/v1/jobs/greet/run", b"").json()["run"]
        .as_u64()
        .unwrap();
    d.wait_run_final(second);
    let all = get(port, "/api/v1/runs").json();
    let ids: Vec<u64> = all["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [second, failing_run, run], "newest first");
    let failed = get(port, "/api/v1/runs?state=failed").json();
    assert_eq!(failed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(failed["runs"][0]["job"], "failing");
    let page = get(port, "/api/v1/runs?job=greet&limit=1").json();
    assert_eq!(page["runs"][0]["id"], second);
    let next = page["next_before"].as_u64().expect("a next page");
    let page2 = get(
        port,
        &format!("/api/v1/runs?job=greet&limit=1&before={next}"),
    )
    .json();
    assert_eq!(page2["runs"][0]["id"], run);
    let future = get(port, "/api/v1/runs?since=now%2B1h").json();
    assert!(future["runs"].as_array().unwrap().is_empty());
    let past = get(port, "/api/v1/runs?until=now-1d").json();
    assert!(past["runs"].as_array().unwrap().is_empty());
    assert_eq!(get(port, "/api/v1/runs?state=weird").status, 400);
    assert_eq!(get(port, "/api/v1/runs?since=yesterday").status, 400);

    // Kills of what is not running.
    assert_eq!(
        post(port, &format!("/api/v1/runs/{run}/kill"), b"").status,
        404
    );
    assert_eq!(
        post(port, &format!("/api/v1/runs/{run}/targets/api1/kill"), b"").status,
        404
    );
    assert_eq!(post(port, "/api/v1/jobs/greet/kill", b"").status, 404);

    // Maintenance: read and changed at run time.
    let m = get(port, "/api/v1/maintenance");
    assert_eq!(m.status, 200, "{}", m.text());
    assert_eq!(m.json()["global"], false);
    let put = |body: &[u8]| {
        client::request(
            port,
            "PUT",
            "/api/v1/maintenance",
            &[AUTH, ("Content-Type", "application/json")],
            body,
        )
    };
    let change = put(br#"{"add": "db01"}"#);
    assert_eq!(change.status, 200, "{}", change.text());
    assert_eq!(change.json()["machines"][0]["machine"], "db01");
    assert_eq!(change.json()["machines"][0]["sources"][0], "runtime");
    let change = put(br#"{"global": true}"#);
    assert_eq!(change.json()["global"], true, "{}", change.text());
    assert_eq!(get(port, "/api/v1/maintenance").json()["global"], true);
    assert_eq!(put(br#"{"global": false}"#).json()["global"], false);
    assert_eq!(
        put(br#"{"remove": "db01"}"#).json()["machines"],
        serde_json::json!([])
    );
    assert_eq!(put(br#"{"frobnicate": 1}"#).status, 400);

    // Metrics.
    let metrics = get(port, "/metrics");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    let text = metrics.text();
    for line in [
        "saltpeter_runs_total{state=\"succeeded\"} 2",
        "saltpeter_runs_total{state=\"failed\"} 1",
        "saltpeter_run_duration_seconds_count 3",
        "saltpeter_wrappers_connected 0",
        "saltpeter_output_bytes_total 56",
        "# TYPE saltpeter_db_commit_seconds histogram",
        "# TYPE saltpeter_schedule_lateness_seconds histogram",
        "saltpeter_ws_clients 0",
        // Per job, labelled `job_name` (Prometheus keeps `job` for itself).
        "saltpeter_job_runs_total{job_name=\"greet\",state=\"succeeded\"} 2",
        "saltpeter_job_runs_total{job_name=\"failing\",state=\"failed\"} 1",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
    let gauge = |metric: &str, job: &str| -> Option<f64> {
        let prefix = format!("{metric}{{job_name=\"{job}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let success = gauge("saltpeter_job_last_success_timestamp_seconds", "greet").expect(&text);
    assert!((now - success).abs() < 600.0, "{success} vs {now}");
    assert!(gauge("saltpeter_job_last_failure_timestamp_seconds", "failing").is_some());
    assert_eq!(
        gauge("saltpeter_job_last_failure_timestamp_seconds", "greet"),
        None
    );
    assert!(gauge("saltpeter_job_last_duration_seconds", "failing").is_some_and(|d| d >= 0.0));
    assert!(
        !text.contains("job_name=\"broken\""),
        "a job that never ran has no series"
    );

    // The dashboard's files, unknown routes, wrong methods, HEAD, OPTIONS.
    let index = request(port, "GET", "/", &[], b"");
    assert_eq!(index.status, 200);
    assert!(index.text().contains("<title>Saltpeter</title>"));
    assert!(index.header("content-security-policy").is_some());
    assert!(
        index.header("access-control-allow-origin").is_none(),
        "no CORS"
    );
    assert_eq!(request(port, "GET", "/app.js", &[], b"").status, 200);
    assert_eq!(request(port, "GET", "/style.css", &[], b"").status, 200);
    let head = request(port, "HEAD", "/", &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let missing = get(port, "/api/v1/nothing");
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "not_found")
    );
    assert_eq!(request(port, "GET", "/nothing", &[AUTH], b"").status, 404);
    let wrong = client::request(port, "DELETE", "/api/v1/jobs", &[AUTH], b"");
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.header("allow"), Some("GET"));
    assert_eq!(get(port, "/api/v1/jobs/greet/run").status, 405);
    assert_eq!(request(port, "POST", "/healthz", &[], b"").status, 405);
    let options = request(
        port,
        "OPTIONS",
        "/api/v1/jobs",
        &[("Origin", "http://evil")],
        b"",
    );
    assert_eq!(options.status, 204);
    assert!(options.header("access-control-allow-origin").is_none());
    assert_eq!(get(port, "/ws").status, 426, "a plain GET of /ws");

    // Secrets: not in any answer.
    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs/greet",
        "/api/v1/status",
        "/api/v1/runs",
        "/metrics",
    ] {
        assert!(
            !get(port, path).text().contains(SECRET),
            "{path} shows a secret"
        );
    }

    // Keep-alive: several requests on one connection, pipelined too.
    let mut conn = Conn::open(port);
    for _ in 0..3 {
        assert_eq!(conn.send("GET", "/api/v1/status", &[AUTH], b"").status, 200);
    }
    let mut two = client::request_bytes("GET", "/healthz", &[], b"");
    two.extend(client::request_bytes(
        "GET",
        "/api/v1/jobs/greet",
        &[AUTH],
        b"",
    ));
    std::io::Write::write_all(&mut conn.stream, &two).unwrap();
    let first = conn.read_response(false).unwrap();
    let second = conn.read_response(false).unwrap();
    assert_eq!(first.json()["status"], "ok");
    assert_eq!(
        second.json()["name"],
        "greet",
        "answers come in request order"
    );
}

#[test]
fn api_auth_failures() {
    let (_d, port) = start(&jobs_yaml("api2"));
    let none = request(port, "GET", "/api/v1/jobs", &[], b"");
    assert_eq!(none.status, 401);
    assert_eq!(none.code(), "unauthorized");
    assert!(
        none.header("www-authenticate")
            .unwrap()
            .starts_with("Bearer")
    );
    let wrong = request(
        port,
        "GET",
        "/api/v1/jobs",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let malformed = request(
        port,
        "GET",
        "/api/v1/jobs",
        &[("Authorization", "Basic eDp5")],
        b"",
    );
    assert_eq!(malformed.status, 401);
    assert_eq!(
        request(port, "GET", "/metrics", &[], b"").status,
        401,
        "metrics_auth"
    );
    assert_eq!(
        request(port, "POST", "/api/v1/jobs/greet/run", &[], b"").status,
        401
    );
    assert_eq!(
        request(port, "GET", "/healthz", &[], b"").status,
        200,
        "open"
    );
    let ws = request(
        port,
        "GET",
        "/ws",
        &[
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ],
        b"",
    );
    assert_eq!(ws.status, 401, "/ws needs the token too");

    // Login: a wrong token, malformed JSON, then the session cookie.
    let json_ct = ("Content-Type", "application/json");
    let bad = request(
        port,
        "POST",
        "/api/v1/login",
        &[json_ct],
        br#"{"token":"nope"}"#,
    );
    assert_eq!(bad.status, 401);
    let garbage = request(port, "POST", "/api/v1/login", &[json_ct], b"{token:");
    assert_eq!(
        (garbage.status, garbage.code().as_str()),
        (400, "bad_request")
    );
    let body = json!({ "token": TOKEN }).to_string();
    let ok = request(port, "POST", "/api/v1/login", &[json_ct], body.as_bytes());
    assert_eq!(ok.status, 200, "{}", ok.text());
    let set_cookie = ok.header("set-cookie").unwrap().to_string();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"));
    assert!(!set_cookie.contains(TOKEN), "the cookie is not the token");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let c = ("Cookie", cookie.as_str());
    assert_eq!(request(port, "GET", "/api/v1/jobs", &[c], b"").status, 200);
    let form = request(
        port,
        "POST",
        "/api/v1/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        format!("token={TOKEN}").as_bytes(),
    );
    assert_eq!(form.status, 200);

    // A browser session's changes: CSRF header and same origin.
    let no_csrf = request(port, "POST", "/api/v1/jobs/greet/run", &[c], b"");
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.text());
    let csrf = ("X-Saltpeter-Csrf", "1");
    let cross = request(
        port,
        "POST",
        "/api/v1/jobs/greet/run",
        &[c, csrf, ("Origin", "http://evil.example")],
        b"",
    );
    assert_eq!(cross.status, 403);
    let same = request(
        port,
        "POST",
        "/api/v1/jobs/greet/run",
        &[c, csrf, ("Origin", "http://127.0.0.1")],
        b"",
    );
    assert_eq!(same.status, 202, "{}", same.text());
    let ws_cross = request(
        port,
        "GET",
        "/ws",
        &[
            c,
            ("Origin", "http://evil.example"),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ],
        b"",
    );
    assert_eq!(
        ws_cross.status, 403,
        "cross-site WebSocket hijacking refused"
    );
    let logout = request(port, "POST", "/api/v1/logout", &[c], b"");
    assert_eq!(logout.status, 204);
    assert!(logout.header("set-cookie").unwrap().contains("Max-Age=0"));
    let forged = request(
        port,
        "GET",
        "/api/v1/jobs",
        &[("Cookie", "sp_session=abcd")],
        b"",
    );
    assert_eq!(forged.status, 401);
}

#[test]
fn api_auth_none_only_on_loopback() {
    let jobs = jobs_yaml("api3");
    let open_cfg = "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_auth: none\n";
    let (_d, port) = start_with(open_cfg, &jobs);
    assert_eq!(request(port, "GET", "/api/v1/jobs", &[], b"").status, 200);
    assert_eq!(request(port, "GET", "/metrics", &[], b"").status, 200);

    let mut refused = Daemon::prepare(&[
        (
            "01-api.yaml",
            "saltpeter_config:\n  api_ws: true\n  api_ws_port: 0\n  api_auth: none\n  \
             api_ws_bind_addr: 0.0.0.0\n",
        ),
        ("jobs.yaml", &jobs),
    ]);
    refused.spawn();
    let status = refused.wait_exit();
    assert_eq!(status.code(), Some(2), "{}", refused.log_text());
    assert!(
        refused
            .log_text()
            .contains("only served on a loopback address"),
        "{}",
        refused.log_text()
    );

    // Metrics can be opened alone.
    let metrics_cfg = api_config("  metrics_auth: false\n");
    let (_m, port) = start_with(&metrics_cfg, &jobs_yaml("api3b"));
    assert_eq!(request(port, "GET", "/metrics", &[], b"").status, 200);
    assert_eq!(request(port, "GET", "/api/v1/jobs", &[], b"").status, 401);
}
