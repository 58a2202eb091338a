//! The loop's one match over [`Message`]: what each message does, and to which part. It
//! runs after every event, before the Workflows are woken (`main_loop::pump`), until no
//! message is left (a part's answer may post another).

use crate::roles::main::messages::Message;
use crate::roles::main::requests::answer::send_run;
use crate::roles::main::shell::views;
use crate::roles::main::state::MainRole;
use crate::roles::main::views::answer::live_base_read;
use crate::wire::records::now_ms;

/// Most messages handled in one turn: a part that posts forever cannot hold the loop.
const MAX_PER_TURN: usize = 100_000;

/// Hand every message posted to the part it is for.
pub(super) fn drain(role: &mut MainRole) {
    let core = &mut role.core;
    for _ in 0..MAX_PER_TURN {
        let Some(msg) = core.inbox.pop_front() else {
            return;
        };
        match msg {
            Message::MaintenanceSaved { call, note, result } => {
                let out = core
                    .maintenance
                    .saved(&core.config.maintenance, call, note, result);
                core.perform(out);
            }
            Message::RunChanged(run) => views::run_changed(core, run),
            Message::RunEnded(end) => {
                for call in &end.waiters {
                    // The stored record is the truth (ended time, state): read it back.
                    send_run(core, *call, end.run);
                }
                let out = core.views.run_ended(end, now_ms());
                core.perform(out);
            }
            Message::FollowLatest { call, result } => {
                let out = core.views.live().latest_read(call, result);
                core.perform(out);
            }
            Message::FollowRun { call, result } => views::follow_run(core, call, result),
            Message::FollowRead {
                call,
                machine,
                result,
            } => {
                let out = core.views.live().output_read(call, &machine, result);
                core.perform(out);
            }
            Message::FollowEnd { call, result } => {
                let out = core.views.live().end_read(call, result);
                core.perform(out);
            }
            Message::LiveBase {
                call,
                upto_seq,
                result,
            } => core.perform(live_base_read(call, upto_seq, result)),
            Message::LastRuns(result) => core.views.ui().last_runs(result),
            Message::MirrorInFlight(result) => {
                let standby = views::standby(core);
                let out = core.views.mirror_in_flight(result, standby);
                core.perform(out);
            }
            Message::MirrorRun { run, result } => views::mirror_run(core, run, result),
            Message::MirrorFeed {
                run,
                machine,
                result,
            } => {
                let out = core.views.mirror_feed(run, machine, result);
                core.perform(out);
            }
            Message::MirrorBase {
                call,
                run,
                machine,
                result,
            } => {
                let out = core.views.mirror_base(call, run, machine, result);
                core.perform(out);
            }
        }
    }
    log::warn!(
        "{} messages are left for the next turn: more than {MAX_PER_TURN} were posted in this one",
        core.inbox.len()
    );
}
