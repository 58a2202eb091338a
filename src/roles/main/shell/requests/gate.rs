//! What a request meets before its topic: a standby refuses the requests that change
//! state (the leader answers them), and while start-up still loads the maintenance and
//! job control settings, the requests that depend on them wait (`Boot::park`), answered
//! once start-up is done (`Message::StartupDone`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::failure;
use crate::wire::admin::{AdminFailure, AdminRequest};

/// The request, if it goes on to its topic now; `None` when it was refused or parked.
pub(super) fn admit(core: &mut Main, call: CallId, req: AdminRequest) -> Option<AdminRequest> {
    if let Some(why) = core.ha.refusal()
        && changes_state(&req)
    {
        failure(core, call, AdminFailure::Invalid(why));
        return None;
    }
    if core.flight.is_recovering() && needs_settings(&req) {
        let name = core.actor.name().map(str::to_owned);
        core.boot.park(call, req, core.actor.uid(), name);
        return None;
    }
    Some(req)
}

/// The requests a standby refuses.
fn changes_state(req: &AdminRequest) -> bool {
    matches!(
        req,
        AdminRequest::RunNow { .. }
            | AdminRequest::Maintenance(_)
            | AdminRequest::JobControl(_)
            | AdminRequest::KillJob { .. }
            | AdminRequest::Kill { .. }
            | AdminRequest::Suspend { .. }
            | AdminRequest::DeployWrapper { .. }
    )
}

/// The requests that depend on the maintenance and job control settings start-up loads.
fn needs_settings(req: &AdminRequest) -> bool {
    matches!(
        req,
        AdminRequest::RunNow { .. } | AdminRequest::Maintenance(_) | AdminRequest::JobControl(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_refuses_changes_and_start_up_parks_what_needs_the_settings() {
        let run_now = AdminRequest::RunNow {
            job: "j".into(),
            targets: None,
        };
        let kill = AdminRequest::Kill {
            run: 1,
            machine: None,
        };
        assert!(changes_state(&run_now) && needs_settings(&run_now));
        assert!(changes_state(&kill) && !needs_settings(&kill));
        assert!(!changes_state(&AdminRequest::Status));
        assert!(!needs_settings(&AdminRequest::Reload));
        assert!(!changes_state(&AdminRequest::Reload));
    }
}
