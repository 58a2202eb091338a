//! What is final only once stored: a target's outcome, a slot's record; and the way out
//! of storage trouble (`health/storage.rs` keeps the state, this file acts on it).
//!
//! - A target's outcome is written when decided (`Effect::RecordOutcome`). When the write
//!   fails the target stays `Finishing`, its wrapper keeps its exit (no `done` goes out),
//!   and the write is tried again with a backoff until it succeeds; a wrapper that comes
//!   back meanwhile is welcomed and its resent `exited` changes nothing.
//! - A slot whose run (or skip) could not be recorded is counted at once and recorded as
//!   skipped, with the true reason, when the database stores again.
//! - While the database does not store, a probe write every few seconds ends the trouble
//!   even when nothing else writes.

use std::time::Instant;

use crate::ipc::rpc::CallError;
use crate::roles::main::health::storage::UnrecordedSlot;
use crate::roles::main::shell::run::effects::{apply, now_ms};
use crate::roles::main::shell::{DbWait, Main};
use crate::wire::db::{DbReply, DbRequest, NewRun};
use crate::wire::records::RunState;

/// Once a second: the outcomes whose next write is due, the probe while the database
/// does not store and the slots to record once it does.
pub(crate) fn tick(core: &mut Main, now: Instant) {
    for (run, machine) in core.storage.due_outcomes(now) {
        let effects = match core.target_mut(run, &machine) {
            Some(t) => t.record_again(),
            None => Vec::new(),
        };
        if effects.is_empty() {
            // Reconciled, retried or gone meanwhile: nothing to write any more.
            core.storage.outcome_settled(run, &machine);
        }
        apply(core, run, &machine, effects);
    }
    if core.storage.probe_due(now) {
        core.db_call(
            DbRequest::SetMeta {
                key: "storage_probe".into(),
                value: now_ms().to_string(),
            },
            DbWait::then(|_, _, result| {
                if let Err(e) = result {
                    log::debug!("storage probe: {e}");
                }
            }),
        );
    }
    for slot in core.storage.take_unrecorded() {
        record_slot(core, slot);
    }
}

/// A slot whose run could not be recorded at the time, recorded now as skipped.
fn record_slot(core: &mut Main, slot: UnrecordedSlot) {
    log::info!(
        "{}: recording slot {} as skipped ({})",
        slot.job,
        slot.slot,
        slot.why
    );
    let req = DbRequest::CreateRun(NewRun {
        job: slot.job.clone(),
        slot: Some(slot.slot),
        trigger: slot.trigger,
        state: RunState::Skipped,
        reason: Some(slot.why.clone()),
        targets: Vec::new(),
        now: now_ms(),
    });
    core.db_call(
        req,
        DbWait::then(move |core, _, result| {
            if result.is_err() {
                core.storage.keep_unrecorded(slot);
            }
        }),
    );
}

/// db answered the record of a skipped slot (or of a slot's run that does not run).
pub(crate) fn slot_recorded(
    core: &mut Main,
    slot: UnrecordedSlot,
    result: Result<DbReply, CallError>,
) {
    if let Err(e) = result {
        log::warn!(
            "{}: slot {} could not be recorded ({e}); it is recorded once the database \
             stores again",
            slot.job,
            slot.slot
        );
        core.storage.slot_not_recorded(slot);
    }
}

/// The run of a slot could not be recorded: it does not run, and is recorded as skipped
/// with the reason once the database stores.
pub(crate) fn run_not_recorded(
    core: &mut Main,
    job: &str,
    slot: Option<crate::wire::records::Millis>,
    trigger: crate::wire::records::Trigger,
    why: &str,
) {
    let Some(slot) = slot else {
        return; // a run asked for by an operator: the operator got the error
    };
    core.storage.slot_not_recorded(UnrecordedSlot {
        job: job.to_string(),
        slot,
        trigger,
        why: format!("storage: the database could not record the run at its slot ({why})"),
    });
}
