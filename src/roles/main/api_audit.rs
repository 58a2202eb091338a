//! Requests from the HTTP API and `/ws` with the identity behind them
//! (`HubRequest::AdminBy`, names like `api:alice`; the hub checked the role).
//!
//! While one is handled, `Main::actor_name` holds the name, so every audit event it
//! causes (runs requested, kills, maintenance changes) says who, as the admin socket's
//! requests carry their peer's uid.

use super::{Main, MainRole};
use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::wire::admin::AdminRequest;

pub fn handle_by(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    call: CallId,
    who: String,
    req: AdminRequest,
) {
    role.core.actor_name = Some(who);
    record_request(&mut role.core, &req);
    super::requests::handle(role, ctx, call, req);
    role.core.actor_name = None;
}

/// The audit entry of a state-changing request (kills and maintenance changes record
/// their own); `Main::event` adds the name.
fn record_request(core: &mut Main, req: &AdminRequest) {
    let (kind, job, message) = match req {
        AdminRequest::RunNow { job, targets: None } => {
            ("run_requested", Some(job), "manual run requested".into())
        }
        AdminRequest::RunNow {
            job,
            targets: Some(targets),
        } => (
            "run_requested",
            Some(job),
            format!("manual run on {} requested", targets.join(", ")),
        ),
        AdminRequest::Reload => (
            "reload_requested",
            None,
            "configuration reload requested".into(),
        ),
        AdminRequest::DeployWrapper { target } => (
            "wrapper_deploy_requested",
            None,
            format!(
                "wrapper deployment to {} requested",
                target.as_deref().unwrap_or("*")
            ),
        ),
        _ => return,
    };
    core.event(kind, job.map(String::as_str), None, None, message);
}
