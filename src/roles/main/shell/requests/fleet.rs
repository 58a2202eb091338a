//! Requests about the wrapper fleet: deploying the wrapper (`saltpeterctl wrapper
//! deploy`, `fleet/on_demand.rs`) and each minion's wrapper build (`saltpeterctl wrapper
//! status`). The state is the fleet part's (`fleet/`).

use crate::ipc::CallId;
use crate::roles::main::fleet as part;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::{failure, respond};
use crate::wire::admin::{AdminFailure, AdminResponse, WrapperFleet};

/// `DeployWrapper`: to `target`, or to every minion of the salt jobs.
pub(super) fn deploy(core: &mut Main, call: CallId, target: Option<String>) {
    if !part::applies(&core.config) {
        let why = AdminFailure::Invalid("no job uses the salt executor".into());
        return failure(core, call, why);
    }
    let out = part::on_demand::start(&core.config.saltpeter, call, target);
    core.perform(out);
}

/// `WrapperStatus`: this build and what each minion runs.
pub(super) fn status(core: &mut Main, call: CallId) {
    let fleet = WrapperFleet {
        this_build: core.fleet.this_build().map(str::to_string),
        minions: core.fleet.status(),
    };
    respond(core, call, AdminResponse::WrapperFleet(fleet));
}
