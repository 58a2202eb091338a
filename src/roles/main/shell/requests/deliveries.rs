//! Requests about notifications and exports (`saltpeterctl deliveries`, the API's): what
//! was queued, delivered or given up, read from db by the notify part
//! (`notify/deliveries.rs`), which also decides what of a URL is shown.

use crate::ipc::CallId;
use crate::roles::main::notify::deliveries as part;
use crate::roles::main::shell::Main;
use crate::wire::notify::DeliveryFilter;

/// `Deliveries`: the list, URLs cut to their host whoever asks.
pub(super) fn list(core: &mut Main, call: CallId, filter: DeliveryFilter) {
    core.perform(part::list(call, filter));
}
