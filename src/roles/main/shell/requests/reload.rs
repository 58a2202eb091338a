//! `Reload` (`saltpeterctl reload`, the API's): the configuration read again, answered
//! with the summary once the reload is applied (the reloads part, `lifecycle/reload.rs`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;

pub(super) fn handle(core: &mut Main, call: CallId) {
    let now = std::time::Instant::now();
    let out = core.reloads.request(&core.config, Some(call), now);
    core.perform(out);
}
