//! Requests about maintenance (`saltpeterctl maintenance`, the API's): a change, answered
//! once it is stored, and the configured windows ahead. The state and its rules are the
//! maintenance part's (`maintenance/`).

use crate::ipc::CallId;
use crate::roles::main::maintenance as part;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::requests::answer::respond;
use crate::wire::admin::{AdminResponse, MaintenanceChange};

/// `Maintenance`: the part changes, as whoever asked.
pub(super) fn change(core: &mut Main, call: CallId, change: MaintenanceChange) {
    let who = part::Who {
        name: core.actor.name(),
        uid: core.actor.uid(),
    };
    let now = crate::wire::records::now_ms();
    let out = core
        .maintenance
        .change(&core.config.maintenance, call, change, who, now);
    core.perform(out);
}

/// `MaintenanceWindows`: the next `count` windows of the configuration.
pub(super) fn windows(core: &mut Main, call: CallId, count: u32) {
    let now = chrono::Utc::now();
    let list = part::windows::listed(&core.config.maintenance.windows, now, count);
    respond(core, call, AdminResponse::Windows(list));
}
