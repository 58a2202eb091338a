//! The loop's one match over [`Message`]: what each message does, and to which part. It
//! runs after every event, before the Workflows are woken (`main_loop::pump`), until no
//! message is left (a part's answer may post another).

use crate::roles::main::messages::Message;
use crate::roles::main::state::MainRole;

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
            Message::JobCtlSaved { call, note, result } => {
                let out = core.jobctl.saved(call, note, result);
                core.perform(out);
            }
        }
    }
    log::warn!(
        "{} messages are left for the next turn: more than {MAX_PER_TURN} were posted in this one",
        core.inbox.len()
    );
}
