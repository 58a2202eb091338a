//! The launch rounds (`rounds/`) at the end of the loop's turn: what they need of the
//! fleet and the daemon, handed in.

use std::time::Instant;

use crate::roles::main::shell::Main;

/// Send the rounds that are complete (the loop's end of turn, so every launch the turn's
/// steps queued is in), and fold the latencies of overdue publishes into the pre-staging
/// lead.
pub(crate) fn flush(core: &mut Main, now: Instant) {
    let stopping = core.flight.is_stopping();
    let fleet = &core.fleet;
    let (out, late) = core.rounds.flush(now, stopping, |minion, path| {
        fleet.build_of(minion, path).is_none()
    });
    core.perform(out);
    for late in late {
        core.launcher.record_launch_latency(late);
    }
}
