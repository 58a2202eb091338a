//! The loop's one match over [`Message`]: what each message does, and to which part. It
//! runs after every event, before the Workflows are woken (`main_loop::pump`), until no
//! message is left (a part's answer may post another).

use crate::roles::main::messages::Message;
use crate::roles::main::notify;
use crate::roles::main::state::MainRole;
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
            Message::NotifyLastRuns { result } => core.notify.last_runs(result),
            Message::NotifyTailsRead { decided, result } => {
                let limit = core.config.saltpeter.notify_rate_limit;
                let out = core.notify.tails_read(limit, *decided, result, now_ms());
                core.perform(out);
            }
            Message::NotifyQueued { result } => {
                let out = core.notify.queued(result, now_ms());
                core.perform(out);
            }
            Message::DeliveriesDue { result } => {
                let out = core.notify.due(&core.config.saltpeter, result, now_ms());
                core.perform(out);
            }
            Message::DeliveryAnswered { attempt, result } => {
                let out = core.notify.answered(attempt, result, now_ms());
                core.perform(out);
            }
            Message::DeliveriesListed {
                call,
                admin,
                result,
            } => core.perform(notify::deliveries::listed(call, admin, result)),
        }
    }
    log::warn!(
        "{} messages are left for the next turn: more than {MAX_PER_TURN} were posted in this one",
        core.inbox.len()
    );
}
