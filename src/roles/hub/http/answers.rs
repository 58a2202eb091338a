//! main's answers to HTTP requests, as responses: the shapes of `saltpeterctl --json`
//! (`crate::json`), so scripts see one format; `Expect` (from `routes.rs`) says which.

use serde_json::{Value, json};

use super::parse::Response;
use crate::json::{job_json, run_json, status_json, time};
use crate::roles::hub::state::budget;
use crate::roles::hub::state::http::Expect;
use crate::roles::hub::state::http::Http;
use crate::wire::admin::{AdminFailure, AdminResponse, JobDetail, OutputSlice};

/// How many invalid jobs `GET /api/v1/jobs` leaves out (docs/api.md).
const INVALID_OMITTED_HEADER: &str = "X-Saltpeter-Invalid-Jobs-Omitted";

fn job_detail_json(d: &JobDetail) -> Value {
    let mut v = job_json(&d.summary.info);
    if let Value::Object(map) = &mut v {
        // A disabled job never fires: the API lists no fire times for it.
        let next_runs: &[i64] = if d.summary.info.enabled {
            &d.next_runs
        } else {
            &[]
        };
        map.insert(
            "next_runs".into(),
            next_runs.iter().map(|t| time(Some(*t))).collect(),
        );
        map.insert("config".into(), crate::json::ui::cron_json(&d.config));
        map.insert("running".into(), json!(d.summary.running));
    }
    v
}

/// An output read's answer, within the room set aside for it (`budget::output_answer_room`):
/// the raw form is the slice itself; the JSON form is cut to fit (`output_json`).
fn output_response(s: OutputSlice, expect: Expect) -> Response {
    let Expect::Output {
        raw,
        from,
        tail,
        max_bytes,
    } = expect
    else {
        return Response::error(500, "internal", "unexpected answer from main");
    };
    if raw {
        return Response::new(200, "application/octet-stream", s.data)
            .with_header("X-Saltpeter-Next-From", &s.next_from.to_string())
            .with_header("X-Saltpeter-Total-Bytes", &s.total_bytes.to_string())
            .with_header("X-Saltpeter-Omitted-Bytes", &s.omitted_bytes.to_string());
    }
    let room = budget::output_data_room(u64::from(max_bytes), false);
    let body = super::output_json::render(&s, from, tail, room);
    Response::new(200, "application/json", body)
}

/// main's answer to a request, as the HTTP response.
pub(super) fn render(http: &Http, expect: Expect, resp: AdminResponse) -> Response {
    let ok = |v: Value| Response::json(200, &v);
    match (expect, resp) {
        (_, AdminResponse::Failure(f)) => match f {
            AdminFailure::NotFound(m) => Response::error(404, "not_found", &m),
            AdminFailure::Invalid(m) => Response::error(409, "conflict", &m),
            AdminFailure::Internal(m) => Response::error(500, "internal", &m),
        },
        (Expect::Healthz, AdminResponse::Status(s)) => {
            ok(json!({"status": "ok", "version": s.version, "uptime_s": s.uptime_s}))
        }
        (Expect::Status, AdminResponse::Status(s)) => ok(status_json(&s)),
        (Expect::Maintenance, AdminResponse::Maintenance(info)) => ok(info.to_json()),
        (Expect::Windows, AdminResponse::Windows(list)) => {
            ok(crate::wire::admin::WindowOccurrence::to_json(&list))
        }
        (Expect::JobControl, AdminResponse::JobControl(info)) => ok(info.to_json()),
        (Expect::Deliveries, AdminResponse::Deliveries(list)) => ok(Value::Array(
            list.iter()
                .map(crate::wire::notify::DeliveryRecord::to_json)
                .collect(),
        )),
        (Expect::ConfigErrors, AdminResponse::Status(s)) => ok(json!({"errors": s.config_errors})),
        (
            Expect::Jobs,
            AdminResponse::Jobs {
                jobs,
                invalid_omitted,
            },
        ) => {
            let list = ok(Value::Array(
                jobs.iter().map(|j| job_json(&j.info)).collect(),
            ));
            // The list stays an array; the invalid jobs it leaves out are counted here
            // (and in the configuration errors, `/api/v1/config/errors`).
            match invalid_omitted {
                0 => list,
                n => list.with_header(INVALID_OMITTED_HEADER, &n.to_string()),
            }
        }
        (Expect::Job, AdminResponse::Job(d)) => ok(job_detail_json(&d)),
        (Expect::Runs { limit }, AdminResponse::Runs(runs)) => {
            let next = (runs.len() >= limit as usize)
                .then(|| runs.last().map(|r| r.id))
                .flatten();
            ok(json!({"runs": runs.iter().map(run_json).collect::<Vec<_>>(), "next_before": next}))
        }
        (Expect::Run, AdminResponse::Run(r)) => ok(run_json(&r)),
        (expect @ Expect::Output { .. }, AdminResponse::OutputSlice(s)) => {
            output_response(s, expect)
        }
        (Expect::Started, AdminResponse::Started { run }) => {
            Response::json(202, &json!({"run": run}))
        }
        (Expect::Done, AdminResponse::Done(message)) => ok(json!({"ok": true, "message": message})),
        (Expect::Metrics, AdminResponse::Metrics(mut text)) => {
            super::views::hub_metrics(http, &mut text);
            Response::new(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                text.into_bytes(),
            )
        }
        (expect, other) => {
            log::error!("main answered {expect:?} with {other:?}");
            Response::error(500, "internal", "unexpected answer from main")
        }
    }
}
