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
use super::{attempts, deliveries, events, output, runs, salt_calls, wrappers};
#[cfg(test)]
use crate::wire::db::OutputLimit;
use crate::wire::db::{
    AttemptRecord, EventFilter, EventRecord, KeptOutcome, NewEvent, NewRun, OutputBytes,
    OutputQuery, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail, TargetUpdate,
    WrapperSeen,
};
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DueDeliveries, NewDelivery,
};
use crate::wire::records::{Millis, RunId, RunRecord};
use crate::wire::wrapper::Stream;

/// A run with the session details of its targets.
pub(crate) type RunWithDetails = (RunRecord, Vec<TargetDetail>);

/// Declares [`Operations`] and its one implementation over `sql::Db` from one list: an
/// operation's signature is written once, beside the module whose function does it.
macro_rules! operations {
    ($(
        $(#[$doc:meta])*
        fn $name:ident(&mut self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty => $module:ident;
    )*) => {
        /// What the `db` loop does to the data, the same on both backends (`sql::Db`).
        pub(crate) trait Operations {
            $( $(#[$doc])* fn $name(&mut self $(, $arg: $ty)*) -> $ret; )*
            /// One output frame on its own: [`Storage::append_output_placed`] with no later frame
            /// of the same batch to consider.
            #[cfg(test)]
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
        }

        impl<D: Db> Operations for D {
            $(
                fn $name(&mut self $(, $arg: $ty)*) -> $ret {
                    $module::$name(self $(, $arg)*)
                }
            )*
        }
    };
}

operations! {
    fn get_meta(&mut self, key: &str) -> Result<Option<String>, StoreError> => events;
    fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> => events;
    /// Writes a setting unless one is there already (shared state two servers may
    /// create at the same time).
    fn insert_meta_if_absent(&mut self, key: &str, value: &str)
        -> Result<(), StoreError> => events;
    fn record_event(&mut self, event: &NewEvent) -> Result<u64, StoreError> => events;
    fn list_events(&mut self, filter: &EventFilter)
        -> Result<Vec<EventRecord>, StoreError> => events;
    /// Pending export requests in the outbox (the job log's backlog bound).
    fn export_backlog(&mut self) -> Result<i64, StoreError> => events;
    /// Fleet state (`wrappers.rs`): upserts by (minion, path), a stored row seen later
    /// than the incoming one kept.
    fn record_wrappers(&mut self, rows: &[WrapperSeen]) -> Result<(), StoreError> => wrappers;
    /// Deletes the row of (minion, path); whether there was one.
    fn forget_wrapper(&mut self, minion: &str, path: &str)
        -> Result<bool, StoreError> => wrappers;
    /// Every row, by minion then path.
    fn wrappers(&mut self) -> Result<Vec<WrapperSeen>, StoreError> => wrappers;
    /// Several masters (`salt_calls.rs`): a Salt call asked of another server.
    fn send_salt_call(&mut self, from: &str, to: &str, request: &[u8], now: i64)
        -> Result<i64, StoreError> => salt_calls;
    /// The pending calls asked of `me`, taken.
    fn take_salt_calls(&mut self, me: &str)
        -> Result<Vec<(i64, String, Vec<u8>)>, StoreError> => salt_calls;
    /// The reply to a call served; false when its row is gone.
    fn answer_salt_call(&mut self, id: i64, reply: &[u8]) -> Result<bool, StoreError> => salt_calls;
    /// The answered calls `me` asked, taken and deleted.
    fn take_salt_replies(&mut self, me: &str)
        -> Result<Vec<(i64, Vec<u8>)>, StoreError> => salt_calls;
    /// Deletes the stale calls.
    fn expire_salt_calls(&mut self, now: i64) -> Result<u64, StoreError> => salt_calls;
    /// Writes `me`'s heartbeat; the other servers alive.
    fn salt_heartbeat(&mut self, me: &str, now: i64) -> Result<Vec<String>, StoreError> => salt_calls;
    /// Brings `me`'s published minion keys from `before` to `now_keys`.
    fn publish_minion_keys(
        &mut self,
        me: &str,
        before: Option<&BTreeMap<String, String>>,
        now_keys: &BTreeMap<String, String>,
        now: i64,
    ) -> Result<(usize, usize), StoreError> => salt_calls;
    /// Count and latest write of the other servers' keys.
    fn minion_keys_stamp(&mut self, me: &str) -> Result<(i64, i64), StoreError> => salt_calls;
    /// The other servers' keys: (server, minion, PEM).
    fn minion_keys_of_others(&mut self, me: &str)
        -> Result<Vec<(String, String, String)>, StoreError> => salt_calls;
    fn create_run(&mut self, run: &NewRun) -> Result<Option<RunId>, StoreError> => runs;
    fn update_run(&mut self, run: RunId, update: &RunUpdate) -> Result<(), StoreError> => runs;
    /// `Some`: the target's final outcome was stored already, and is kept as it is.
    fn update_target(&mut self, run: RunId, machine: &str, update: &TargetUpdate)
        -> Result<Option<KeptOutcome>, StoreError> => runs;
    fn get_run(&mut self, run: RunId) -> Result<Option<RunRecord>, StoreError> => runs;
    fn run_details(&mut self, run: RunId) -> Result<Option<RunWithDetails>, StoreError> => runs;
    fn in_flight_details(&mut self) -> Result<Vec<RunWithDetails>, StoreError> => runs;
    fn list_runs(&mut self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> => runs;
    fn last_run_per_job(&mut self) -> Result<BTreeMap<String, RunRecord>, StoreError> => runs;
    fn last_slot_per_job(&mut self) -> Result<BTreeMap<String, Millis>, StoreError> => runs;
    fn prune(&mut self, job: &str, retention: &Retention)
        -> Result<PruneOutcome, StoreError> => runs;
    fn prune_deliveries(&mut self, job: &str, retention: &Retention)
        -> Result<u64, StoreError> => deliveries;
    fn queue_deliveries(&mut self, new: &[NewDelivery])
        -> Result<u64, StoreError> => deliveries;
    fn take_due_deliveries(&mut self, now: Millis, limit: usize, lease_ms: i64)
        -> Result<DueDeliveries, StoreError> => deliveries;
    fn record_delivery_attempt(&mut self, attempt: &DeliveryAttempt)
        -> Result<(), StoreError> => deliveries;
    fn release_delivery_leases(&mut self, now: Millis) -> Result<u64, StoreError> => deliveries;
    fn list_deliveries(&mut self, filter: &DeliveryFilter)
        -> Result<Vec<DeliveryRecord>, StoreError> => deliveries;
    fn retry_target(&mut self, run: RunId, machine: &str, attempt: u32)
        -> Result<(), StoreError> => attempts;
    fn target_attempts(&mut self, run: RunId)
        -> Result<Vec<AttemptRecord>, StoreError> => attempts;
    /// `append_output` knowing what follows the frame in its batch (`Placement`).
    fn append_output_placed(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        stream: Stream,
        data: &[u8],
        placement: Placement,
    ) -> Result<AppendOutcome, StoreError> => output;
    /// Every seq up to the value is stored for the target (or accounted for).
    fn max_contiguous_seq(&mut self, run: RunId, machine: &str) -> Result<u64, StoreError> => output;
    fn read_output(&mut self, run: RunId, machine: &str, query: &OutputQuery)
        -> Result<OutputBytes, StoreError> => output;
    fn output_tails(&mut self, run: RunId, bytes: u64, max_targets: usize)
        -> Result<Vec<(String, String)>, StoreError> => output;
}

/// What the `db` loop does to its database: the shared [`Operations`] and what each
/// backend does its own way.
pub(crate) trait Storage: Operations {
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
pub(crate) struct Heard {
    /// The connection is new: whatever was announced before it listened is not here.
    pub fresh: bool,
    pub payloads: Vec<String>,
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
