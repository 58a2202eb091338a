//! The one storage interface of the `db` loop, with its two implementations: the embedded
//! SQLite [`Store`] (the default) and PostgreSQL ([`super::pg::PgStore`], chosen by
//! `database_url: postgres://…`).
//!
//! The trait lists exactly what `db::apply` and the batch loop need; each backend keeps
//! its own SQL beside its own data (`runs.rs`, `output.rs`, ... for SQLite, `pg/` for
//! PostgreSQL). The semantics are the same, and `storage_tests.rs` runs one suite against
//! both: a (job, slot) recorded at most once, output idempotent by seq within head and
//! tail limits, writes durable only at `commit_batch`, retention, events, the outbox,
//! the fleet state of wrapper builds.
//!
//! Only PostgreSQL can be shared by several daemons, so the leader lease
//! ([`Storage::hold_lease`]) always succeeds on SQLite: one daemon, one leader.

use std::collections::BTreeMap;

use super::output::{AppendOutcome, Placement};
use super::store::{Store, StoreError};
use crate::wire::db::{
    AttemptRecord, EventFilter, EventRecord, NewEvent, NewRun, OutputBytes, OutputLimit,
    OutputQuery, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail, TargetUpdate,
    WrapperSeen,
};
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DueDeliveries, NewDelivery,
};
use crate::wire::records::{Millis, RunId, RunRecord};
use crate::wire::wrapper::Stream;

/// A run with the session details of its targets.
pub type RunWithDetails = (RunRecord, Vec<TargetDetail>);

/// What the `db` loop does to its database.
pub trait Storage {
    /// Which engine, for logs and `/metrics` (`sqlite`, `postgresql`).
    fn engine(&self) -> &'static str;

    fn begin_batch(&mut self) -> Result<(), StoreError>;
    fn commit_batch(&mut self) -> Result<(), StoreError>;
    fn rollback_batch(&mut self) -> Result<(), StoreError>;
    /// After a batch that pruned: give space back (SQLite); nothing on PostgreSQL, whose
    /// autovacuum does it.
    fn reclaim_after_prune(&mut self) -> Result<(), StoreError>;

    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError>;
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError>;
    fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError>;
    /// One output frame on its own: [`Storage::append_output_placed`] with no later frame
    /// of the same batch to consider.
    fn append_output(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        stream: Stream,
        data: &[u8],
        limit: OutputLimit,
    ) -> Result<AppendOutcome, StoreError> {
        self.append_output_placed(run, machine, seq, stream, data, limit.into())
    }
    /// `append_output` knowing what follows the frame in its batch (`Placement`).
    fn append_output_placed(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        stream: Stream,
        data: &[u8],
        placement: Placement,
    ) -> Result<AppendOutcome, StoreError>;
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError>;
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError>;
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError>;
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError>;
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError>;
    fn read_output(
        &mut self,
        run: RunId,
        machine: &str,
        query: &OutputQuery,
    ) -> Result<OutputBytes, StoreError>;
    fn output_tails(
        &mut self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError>;
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError>;
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Writes a setting unless one is there already (shared state two servers may
    /// create at the same time).
    fn insert_meta_if_absent(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        if self.get_meta(key)?.is_none() {
            self.set_meta(key, value)?;
        }
        Ok(())
    }
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError>;
    fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError>;
    fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError>;
    fn prune_deliveries(&mut self, job: &str, retention: &Retention) -> Result<u64, StoreError>;
    fn queue_deliveries(&mut self, new: &[NewDelivery]) -> Result<u64, StoreError>;
    fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError>;
    fn record_delivery_attempt(&mut self, attempt: &DeliveryAttempt) -> Result<(), StoreError>;
    fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError>;
    fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError>;
    fn retry_target(&mut self, run: RunId, machine: &str, attempt: u32) -> Result<(), StoreError>;
    fn target_attempts(&mut self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError>;
    /// Pending export requests in the outbox (the job log's backlog bound).
    fn export_backlog(&mut self) -> Result<i64, StoreError>;
    /// Fleet state (`wrappers.rs`): upserts by (minion, path), a stored row seen later
    /// than the incoming one kept.
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError>;
    /// Deletes the row of (minion, path); whether there was one.
    fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError>;
    /// Every row, by minion then path.
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError>;

    /// Takes or keeps the leader lease of the daemons sharing this database; true while
    /// this daemon holds it. A backend only one daemon can use always answers true.
    fn hold_lease(&mut self) -> Result<bool, StoreError> {
        Ok(true)
    }

    /// Gives the lease up (an ordered stop), so another daemon takes over at once.
    fn release_lease(&mut self) {}

    /// Whether other daemons may share this database and hear what a batch changed.
    fn shared(&self) -> bool {
        false
    }

    /// Tells the other daemons what the open batch changed (`live.rs`), delivered only if
    /// it commits. Nothing on a backend only one daemon can use.
    fn announce_live(&mut self, _payloads: &[String]) -> Result<(), StoreError> {
        Ok(())
    }

    /// While `listen`: listens for the leader's announcements and takes at most `max` of
    /// those heard; otherwise stops listening. `None`: nothing to report.
    fn hear_live(&mut self, _listen: bool, _max: usize) -> Result<Option<Heard>, StoreError> {
        Ok(None)
    }
}

/// What a standby's listening connection heard since the last take.
#[derive(Debug, Default)]
pub struct Heard {
    /// The connection is new: whatever was announced before it listened is not here.
    pub fresh: bool,
    pub payloads: Vec<String>,
}

impl Storage for Store {
    fn engine(&self) -> &'static str {
        "sqlite"
    }
    fn begin_batch(&mut self) -> Result<(), StoreError> {
        Store::begin_batch(self)
    }
    fn commit_batch(&mut self) -> Result<(), StoreError> {
        Store::commit_batch(self)
    }
    fn rollback_batch(&mut self) -> Result<(), StoreError> {
        Store::rollback_batch(self)
    }
    fn reclaim_after_prune(&mut self) -> Result<(), StoreError> {
        // Outside any transaction: give freed pages back, then shrink the log.
        self.reclaim_space(10_000).and_then(|()| self.checkpoint())
    }
    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> {
        Store::create_run(self, run)
    }
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> {
        Store::update_run(self, run, update)
    }
    fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError> {
        Store::update_target(self, run, machine, update)
    }
    fn append_output_placed(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        stream: Stream,
        data: &[u8],
        placement: Placement,
    ) -> Result<AppendOutcome, StoreError> {
        Store::append_output_placed(self, run, machine, seq, stream, data, placement)
    }
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        Store::get_run(self, run)
    }
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError> {
        Store::run_details(self, run)
    }
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError> {
        Store::in_flight_details(self)
    }
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        Store::list_runs(self, filter)
    }
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError> {
        Store::last_run_per_job(self)
    }
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError> {
        Store::last_slot_per_job(self)
    }
    fn read_output(
        &mut self,
        run: RunId,
        machine: &str,
        query: &OutputQuery,
    ) -> Result<OutputBytes, StoreError> {
        Store::read_output(self, run, machine, query)
    }
    fn output_tails(
        &mut self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Store::output_tails(self, run, bytes, max_targets)
    }
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        Store::get_meta(self, key)
    }
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        Store::set_meta(self, key, value)
    }
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> {
        Store::record_event(self, event)
    }
    fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        Store::list_events(self, filter)
    }
    fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError> {
        Store::prune(self, job, retention)
    }
    fn prune_deliveries(&mut self, job: &str, retention: &Retention) -> Result<u64, StoreError> {
        Store::prune_deliveries(self, job, retention)
    }
    fn queue_deliveries(&mut self, new: &[NewDelivery]) -> Result<u64, StoreError> {
        Store::queue_deliveries(self, new)
    }
    fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError> {
        Store::take_due_deliveries(self, now, limit, lease_ms)
    }
    fn record_delivery_attempt(&mut self, attempt: &DeliveryAttempt) -> Result<(), StoreError> {
        Store::record_delivery_attempt(self, attempt)
    }
    fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> {
        Store::release_delivery_leases(self, now)
    }
    fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        Store::list_deliveries(self, filter)
    }
    fn retry_target(&mut self, run: RunId, machine: &str, attempt: u32) -> Result<(), StoreError> {
        Store::retry_target(self, run, machine, attempt)
    }
    fn target_attempts(&mut self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError> {
        Store::target_attempts(self, run)
    }
    fn export_backlog(&mut self) -> Result<i64, StoreError> {
        Store::export_backlog(self)
    }
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError> {
        Store::record_wrappers(self, rows)
    }
    fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError> {
        Store::forget_wrapper(self, minion, path)
    }
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError> {
        Store::wrappers(self)
    }
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
