//! Requests about the daemon itself: status, metrics, configuration reload, wrapper
//! deployment, and the audit trail (what was asked, by whom).

use crate::ipc::CallId;
use crate::roles::main::requests::answer::{answer_with, failure, respond};
use crate::roles::main::state::Main;
use crate::roles::main::views::answer::bounded_errors;
use crate::wire::admin::{AdminFailure, AdminRequest, AdminResponse, EventInfo, StatusInfo};
use crate::wire::db::DbRequest;
use crate::wire::db::calls;
use crate::wire::db::{EventFilter, EventRecord};
use crate::wire::records::{Millis, RunId};

pub(crate) fn status(core: &mut Main, call: CallId) {
    let now = chrono::Utc::now().timestamp_millis();
    let config_errors = bounded_errors(
        core.config
            .diagnostics
            .iter()
            .filter(|d| d.severity == crate::config::Severity::Error)
            .map(|d| d.to_string()),
    );
    let status = StatusInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: core.daemon.started_at,
        uptime_s: ((now - core.daemon.started_at).max(0) / 1000) as u64,
        processes: core.daemon.processes.clone(),
        jobs: core.config.jobs.len(),
        // On a standby, the leader's (`mirror`).
        running_runs: core.runs_in_flight() + core.views.mirrored_count(),
        config_errors,
        wrapper_port: core.daemon.wrapper_port,
        db_error: core.storage.trouble().map(str::to_owned),
        api_port: core.daemon.api_port,
        ha: core.ha.shared().then(|| crate::wire::admin::HaInfo {
            server: core.ha.server().to_string(),
            role: core.ha.role().to_string(),
            leader: core.ha.known_holder().map(str::to_owned),
        }),
    };
    respond(core, call, AdminResponse::Status(status));
}

pub(crate) fn metrics(core: &mut Main, call: CallId) {
    let text = crate::roles::main::shell::views::metrics_text(core);
    respond(core, call, AdminResponse::Metrics(text));
}

/// `saltpeterctl wrapper deploy` (`fleet/on_demand.rs`).
pub(crate) fn deploy_wrapper(core: &mut Main, call: CallId, target: Option<String>) {
    use crate::roles::main::fleet;
    if !fleet::applies(&core.config) {
        let why = AdminFailure::Invalid("no job uses the salt executor".into());
        return failure(core, call, why);
    }
    let out = fleet::on_demand::start(&core.config.saltpeter, call, target);
    core.perform(out);
}

pub(crate) fn events(
    core: &mut Main,
    call: CallId,
    job: Option<String>,
    run: Option<RunId>,
    kind: Option<String>,
    since: Option<Millis>,
    limit: u32,
) {
    let filter = EventFilter {
        job,
        run,
        kind,
        since,
        before_id: None,
        limit: Some(limit.clamp(1, 100_000) as usize),
    };
    core.db_call(
        DbRequest::ListEvents(filter),
        answer_with::<calls::ListEvents>(call, |_, events| events_read(events)),
    );
}

/// db's answer to `events`.
pub(crate) fn events_read(events: Vec<EventRecord>) -> AdminResponse {
    AdminResponse::Events(
        events
            .into_iter()
            .map(|e| EventInfo {
                id: e.id,
                at: e.event.at,
                kind: e.event.kind,
                job: e.event.job,
                run: e.event.run,
                machine: e.event.machine,
                message: e.event.message,
                uid: e.event.uid,
            })
            .collect(),
    )
}

/// The audit entry of a state-changing request (kills record their own, per run); `by`
/// names who asked (" by uid N"), or is empty when `Main::event` adds an API name.
pub(crate) fn record_request(core: &mut Main, by: &str, req: &AdminRequest) {
    let (kind, job, message) = match req {
        AdminRequest::RunNow { job, targets: None } => (
            "run_requested",
            Some(job),
            format!("manual run requested{by}"),
        ),
        AdminRequest::RunNow {
            job,
            targets: Some(targets),
        } => (
            "run_requested",
            Some(job),
            format!("manual run on {} requested{by}", targets.join(", ")),
        ),
        AdminRequest::Reload => (
            "reload_requested",
            None,
            format!("configuration reload requested{by}"),
        ),
        AdminRequest::DeployWrapper { target } => (
            "wrapper_deploy_requested",
            None,
            format!(
                "wrapper deployment to {} requested{by}",
                target.as_deref().unwrap_or("*")
            ),
        ),
        _ => return,
    };
    core.event(kind, job.map(String::as_str), None, None, message);
}
