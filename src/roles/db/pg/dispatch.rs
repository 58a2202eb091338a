//! [`Storage`] for [`PgStore`]: each operation of the interface to its PostgreSQL twin.

use std::collections::BTreeMap;

use super::super::output::{AppendOutcome, Placement};
use super::super::storage::{RunWithDetails, Storage};
use super::super::store::StoreError;
use super::PgStore;
use crate::wire::db::{
    AttemptRecord, EventFilter, EventRecord, NewEvent, NewRun, OutputBytes, OutputQuery,
    PruneOutcome, Retention, RunFilter, RunUpdate, TargetUpdate, WrapperSeen,
};
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DueDeliveries, NewDelivery,
};
use crate::wire::records::{Millis, RunId, RunRecord};
use crate::wire::wrapper::Stream;

impl Storage for PgStore {
    fn engine(&self) -> &'static str {
        "postgresql"
    }
    fn begin_batch(&mut self) -> Result<(), StoreError> {
        PgStore::begin_batch(self)
    }
    fn commit_batch(&mut self) -> Result<(), StoreError> {
        PgStore::commit_batch(self)
    }
    fn rollback_batch(&mut self) -> Result<(), StoreError> {
        PgStore::rollback_batch(self)
    }
    fn reclaim_after_prune(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> {
        PgStore::create_run(self, run)
    }
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> {
        PgStore::update_run(self, run, update)
    }
    fn update_target(
        &mut self,
        run: RunId,
        machine: &str,
        update: &TargetUpdate,
    ) -> Result<(), StoreError> {
        PgStore::update_target(self, run, machine, update)
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
        PgStore::append_output_placed(self, run, machine, seq, stream, data, placement)
    }
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        PgStore::get_run(self, run)
    }
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError> {
        PgStore::run_details(self, run)
    }
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError> {
        PgStore::in_flight_details(self)
    }
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        PgStore::list_runs(self, filter)
    }
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError> {
        PgStore::last_run_per_job(self)
    }
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError> {
        PgStore::last_slot_per_job(self)
    }
    fn read_output(
        &mut self,
        run: RunId,
        machine: &str,
        query: &OutputQuery,
    ) -> Result<OutputBytes, StoreError> {
        PgStore::read_output(self, run, machine, query)
    }
    fn output_tails(
        &mut self,
        run: RunId,
        bytes: u64,
        max_targets: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        PgStore::output_tails(self, run, bytes, max_targets)
    }
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError> {
        PgStore::get_meta(self, key)
    }
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        PgStore::set_meta(self, key, value)
    }
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> {
        PgStore::record_event(self, event)
    }
    fn list_events(&mut self, filter: &EventFilter) -> Result<Vec<EventRecord>, StoreError> {
        PgStore::list_events(self, filter)
    }
    fn prune(&mut self, job: &str, retention: &Retention) -> Result<PruneOutcome, StoreError> {
        PgStore::prune(self, job, retention)
    }
    fn prune_deliveries(&mut self, job: &str, retention: &Retention) -> Result<u64, StoreError> {
        PgStore::prune_deliveries(self, job, retention)
    }
    fn queue_deliveries(&mut self, new: &[NewDelivery]) -> Result<u64, StoreError> {
        PgStore::queue_deliveries(self, new)
    }
    fn take_due_deliveries(
        &mut self,
        now: Millis,
        limit: usize,
        lease_ms: i64,
    ) -> Result<DueDeliveries, StoreError> {
        PgStore::take_due_deliveries(self, now, limit, lease_ms)
    }
    fn record_delivery_attempt(&mut self, attempt: &DeliveryAttempt) -> Result<(), StoreError> {
        PgStore::record_delivery_attempt(self, attempt)
    }
    fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> {
        PgStore::release_delivery_leases(self, now)
    }
    fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        PgStore::list_deliveries(self, filter)
    }
    fn retry_target(&mut self, run: RunId, machine: &str, attempt: u32) -> Result<(), StoreError> {
        PgStore::retry_target(self, run, machine, attempt)
    }
    fn target_attempts(&mut self, run: RunId) -> Result<Vec<AttemptRecord>, StoreError> {
        PgStore::target_attempts(self, run)
    }
    fn export_backlog(&mut self) -> Result<i64, StoreError> {
        PgStore::export_backlog(self)
    }
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError> {
        PgStore::record_wrappers(self, rows)
    }
    fn forget_wrapper(&mut self, minion: &str, path: &str) -> Result<bool, StoreError> {
        PgStore::forget_wrapper(self, minion, path)
    }
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError> {
        PgStore::wrappers(self)
    }
    fn insert_meta_if_absent(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        PgStore::insert_meta_if_absent(self, key, value)
    }
    fn hold_lease(&mut self) -> Result<bool, StoreError> {
        self.lease.hold()
    }
    fn release_lease(&mut self) {
        self.lease.release();
    }
    fn shared(&self) -> bool {
        true
    }
    fn announce_live(&mut self, payloads: &[String]) -> Result<(), StoreError> {
        PgStore::announce_live(self, payloads)
    }
    fn hear_live(
        &mut self,
        listen: bool,
        max: usize,
    ) -> Result<Option<super::super::storage::Heard>, StoreError> {
        self.listener.hear(listen, max)
    }
}
