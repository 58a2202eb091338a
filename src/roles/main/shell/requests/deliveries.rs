//! Requests about notifications and exports (`saltpeterctl deliveries`, the API's): what
//! was queued, delivered or given up, read from db by the notify part
//! (`notify/deliveries.rs`), which also decides what a reader may see.

use crate::ipc::CallId;
use crate::roles::main::notify::deliveries as part;
use crate::roles::main::shell::Main;
use crate::wire::notify::DeliveryFilter;

/// `Deliveries`: the list, as the one who asked may read it.
pub(super) fn list(core: &mut Main, call: CallId, filter: DeliveryFilter) {
    let admin = part::reader_is_admin(core.actor.name(), &core.config.saltpeter);
    core.perform(part::list(call, filter, admin));
}
