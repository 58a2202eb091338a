//! db's requests, one by one and as a batch: which store operation answers each
//! `DbRequest` (`apply_in_batch`), a batch in one transaction (`apply_batch`), and how a
//! batch is named in the log (`batch_summary`).

use crate::ipc::CallId;
use crate::wire::db::{DbReply, DbRequest};

use super::storage::Storage;
use super::store::StoreError;
use super::{joblog, live, output, placement};

#[cfg(test)]
/// Apply one request to the store.
pub(crate) fn apply(store: &mut dyn Storage, req: &DbRequest) -> Result<DbReply, StoreError> {
    apply_in_batch(store, req, 0)
}

/// Apply one request of a batch; `superseded` is its hint from
/// [`placement::superseded_hints`] (used by output frames only).
fn apply_in_batch(
    store: &mut dyn Storage,
    req: &DbRequest,
    superseded: u64,
) -> Result<DbReply, StoreError> {
    Ok(match req {
        DbRequest::CreateRun(run) => DbReply::RunCreated(store.create_run(run)?),
        DbRequest::UpdateRun { run, update } => {
            store.update_run(*run, update)?;
            DbReply::Done
        }
        DbRequest::UpdateTarget {
            run,
            machine,
            update,
        } => match store.update_target(*run, machine, update)? {
            None => DbReply::Done,
            Some(kept) => DbReply::OutcomeKept(kept),
        },
        DbRequest::AppendOutput {
            run,
            machine,
            seq,
            stream,
            data,
            limit,
        } => {
            let placement = output::Placement {
                limit: *limit,
                superseded,
            };
            let outcome =
                store.append_output_placed(*run, machine, *seq, *stream, data, placement)?;
            DbReply::OutputStored {
                contiguous_seq: outcome.contiguous_seq,
            }
        }
        DbRequest::StoredSeq { run, machine } => DbReply::OutputStored {
            contiguous_seq: store.max_contiguous_seq(*run, machine)?,
        },
        DbRequest::GetRun(run) => DbReply::Run(store.get_run(*run)?),
        DbRequest::InFlightDetails => DbReply::InFlightDetails(store.in_flight_details()?),
        DbRequest::ListRuns(filter) => DbReply::Runs(store.list_runs(filter)?),
        DbRequest::LastRuns => DbReply::LastRuns(store.last_run_per_job()?),
        DbRequest::Output {
            run,
            machine,
            query,
        } => DbReply::Output(store.read_output(*run, machine, query)?),
        DbRequest::GetMeta(key) => DbReply::Meta(store.get_meta(key)?),
        DbRequest::SetMeta { key, value } => {
            store.set_meta(key, value)?;
            DbReply::Done
        }
        DbRequest::RecordEvent(event) => {
            store.record_event(event)?;
            DbReply::Done
        }
        DbRequest::ListEvents(filter) => DbReply::Events(store.list_events(filter)?),
        DbRequest::Prune { job, retention } => {
            let pruned = store.prune(job, retention)?;
            store.prune_deliveries(job, retention)?;
            DbReply::Pruned(pruned)
        }
        DbRequest::RunDetails(run) => DbReply::RunDetails(store.run_details(*run)?),
        // Done after the batch's commit (see `serve`); nothing to do inside it.
        DbRequest::Reclaim => DbReply::Done,
        DbRequest::LastSlots => DbReply::LastSlots(store.last_slot_per_job()?),
        DbRequest::QueueDeliveries(new) => DbReply::DeliveriesQueued(store.queue_deliveries(new)?),
        DbRequest::TakeDueDeliveries {
            now,
            limit,
            lease_ms,
        } => DbReply::DueDeliveries(store.take_due_deliveries(*now, *limit, *lease_ms)?),
        DbRequest::RecordDeliveryAttempt(attempt) => {
            store.record_delivery_attempt(attempt)?;
            DbReply::Done
        }
        DbRequest::ReleaseDeliveryLeases { now } => {
            store.release_delivery_leases(*now)?;
            DbReply::Done
        }
        DbRequest::ListDeliveries(filter) => DbReply::Deliveries(store.list_deliveries(filter)?),
        DbRequest::OutputTails {
            run,
            bytes,
            max_targets,
        } => DbReply::OutputTails(store.output_tails(*run, *bytes, *max_targets)?),
        DbRequest::RetryTarget {
            run,
            machine,
            attempt,
        } => {
            store.retry_target(*run, machine, *attempt)?;
            DbReply::Done
        }
        DbRequest::TargetAttempts(run) => DbReply::Attempts(store.target_attempts(*run)?),
        DbRequest::JobLog(log) => {
            joblog::write_job_log(store, log, crate::wire::records::now_ms())?;
            DbReply::Done
        }
        DbRequest::RecordWrappers(rows) => {
            store.record_wrappers(rows)?;
            DbReply::Done
        }
        DbRequest::ForgetWrapper { minion, path } => {
            store.forget_wrapper(minion, path)?;
            DbReply::Done
        }
        DbRequest::Wrappers => DbReply::Wrappers(store.wrappers()?),
        DbRequest::SendSaltCall { from, to, request } => {
            let now = crate::wire::records::now_ms();
            DbReply::SaltCallSent(store.send_salt_call(from, to, request, now)?)
        }
        DbRequest::AnswerSaltCall { id, reply } => {
            if !store.answer_salt_call(*id, reply)? {
                log::warn!(
                    "salt call {id}: its row is gone (expired, or its asker gave up); \
                     the reply is dropped"
                );
            }
            DbReply::Done
        }
    })
}

/// Apply a batch in one transaction; `Err` if the transaction itself could not commit.
pub(crate) fn apply_batch(
    store: &mut dyn Storage,
    calls: &[(CallId, DbRequest)],
) -> Result<Vec<Result<DbReply, StoreError>>, StoreError> {
    let hints = placement::superseded_hints(calls.iter().map(|(_, req)| req));
    store.begin_batch()?;
    let mut results = Vec::with_capacity(calls.len());
    // SQLite rolls the whole transaction back on a full disk; what the batch then
    // reports is that first cause, not the rollback it led to.
    let mut full = None;
    for ((_, req), superseded) in calls.iter().zip(hints) {
        match apply_in_batch(store, req, superseded) {
            Err(lost @ StoreError::BatchLost { .. }) => {
                let _ = store.rollback_batch();
                return Err(full.unwrap_or(lost));
            }
            Err(StoreError::DiskFull { op }) => {
                full.get_or_insert(StoreError::DiskFull { op });
                results.push(Err(StoreError::DiskFull { op }));
            }
            result => results.push(result),
        }
    }
    // The standbys hear of the batch's changes if, and when, it commits.
    if let Err(lost) = live::announce(store, calls, &results) {
        let _ = store.rollback_batch();
        return Err(full.unwrap_or(lost));
    }
    if let Err(e) = store.commit_batch() {
        let _ = store.rollback_batch();
        return Err(full.unwrap_or(e));
    }
    Ok(results)
}

/// What a batch holds, by kind: "12 requests: 10 append output, 2 update target".
pub(super) fn batch_summary(calls: &[(CallId, DbRequest)]) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for (_, req) in calls {
        let k = kind(req);
        match kinds.iter_mut().find(|(name, _)| *name == k) {
            Some((_, n)) => *n += 1,
            None => kinds.push((k, 1)),
        }
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("{} requests: {}", calls.len(), parts.join(", "))
}

pub(super) fn kind(req: &DbRequest) -> &'static str {
    match req {
        DbRequest::CreateRun(_) => "create run",
        DbRequest::UpdateRun { .. } => "update run",
        DbRequest::UpdateTarget { .. } => "update target",
        DbRequest::AppendOutput { .. } => "append output",
        DbRequest::StoredSeq { .. } => "read stored output seq",
        DbRequest::GetRun(_) => "get run",
        DbRequest::InFlightDetails => "runs in flight",
        DbRequest::ListRuns(_) => "list runs",
        DbRequest::LastRuns => "last runs",
        DbRequest::Output { .. } => "read output",
        DbRequest::GetMeta(_) => "read setting",
        DbRequest::SetMeta { .. } => "write setting",
        DbRequest::RecordEvent(_) => "record event",
        DbRequest::ListEvents(_) => "list events",
        DbRequest::Prune { .. } => "apply retention",
        DbRequest::Reclaim => "reclaim space",
        DbRequest::RunDetails(_) => "run details",
        DbRequest::LastSlots => "last slots",
        DbRequest::QueueDeliveries(_) => "queue notifications",
        DbRequest::TakeDueDeliveries { .. } => "take due notifications",
        DbRequest::RecordDeliveryAttempt(_) => "record notification attempt",
        DbRequest::ReleaseDeliveryLeases { .. } => "release notification leases",
        DbRequest::ListDeliveries(_) => "list notifications",
        DbRequest::OutputTails { .. } => "read output tails",
        DbRequest::RetryTarget { .. } => "start a new attempt",
        DbRequest::TargetAttempts(_) => "read attempts",
        DbRequest::JobLog(_) => "write job log",
        DbRequest::RecordWrappers(_) => "record wrapper builds",
        DbRequest::ForgetWrapper { .. } => "forget a wrapper build",
        DbRequest::Wrappers => "read wrapper builds",
        DbRequest::SendSaltCall { .. } => "ask another server for a salt call",
        DbRequest::AnswerSaltCall { .. } => "answer another server's salt call",
    }
}
