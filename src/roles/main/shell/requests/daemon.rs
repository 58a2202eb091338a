//! Requests about the daemon itself: status, metrics, and the audit trail (what was
//! asked, by whom: `Events`; the entries are recorded by `audit.rs`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::{answer_with, respond};
use crate::wire::admin::{AdminResponse, EventInfo, StatusInfo};
use crate::wire::db::DbRequest;
use crate::wire::db::calls;
use crate::wire::db::{EventFilter, EventRecord};
use crate::wire::records::{Millis, RunId};

pub(super) fn status(core: &mut Main, call: CallId) {
    let now = chrono::Utc::now().timestamp_millis();
    // Bounded, and made once per load (`config::ErrorDigest`).
    let config_errors = core.config.error_digest().shown().to_vec();
    let status = StatusInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: core.daemon.started_at(),
        uptime_s: ((now - core.daemon.started_at()).max(0) / 1000) as u64,
        processes: core.daemon.processes().to_vec(),
        jobs: core.config.jobs.len(),
        // On a standby, the leader's (`mirror`).
        running_runs: core.runs_in_flight() + core.views.mirrored_count(),
        config_errors,
        wrapper_port: core.daemon.wrapper_port(),
        db_error: core.storage.trouble().map(str::to_owned),
        api_port: core.daemon.api_port(),
        ha: core.ha.shared().then(|| crate::wire::admin::HaInfo {
            server: core.ha.server().to_string(),
            role: core.ha.role().to_string(),
            leader: core.ha.known_holder().map(str::to_owned),
        }),
    };
    respond(core, call, AdminResponse::Status(status));
}

pub(super) fn metrics(core: &mut Main, call: CallId) {
    let text = crate::roles::main::shell::views::metrics_text(core);
    respond(core, call, AdminResponse::Metrics(text));
}

pub(super) fn events(
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
pub(super) fn events_read(events: Vec<EventRecord>) -> AdminResponse {
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
