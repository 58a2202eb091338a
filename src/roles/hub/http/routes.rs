//! Which request goes where (docs/api.md lists them); main's answers are rendered by
//! `answers.rs`.
//!
//! Routing is translation only: a request becomes an `AdminRequest` for main — the same
//! vocabulary `saltpeterctl` and `/ws` use — with an `Expect` saying how to render the
//! answer, a static file, or an error. The answers' shapes are those of
//! `saltpeterctl --json` (`crate::json`), so scripts see one format.

use serde_json::{Value, json};

use crate::roles::hub::state::http::Http;
use std::net::IpAddr;
use std::time::Instant;

use super::auth::Auth;
use super::parse::{Request, Response};
use crate::roles::hub::state::identity::{Identity, authorize};
use crate::wire::admin::{AdminRequest, MaintenanceChange};

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const STYLE_CSS: &str = include_str!("../ui/style.css");
const JOBCTL_JS: &str = include_str!("../ui/jobctl.js");

use super::action::{Action, HEALTH_TIMEOUT, bad_request, call, error};
use super::query::{number, output_query, run_id, runs_query};
use crate::roles::hub::state::http::Expect;

fn not_allowed(allow: &str) -> Action {
    Action::Respond(
        Response::error(
            405,
            "method_not_allowed",
            &format!("this resource takes {allow}"),
        )
        .with_header("Allow", allow),
    )
}

fn static_file(content_type: &str, body: &str) -> Action {
    Action::Respond(
        Response::new(200, content_type, body.as_bytes().to_vec())
            .with_header("Cache-Control", "no-cache")
            .with_header(
                "Content-Security-Policy",
                "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                 frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            )
            .with_header("X-Frame-Options", "DENY"),
    )
}

/// Decide what a request from `peer` gets; `who` is set to the identity of an
/// authenticated request, whose role has been checked against what it asks.
pub(crate) fn route(
    http: &mut Http,
    req: &Request,
    peer: IpAddr,
    who: &mut Option<Identity>,
) -> Action {
    if let Err(denied) = http.auth.check_host(req) {
        return error(denied.status(), "forbidden", denied.message());
    }
    let Some(segments) = req.segments() else {
        return bad_request("the path is not valid UTF-8");
    };
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = match req.method.as_str() {
        "HEAD" => "GET",
        other => other,
    };
    if method == "OPTIONS" {
        // No CORS: the answer grants nothing to other origins.
        return Action::Respond(
            Response::new(204, "text/plain", Vec::new())
                .with_header("Allow", "GET, HEAD, POST, PUT, OPTIONS"),
        );
    }
    match (method, seg.as_slice()) {
        ("GET", []) | ("GET", ["index.html"]) => {
            static_file("text/html; charset=utf-8", INDEX_HTML)
        }
        ("GET", ["app.js"]) => static_file("text/javascript; charset=utf-8", APP_JS),
        ("GET", ["style.css"]) => static_file("text/css; charset=utf-8", STYLE_CSS),
        ("GET", ["jobctl.js"]) => static_file("text/javascript; charset=utf-8", JOBCTL_JS),
        ("GET", ["healthz"]) => Action::Call {
            req: AdminRequest::Status,
            expect: Expect::Healthz,
            timeout: HEALTH_TIMEOUT,
        },
        (_, [] | ["index.html"] | ["app.js"] | ["jobctl.js"] | ["style.css"] | ["healthz"]) => {
            not_allowed("GET")
        }
        ("POST", ["api", "v1", "login"]) => login(&mut http.auth, req, peer),
        ("POST", ["api", "v1", "logout"]) => Action::Respond(
            Response::new(204, "text/plain", Vec::new())
                .with_header("Set-Cookie", &http.auth.logout(req)),
        ),
        (_, ["api", "v1", "login" | "logout"]) => not_allowed("POST"),
        ("GET", ["metrics"]) if http.auth.metrics_open() => {
            call(AdminRequest::Metrics, Expect::Metrics)
        }
        _ => match http.auth.check(req, peer, Instant::now()) {
            Ok(identity) => {
                let action = protected(http, req, method, &seg, &identity);
                if let Action::Call { req: call, .. } = &action
                    && let Err(why) = authorize(&identity, call)
                {
                    return error(403, "forbidden", &why.to_string());
                }
                *who = Some(identity);
                action
            }
            Err(denied) => Action::Respond(denied_response(&denied)),
        },
    }
}

/// 401 invites a Bearer token; 429 says to wait (the throttle counts a minute).
fn denied_response(denied: &super::auth::Denied) -> Response {
    match denied.status() {
        429 => Response::error(429, "too_many_requests", denied.message())
            .with_header("Retry-After", "60"),
        401 => Response::error(401, "unauthorized", denied.message())
            .with_header("WWW-Authenticate", "Bearer realm=\"saltpeter\""),
        status => Response::error(status, "forbidden", denied.message()),
    }
}

fn login(auth: &mut Auth, req: &Request, peer: IpAddr) -> Action {
    let token = match req.header("content-type") {
        Some(ct) if ct.starts_with("application/x-www-form-urlencoded") => {
            let body = String::from_utf8_lossy(&req.body);
            super::parse::parse_query(&body)
                .into_iter()
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v)
        }
        _ => match serde_json::from_slice::<Value>(&req.body) {
            Ok(v) => v["token"].as_str().map(str::to_string),
            Err(e) => return bad_request(&format!("malformed JSON: {e}")),
        },
    };
    let Some(token) = token else {
        return bad_request("send {\"token\": \"...\"}");
    };
    match auth.login(&token, peer, Instant::now()) {
        Ok(cookie) => Action::Respond(
            Response::json(200, &json!({"ok": true})).with_header("Set-Cookie", &cookie),
        ),
        Err(denied) => Action::Respond(denied_response(&denied)),
    }
}

/// An optional JSON object body; `Err` for malformed JSON.
fn json_body(req: &Request) -> Result<Value, Action> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(v @ (Value::Object(_) | Value::Null)) => Ok(v),
        Ok(_) => Err(bad_request("the body must be a JSON object")),
        Err(e) => Err(bad_request(&format!("malformed JSON: {e}"))),
    }
}

fn protected(http: &Http, req: &Request, method: &str, seg: &[&str], who: &Identity) -> Action {
    if method != "GET"
        && let Err(denied) = http.auth.check_state_change(req, who)
    {
        return error(denied.status(), "forbidden", denied.message());
    }
    match (method, seg) {
        ("GET", ["ws"]) => match http.auth.check_ws(req, who) {
            Ok(()) if is_ws_upgrade(req) => Action::Upgrade,
            Ok(()) => Action::Respond(
                Response::error(426, "upgrade_required", "/ws is a WebSocket endpoint")
                    .with_header("Upgrade", "websocket"),
            ),
            Err(denied) => error(denied.status(), "forbidden", denied.message()),
        },
        ("GET", ["metrics"]) => call(AdminRequest::Metrics, Expect::Metrics),
        ("GET", ["api", "v1", "status"]) => call(AdminRequest::Status, Expect::Status),
        ("GET", ["api", "v1", "config", "errors"]) => {
            call(AdminRequest::Status, Expect::ConfigErrors)
        }
        ("GET", ["api", "v1", "jobs"]) => call(
            AdminRequest::Jobs {
                group: None,
                state: None,
            },
            Expect::Jobs,
        ),
        ("GET", ["api", "v1", "jobs", job]) => {
            let upcoming = match number(req, "next", 5) {
                Ok(n) => n.min(100) as u32,
                Err(a) => return a,
            };
            call(
                AdminRequest::Job {
                    job: job.to_string(),
                    upcoming,
                },
                Expect::Job,
            )
        }
        ("POST", ["api", "v1", "jobs", job, "run"]) => call(
            AdminRequest::RunNow {
                job: job.to_string(),
                targets: None,
            },
            Expect::Started,
        ),
        ("POST", ["api", "v1", "jobs", job, "kill"]) => {
            let body = match json_body(req) {
                Ok(b) => b,
                Err(a) => return a,
            };
            call(
                AdminRequest::KillJob {
                    job: job.to_string(),
                    machine: body["machine"].as_str().map(str::to_string),
                    run: None,
                },
                Expect::Done,
            )
        }
        ("GET", ["api", "v1", "runs"]) => runs_query(req),
        ("GET", ["api", "v1", "runs", id]) => match run_id(id) {
            Ok(run) => call(AdminRequest::GetRun { run }, Expect::Run),
            Err(a) => a,
        },
        (
            "POST",
            [
                "api",
                "v1",
                "runs",
                id,
                action @ ("kill" | "suspend" | "resume"),
            ],
        ) => {
            if let Err(a) = json_body(req) {
                return a;
            }
            match run_id(id) {
                Ok(run) => call(run_action(run, None, action), Expect::Done),
                Err(a) => a,
            }
        }
        (
            "POST",
            [
                "api",
                "v1",
                "runs",
                id,
                "targets",
                machine,
                action @ ("kill" | "suspend" | "resume"),
            ],
        ) => {
            if let Err(a) = json_body(req) {
                return a;
            }
            match run_id(id) {
                Ok(run) => call(
                    run_action(run, Some(machine.to_string()), action),
                    Expect::Done,
                ),
                Err(a) => a,
            }
        }
        ("GET", ["api", "v1", "runs", id, "targets", machine, "output"]) => {
            output_query(req, id, machine)
        }
        ("GET", ["api", "v1", "maintenance"]) => call(
            AdminRequest::Maintenance(MaintenanceChange::Show),
            Expect::Maintenance,
        ),
        ("PUT" | "POST", ["api", "v1", "maintenance"]) => {
            let body = match json_body(req) {
                Ok(body) => body,
                Err(a) => return a,
            };
            let change = match (&body["global"], &body["add"], &body["remove"]) {
                (Value::Bool(true), Value::Null, Value::Null) => MaintenanceChange::GlobalOn,
                (Value::Bool(false), Value::Null, Value::Null) => MaintenanceChange::GlobalOff,
                (Value::Null, Value::String(m), Value::Null) => MaintenanceChange::Add(m.clone()),
                (Value::Null, Value::Null, Value::String(m)) => {
                    MaintenanceChange::Remove(m.clone())
                }
                _ => {
                    return bad_request(
                        "expected one of {\"global\": true|false}, {\"add\": MACHINE}, \
                         {\"remove\": MACHINE}",
                    );
                }
            };
            call(AdminRequest::Maintenance(change), Expect::Maintenance)
        }
        (method, ["api", "v1", "maintenance", "windows"] | ["api", "v1", "jobctl"])
        | (method, ["api", "v1", "jobs", _, "pause" | "resume" | "skip"]) => {
            job_control(req, method, seg)
        }
        ("GET", ["api", "v1", "deliveries"]) => deliveries(req),
        (_, ["api", "v1", "deliveries"]) => not_allowed("GET"),
        (_, ["ws" | "metrics"]) => not_allowed("GET"),
        (_, ["api", "v1", "maintenance"]) => not_allowed("GET, PUT, POST"),
        (_, ["api", "v1", "jobs", _, "run" | "kill"])
        | (_, ["api", "v1", "runs", _, "kill" | "suspend" | "resume"])
        | (
            _,
            [
                "api",
                "v1",
                "runs",
                _,
                "targets",
                _,
                "kill" | "suspend" | "resume",
            ],
        ) => not_allowed("POST"),
        (_, ["api", "v1", "status" | "jobs" | "runs"])
        | (_, ["api", "v1", "config", "errors"])
        | (_, ["api", "v1", "jobs" | "runs", _])
        | (_, ["api", "v1", "runs", _, "targets", _, "output"]) => not_allowed("GET"),
        _ => error(
            404,
            "not_found",
            &format!(
                "no such resource: {}",
                crate::roles::hub::logsafe::clip(&req.path, 200)
            ),
        ),
    }
}

/// A WebSocket handshake request (RFC 6455 section 4.1), version 13.
fn is_ws_upgrade(req: &Request) -> bool {
    let has = |name: &str, word: &str| {
        req.header(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(word)))
    };
    has("upgrade", "websocket")
        && has("connection", "upgrade")
        && req
            .header("sec-websocket-key")
            .is_some_and(|k| !k.is_empty())
        && req.header("sec-websocket-version") == Some("13")
}

/// The notification and export outbox: `GET /api/v1/deliveries?job=J&run=N&state=S&limit=N`.
fn deliveries(req: &Request) -> Action {
    use crate::wire::notify::{DeliveryFilter, DeliveryState};
    let (run, limit) = match (number(req, "run", 0), number(req, "limit", 50)) {
        (Ok(run), Ok(limit)) => ((run > 0).then_some(run), limit.clamp(1, 10_000) as usize),
        (Err(a), _) | (_, Err(a)) => return a,
    };
    let state = match req.query("state") {
        None | Some("") => None,
        Some(s) => match DeliveryState::parse(s) {
            Some(s) => Some(s),
            None => return bad_request("`state` is one of pending, delivered, failed"),
        },
    };
    let filter = DeliveryFilter {
        job: req
            .query("job")
            .filter(|j| !j.is_empty())
            .map(str::to_string),
        run,
        state,
        limit: Some(limit),
    };
    call(AdminRequest::Deliveries(filter), Expect::Deliveries)
}

/// Maintenance windows and job control: `GET /api/v1/maintenance/windows?count=N`,
/// `GET /api/v1/jobctl`, `POST /api/v1/jobs/JOB/pause` (`{"until": RFC 3339}`),
/// `.../resume`, `.../skip` (`{"next": N}`).
fn job_control(req: &Request, method: &str, seg: &[&str]) -> Action {
    use crate::wire::admin::JobControl;
    match (method, seg) {
        ("GET", ["api", "v1", "maintenance", "windows"]) => {
            let count = match number(req, "count", 10) {
                Ok(n) => n.min(1000) as u32,
                Err(a) => return a,
            };
            call(AdminRequest::MaintenanceWindows { count }, Expect::Windows)
        }
        ("GET", ["api", "v1", "jobctl"]) => call(
            AdminRequest::JobControl(JobControl::Show),
            Expect::JobControl,
        ),
        ("POST", ["api", "v1", "jobs", job, action]) => {
            let body = match json_body(req) {
                Ok(b) => b,
                Err(a) => return a,
            };
            let job = job.to_string();
            let change = match *action {
                "pause" => {
                    let until = match &body["until"] {
                        Value::Null => None,
                        Value::String(t) => match chrono::DateTime::parse_from_rfc3339(t) {
                            Ok(t) => Some(t.timestamp_millis()),
                            Err(_) => {
                                return bad_request(&format!(
                                    "`until`: `{t}` is not an RFC 3339 instant"
                                ));
                            }
                        },
                        _ => return bad_request("`until` must be an RFC 3339 instant"),
                    };
                    JobControl::Pause { job, until }
                }
                "resume" => JobControl::Resume { job },
                _ => {
                    let next = match &body["next"] {
                        Value::Null => 1,
                        v => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                            Some(n) => n,
                            None => return bad_request("`next` must be a whole number"),
                        },
                    };
                    JobControl::Skip { job, next }
                }
            };
            call(AdminRequest::JobControl(change), Expect::JobControl)
        }
        (_, ["api", "v1", "jobs", ..]) => not_allowed("POST"),
        _ => not_allowed("GET"),
    }
}

/// `POST /api/v1/runs/{id}[/targets/{machine}]/{kill|suspend|resume}` as a request.
fn run_action(
    run: crate::wire::records::RunId,
    machine: Option<String>,
    action: &str,
) -> AdminRequest {
    match action {
        "kill" => AdminRequest::Kill { run, machine },
        other => AdminRequest::Suspend {
            run,
            machine,
            suspend: other == "suspend",
        },
    }
}
