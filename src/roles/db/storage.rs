//! The one storage interface of the `db` loop, with its two backends: the embedded
//! SQLite [`Store`] (the default) and PostgreSQL ([`super::pg::PgStore`], chosen by
//! `database_url: postgres://…`).
//!
//! [`Operations`] is what the loop does to the data, written once over the small SQL
//! dialect of `sql.rs` (`runs.rs`, `attempts.rs`, `output.rs`, `deliveries.rs`,
//! `events.rs`, `wrappers.rs` hold the SQL beside its rules); [`Storage`] adds what each
//! backend does its own way: batches, giving space back, the leader lease, live
//! announcements. `storage_tests.rs` runs one suite against both: a (job, slot) recorded
//! at most once, output idempotent by seq within head and tail limits, writes durable
//! only at `commit_batch`, retention, events, the outbox, the fleet state of wrapper
//! builds.
//!
//! Only PostgreSQL can be shared by several daemons, so the leader lease
//! ([`Storage::hold_lease`]) always succeeds on SQLite: one daemon, one leader.

use std::collections::BTreeMap;

use super::errors::StoreError;
use super::output::{AppendOutcome, Placement};
use super::sql::Db;
use super::{attempts, deliveries, events, output, runs, wrappers};
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

/// What the `db` loop does to the data, the same on both backends (`sql::Db`).
pub trait Operations {
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError>;
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Writes a setting unless one is there already (shared state two servers may
    /// create at the same time).
    fn insert_meta_if_absent(&mut self, key: &str, value: &str) -> Result<(), StoreError>;
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError>;
    fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError>;
    /// Pending export requests in the outbox (the job log's backlog bound).
    fn export_backlog(&mut self) -> Result<i64, StoreError>;
    /// Fleet state (`wrappers.rs`): upserts by (minion, path), a stored row seen later
    /// than the incoming one kept.
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError>;
    /// Deletes the row of (minion, path); whether there was one.
    fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError>;
    /// Every row, by minion then path.
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError>;
    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError>;
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError>;
    fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError>;
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError>;
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError>;
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError>;
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError>;
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError>;
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
}

impl<D: Db> Operations for D {
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        events::get_meta(self, key)
    }
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        events::set_meta(self, key, value)
    }
    fn insert_meta_if_absent(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        events::insert_meta_if_absent(self, key, value)
    }
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> {
        events::record_event(self, event)
    }
    fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        events::list_events(self, filter)
    }
    fn export_backlog(&mut self) -> Result<i64, StoreError> {
        events::export_backlog(self)
    }
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError> {
        wrappers::record_wrappers(self, rows)
    }
    fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError> {
        wrappers::forget_wrapper(self, minion, path)
    }
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError> {
        wrappers::wrappers(self)
    }
    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> {
        runs::create_run(self, run)
    }
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> {
        runs::update_run(self, run, update)
    }
    fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError> {
        runs::update_target(self, run, machine, update)
    }
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        runs::get_run(self, run)
    }
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError> {
        runs::run_details(self, run)
    }
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError> {
        runs::in_flight_details(self)
    }
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        runs::list_runs(self, filter)
    }
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError> {
        runs::last_run_per_job(self)
    }
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError> {
        runs::last_slot_per_job(self)
    }
    fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError> {
        runs::prune(self, job, retention)
    }
    fn prune_deliveries(&mut self, job: &str, retention: &Retention) -> Result<u64, StoreError> {
        deliveries::prune_deliveries(self, job, retention)
    }
    fn queue_deliveries(&mut self, new: &[NewDelivery]) -> Result<u64, StoreError> {
        deliveries::queue_deliveries(self, new)
    }
    fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError> {
        deliveries::take_due_deliveries(self, now, limit, lease_ms)
    }
    fn record_delivery_attempt(&mut self, attempt: &DeliveryAttempt) -> Result<(), StoreError> {
        deliveries::record_delivery_attempt(self, attempt)
    }
    fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> {
        deliveries::release_delivery_leases(self, now)
    }
    fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        deliveries::list_deliveries(self, filter)
    }
    fn retry_target(&mut self, run: RunId, machine: &str, attempt: u32) -> Result<(), StoreError> {
        attempts::retry_target(self, run, machine, attempt)
    }
    fn target_attempts(&mut self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError> {
        attempts::target_attempts(self, run)
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
        output::append_output_placed(self, run, machine, seq, stream, data, placement)
    }
    fn read_output(
        &mut self,
        run: RunId,
        machine: &str,
        query: &OutputQuery,
    ) -> Result<OutputBytes, StoreError> {
        output::read_output(self, run, machine, query)
    }
    fn output_tails(
        &mut self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        output::output_tails(self, run, bytes, max_targets)
    }
}

/// What the `db` loop does to its database: the shared [`Operations`] and what each
/// backend does its own way.
pub trait Storage: Operations {
    /// Which engine, for logs and `/metrics` (`sqlite`, `postgresql`).
    fn engine(&self) -> &'static str;

    fn begin_batch(&mut self) -> Result<(), StoreError>;
    fn commit_batch(&mut self) -> Result<(), StoreError>;
    fn rollback_batch(&mut self) -> Result<(), StoreError>;
    /// After a batch that pruned: give space back (SQLite); nothing on PostgreSQL, whose
    /// autovacuum does it.
    fn reclaim_after_prune(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
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

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
