//! Who is asking over HTTP or `/ws`, and what their role lets them do.
//!
//! Every authenticated request has an [`Identity`]: a configured name and role
//! (`api_tokens`, or `api_token` as the `admin` named `api_token`), or the open identity
//! of `api_auth: none`. Before a request goes to main its [`required_role`] is compared
//! with the identity's role (403 naming both when short); main then gets it as
//! `HubRequest::AdminBy`, so the audit trail names who ran, killed or reloaded.

use crate::config::ApiRole;
use crate::wire::admin::{AdminRequest, JobControl, MaintenanceChange};

/// How a request presented its identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Principal {
    Bearer,
    Cookie,
    /// `api_auth: none`.
    Open,
}
use crate::wire::link::HubRequest;

/// The name `api_auth: none` requests are recorded under.
pub(crate) const OPEN_NAME: &str = "anonymous";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub name: String,
    pub role: ApiRole,
    pub via: Principal,
}

impl Identity {
    /// How the audit trail names it: `api:alice`.
    pub(crate) fn audit_name(&self) -> String {
        format!("api:{}", self.name)
    }

    /// The request to main, carrying the name.
    pub(crate) fn request(&self, req: AdminRequest) -> HubRequest {
        HubRequest::AdminBy {
            who: self.audit_name(),
            req,
        }
    }
}

/// The least role a request needs: reading is `viewer`, running, killing, maintenance
/// and job control changes are `operator`, reloads and deployments are `admin`. The match
/// is exhaustive on purpose: a new request must be given its role here to compile.
pub(crate) fn required_role(req: &AdminRequest) -> ApiRole {
    use AdminRequest as R;
    match req {
        R::Reload | R::DeployWrapper { .. } => ApiRole::Admin,
        R::RunNow { .. } | R::KillJob { .. } | R::Kill { .. } | R::Suspend { .. } => {
            ApiRole::Operator
        }
        R::Maintenance(MaintenanceChange::Show) => ApiRole::Viewer,
        R::Maintenance(_) => ApiRole::Operator,
        R::JobControl(JobControl::Show) => ApiRole::Viewer,
        R::JobControl(_) => ApiRole::Operator,
        R::Status
        | R::WrapperStatus
        | R::Metrics
        | R::Events { .. }
        | R::Jobs { .. }
        | R::Job { .. }
        | R::NextFirings { .. }
        | R::Runs(_)
        | R::GetRun { .. }
        | R::Output { .. }
        | R::LiveOutput { .. }
        | R::Follow { .. }
        | R::WatchRun { .. }
        | R::MaintenanceWindows { .. }
        | R::Deliveries(_) => ApiRole::Viewer,
    }
}

/// A request beyond the identity's role: the 403 message names both.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} has the {} role; this needs {}", role.as_str(), needed.as_str())]
pub(crate) struct Forbidden {
    pub name: String,
    pub role: ApiRole,
    pub needed: ApiRole,
}

/// `Err` with the 403 message when `who` may not make `req`.
pub(crate) fn authorize(who: &Identity, req: &AdminRequest) -> Result<(), Forbidden> {
    let needed = required_role(req);
    if who.role >= needed {
        Ok(())
    } else {
        Err(Forbidden {
            name: who.name.clone(),
            role: who.role,
            needed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(role: ApiRole) -> Identity {
        Identity {
            name: "x".into(),
            role,
            via: Principal::Bearer,
        }
    }

    #[test]
    fn roles_nest() {
        let run = AdminRequest::RunNow {
            job: "j".into(),
            targets: None,
        };
        let reload = AdminRequest::Reload;
        let jobs = AdminRequest::Status;
        let maint = AdminRequest::Maintenance(MaintenanceChange::GlobalOn);
        assert!(authorize(&who(ApiRole::Viewer), &jobs).is_ok());
        for r in [&run, &maint] {
            assert!(authorize(&who(ApiRole::Viewer), r).is_err());
            assert!(authorize(&who(ApiRole::Operator), r).is_ok());
        }
        let err = authorize(&who(ApiRole::Operator), &reload).unwrap_err();
        assert_eq!(err.needed, ApiRole::Admin);
        let err = err.to_string();
        assert!(err.contains("operator") && err.contains("admin"), "{err}");
        assert!(authorize(&who(ApiRole::Admin), &reload).is_ok());
    }
}
