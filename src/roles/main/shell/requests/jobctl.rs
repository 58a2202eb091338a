//! Requests about job control (`saltpeterctl pause`, `resume`, `skip`, the API's): the
//! change, answered once it is stored. The state and its rules are the job control
//! part's (`jobctl/`).

use crate::ipc::CallId;
use crate::roles::main::shell::Main;
use crate::wire::admin::JobControl;

/// `JobControl`: the part changes, as the admin socket's peer that asked.
pub(super) fn change(core: &mut Main, call: CallId, change: JobControl) {
    let uid = core.actor.uid();
    let now = chrono::Utc::now();
    let out = core
        .jobctl
        .request(call, change, &core.config.jobs, uid, now);
    core.perform(out);
}
