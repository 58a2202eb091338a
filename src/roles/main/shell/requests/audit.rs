//! Who asked: a request from the admin socket carries its peer's uid
//! (`HubRequest::AdminFrom`); one from the HTTP API or `/ws` the identity behind it
//! (`HubRequest::AdminBy`, names like `api:alice`; the hub checked the role).
//!
//! While one is handled, `Main::actor` holds the uid or the name, so every audit event
//! it causes (runs requested, kills, maintenance changes) says who; a state-changing
//! request records what was asked before anything happens.

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::handle;
use crate::wire::admin::{AdminPeer, AdminRequest};

/// A request from the admin socket: handled as the peer.
pub(crate) fn handle_from(core: &mut Main, call: CallId, peer: AdminPeer, req: AdminRequest) {
    core.actor.admin(Some(peer.uid));
    record_request(core, &format!(" by uid {}", peer.uid), &req);
    handle(core, call, req);
    core.actor.admin_done();
}

/// A request from the HTTP API or `/ws`: handled as `who`.
pub(crate) fn handle_by(core: &mut Main, call: CallId, who: String, req: AdminRequest) {
    core.actor.api(who);
    record_request(core, "", &req);
    handle(core, call, req);
    core.actor.api_done();
}

/// The audit entry of a state-changing request (kills record their own, per run); `by`
/// names who asked (" by uid N"), or is empty when `Main::event` adds an API name.
fn record_request(core: &mut Main, by: &str, req: &AdminRequest) {
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
