//! Requests from the HTTP API and `/ws` with the identity behind them
//! (`HubRequest::AdminBy`, names like `api:alice`; the hub checked the role).
//!
//! While one is handled, `Main::actor` holds the name, so every audit event it
//! causes (runs requested, kills, maintenance changes) says who, as the admin socket's
//! requests carry their peer's uid.

use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::roles::main::state::MainRole;
use crate::wire::admin::AdminRequest;

pub(crate) fn handle_by(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    call: CallId,
    who: String,
    req: AdminRequest,
) {
    role.core.actor.name = Some(who);
    crate::roles::main::requests::daemon::record_request(&mut role.core, "", &req);
    crate::roles::main::requests::handle(role, ctx, call, req);
    role.core.actor.name = None;
}
