//! The main <-> db link: one request enum, one reply enum.
//!
//! Writes are applied in batches: the db loop reads every request available, applies them
//! in one transaction, commits, and only then answers — so an `OutputStored` reply (which
//! main turns into an `ack` to the wrapper) always means the bytes are durable.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::output::{OutputBytes, OutputLimit, OutputQuery};
use super::runs::{
    NewRun, PruneOutcome, Retention, RunFilter, RunUpdate, TargetDetail, TargetUpdate,
};
use super::store::{EventFilter, EventRecord, NewEvent};
use crate::wire::records::{Millis, RunId, RunRecord};
use crate::wire::wrapper::Stream;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DbRequest {
    CreateRun(NewRun),
    UpdateRun {
        run: RunId,
        update: RunUpdate,
    },
    UpdateTarget {
        run: RunId,
        machine: String,
        update: TargetUpdate,
    },
    AppendOutput {
        run: RunId,
        machine: String,
        seq: u64,
        stream: Stream,
        data: Vec<u8>,
        limit: OutputLimit,
    },
    GetRun(RunId),
    /// Runs in flight with their targets' session details (restart recovery).
    InFlightDetails,
    GetTarget {
        run: RunId,
        machine: String,
    },
    ListRuns(RunFilter),
    LastRuns,
    InFlight,
    Output {
        run: RunId,
        machine: String,
        query: OutputQuery,
    },
    GetMeta(String),
    SetMeta {
        key: String,
        value: String,
    },
    RecordEvent(NewEvent),
    /// Apply retention to one job's final runs.
    Prune {
        job: String,
        retention: Retention,
    },
    /// Give freed pages back to the file system (after the batch's commit).
    Reclaim,
    /// Runs in flight with their targets, or one run (a lost wrapper coming back).
    RunDetails(RunId),
    ListEvents(EventFilter),
    /// The newest recorded slot of every job (missed slots after downtime).
    LastSlots,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DbReply {
    /// `None`: the (job, slot) was already recorded; nothing was created.
    RunCreated(Option<RunId>),
    Done,
    /// Every seq up to `contiguous_seq` is committed.
    OutputStored {
        contiguous_seq: u64,
    },
    Run(Option<RunRecord>),
    InFlightDetails(Vec<(RunRecord, Vec<TargetDetail>)>),
    Target(Option<TargetDetail>),
    Runs(Vec<RunRecord>),
    LastRuns(BTreeMap<String, RunRecord>),
    Output(OutputBytes),
    Meta(Option<String>),
    Events(Vec<EventRecord>),
    Pruned(PruneOutcome),
    RunDetails(Option<(RunRecord, Vec<TargetDetail>)>),
    LastSlots(BTreeMap<String, Millis>),
}

/// db never calls main; it only tells it its commit latency now and then (casts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DbNotice {
    /// Seconds from the start of each batch transaction to its commit, since start.
    CommitLatency(crate::metrics::Histogram),
}
