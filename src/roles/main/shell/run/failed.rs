//! A target that never ran: its launch failed, or its minion is unreachable. Both leave
//! a target its wrapper picked up meanwhile alone.

use crate::roles::main::shell::Main;
use crate::roles::main::shell::run::effects::finish_target;
use crate::wire::records::{RunId, TargetReason};

/// A target's wrapper could not be deployed or launched: recorded as an event with its
/// cause, and the target ends 254 — unless a wrapper picked it up meanwhile (a target is
/// never failed while its wrapper is connected).
pub(super) fn launch_failed(core: &mut Main, job: &str, run: RunId, machine: &str, why: String) {
    if core
        .target(run, machine)
        .is_none_or(|t| !t.awaiting_pickup())
    {
        return;
    }
    core.event("launch_failed", Some(job), Some(run), Some(machine), why);
    finish_target(core, run, machine, TargetReason::WrapperFailed, Some(254));
}

/// A target whose minion did not return and did not answer a ping either: unreachable
/// (255) with Salt's word — unless its wrapper picked it up meanwhile.
pub(super) fn unreachable(core: &mut Main, job: &str, run: RunId, machine: &str, why: String) {
    if core
        .target(run, machine)
        .is_none_or(|t| !t.awaiting_pickup())
    {
        return;
    }
    log::warn!("run {run}: {machine} is unreachable: {why}");
    core.event(
        "target_unreachable",
        Some(job),
        Some(run),
        Some(machine),
        why,
    );
    finish_target(core, run, machine, TargetReason::Unreachable, Some(255));
}
