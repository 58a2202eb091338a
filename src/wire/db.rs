//! The main <-> db link: one request enum, one reply enum, one notice enum, and every
//! payload they carry.
//!
//! These are wire types: db's storage code reads and writes them, but they are declared
//! here so that changing a store struct cannot silently change what crosses the link.
//!
//! Writes are applied in batches: the db loop reads every request available, applies them
//! in one transaction, commits, and only then answers — so an `OutputStored` reply (which
//! main turns into an `ack` to the wrapper) always means the bytes are durable.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ipc::rpc::Packet;
use crate::wire::NoReply;
use crate::wire::notify::{
    DeliveryAttempt, DeliveryFilter, DeliveryRecord, DueDeliveries, NewDelivery,
};
use crate::wire::records::{
    Millis, RunId, RunRecord, RunState, TargetReason, TargetRecord, TargetState, Trigger,
};
use crate::wire::wrapper::Stream;

/// What main sends db (it answers no calls: db makes none); db receives exactly this type.
pub(crate) type MainToDb = Packet<DbRequest, NoReply>;
/// What db sends main; main receives exactly this type.
pub(crate) type DbToMain = Packet<DbNotice, DbReply>;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum DbRequest {
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
        #[serde(with = "crate::wire::bytes")]
        data: Vec<u8>,
        limit: OutputLimit,
    },
    /// How far a target's output is stored: asked when its wrapper's `exited` names an
    /// end beyond what main saw acknowledged (another server stored the rest before it
    /// took over).
    StoredSeq {
        run: RunId,
        machine: String,
    },
    GetRun(RunId),
    /// Runs in flight with their targets' session details (restart recovery).
    InFlightDetails,
    ListRuns(RunFilter),
    LastRuns,
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
    /// Queue notifications in the outbox (a key already queued is ignored).
    QueueDeliveries(Vec<NewDelivery>),
    /// Lease up to `limit` due notifications for `lease_ms`.
    TakeDueDeliveries {
        now: Millis,
        limit: usize,
        lease_ms: i64,
    },
    RecordDeliveryAttempt(DeliveryAttempt),
    /// At main's start: what was leased is due again.
    ReleaseDeliveryLeases {
        now: Millis,
    },
    ListDeliveries(DeliveryFilter),
    /// The last `bytes` of each target's output of a run (at most `max_targets`).
    OutputTails {
        run: RunId,
        bytes: u64,
        max_targets: usize,
    },
    /// Start attempt `attempt` of a failed target (`retries`).
    RetryTarget {
        run: RunId,
        machine: String,
        attempt: u32,
    },
    /// Every attempt of a run's targets that was retried.
    TargetAttempts(RunId),
    /// Events for the job's log file and the exports.
    JobLog(crate::wire::notify::JobLog),
    /// Remember which wrapper build each minion has, by (minion, path); a stored row
    /// seen later than the incoming one is kept.
    RecordWrappers(Vec<WrapperSeen>),
    /// The wrapper at `path` is gone from `minion` (a launch found it missing).
    ForgetWrapper {
        minion: String,
        path: String,
    },
    /// Every wrapper build remembered, by minion then path.
    Wrappers,
    /// Several masters: ask server `to` to make a Salt call through its master
    /// (`request`: a bincode `BlockingRequest`, nothing secret in it). The reply is the
    /// row's id; the answer comes as `DbNotice::SaltReplies`.
    SendSaltCall {
        from: String,
        to: String,
        #[serde(with = "crate::wire::bytes")]
        request: Vec<u8>,
    },
    /// Several masters: the answer (a bincode `Result<BlockingReply, String>`) to a Salt
    /// call another server asked of this one.
    AnswerSaltCall {
        id: i64,
        #[serde(with = "crate::wire::bytes")]
        reply: Vec<u8>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum DbReply {
    /// `None`: the (job, slot) was already recorded; nothing was created.
    RunCreated(Option<RunId>),
    Done,
    /// A target's final outcome was stored already (by another server, before this one
    /// took the run over): it is kept, and this is it.
    OutcomeKept(KeptOutcome),
    /// Every seq up to `contiguous_seq` is committed.
    OutputStored {
        contiguous_seq: u64,
    },
    Run(Option<RunRecord>),
    InFlightDetails(Vec<(RunRecord, Vec<TargetDetail>)>),
    Runs(Vec<RunRecord>),
    LastRuns(BTreeMap<String, RunRecord>),
    Output(OutputBytes),
    Meta(Option<String>),
    Events(Vec<EventRecord>),
    Pruned(PruneOutcome),
    RunDetails(Option<(RunRecord, Vec<TargetDetail>)>),
    LastSlots(BTreeMap<String, Millis>),
    /// How many were new.
    DeliveriesQueued(u64),
    DueDeliveries(DueDeliveries),
    Deliveries(Vec<DeliveryRecord>),
    OutputTails(Vec<(String, String)>),
    Attempts(Vec<AttemptRecord>),
    Wrappers(Vec<WrapperSeen>),
    /// The id of the `salt_calls` row written.
    SaltCallSent(i64),
}

/// Each request's reply, in one place: `core.links.take_db_reply::<calls::GetRun>(id)` gives
/// the `Option<RunRecord>`, and any other reply is a `CallError::WrongReply`.
pub(crate) mod calls {
    use super::*;
    use crate::ipc::Role;

    calls! { DbReply, Role::Db;
        CreateRun -> Option<RunId> { DbReply::RunCreated(id) => id }
        UpdateRun -> () { DbReply::Done => () }
        /// Every seq up to the value is committed.
        AppendOutput -> u64 { DbReply::OutputStored { contiguous_seq } => contiguous_seq }
        /// Every seq up to the value is committed.
        StoredSeq -> u64 { DbReply::OutputStored { contiguous_seq } => contiguous_seq }
        GetRun -> Option<RunRecord> { DbReply::Run(run) => run }
        InFlightDetails -> Vec<(RunRecord, Vec<TargetDetail>)> {
            DbReply::InFlightDetails(runs) => runs
        }
        ListRuns -> Vec<RunRecord> { DbReply::Runs(runs) => runs }
        LastRuns -> BTreeMap<String, RunRecord> { DbReply::LastRuns(runs) => runs }
        Output -> OutputBytes { DbReply::Output(out) => out }
        GetMeta -> Option<String> { DbReply::Meta(value) => value }
        SetMeta -> () { DbReply::Done => () }
        Prune -> PruneOutcome { DbReply::Pruned(outcome) => outcome }
        RunDetails -> Option<(RunRecord, Vec<TargetDetail>)> {
            DbReply::RunDetails(details) => details
        }
        ListEvents -> Vec<EventRecord> { DbReply::Events(events) => events }
        LastSlots -> BTreeMap<String, Millis> { DbReply::LastSlots(slots) => slots }
        QueueDeliveries -> u64 { DbReply::DeliveriesQueued(n) => n }
        TakeDueDeliveries -> DueDeliveries { DbReply::DueDeliveries(due) => due }
        ListDeliveries -> Vec<DeliveryRecord> { DbReply::Deliveries(list) => list }
        OutputTails -> Vec<(String, String)> { DbReply::OutputTails(tails) => tails }
        Wrappers -> Vec<WrapperSeen> { DbReply::Wrappers(list) => list }
    }
}

/// db never calls main; it only tells it its commit latency now and then (casts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum DbNotice {
    /// Seconds from the start of each batch transaction to its commit, since start.
    CommitLatency(crate::metrics::Histogram),
    /// The leader lease of the daemons sharing a PostgreSQL database (docs/ha.md): sent
    /// when it changes and every few seconds. Never sent on SQLite (one daemon, leader).
    Lease(LeaseReport),
    /// On a standby: the leader committed changes to these runs (docs/ha.md, "A
    /// standby's live views"). Hints only: what changed is read from the database.
    Live(LiveNotice),
    /// Several masters (docs/ha.md, "Several masters, one database"): Salt calls other
    /// servers ask this one to make through its master, taken from `salt_calls`.
    SaltCalls(Vec<SaltCallRow>),
    /// Answers to Salt calls this server asked of others: (row id, bincode
    /// `Result<BlockingReply, String>`), taken (and deleted) from `salt_calls`.
    SaltReplies(Vec<(i64, Vec<u8>)>),
    /// The other servers driving a salt-master, seen within `salt_servers`' window;
    /// sent when the set changes.
    SaltPeers(Vec<String>),
    /// Minion keys: the minions this server's master accepted, and the keys the other
    /// servers published (`minion_keys`); sent when either changes.
    MinionKeys(MinionKeys),
}

/// A Salt call another server asked of this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SaltCallRow {
    pub id: i64,
    pub from: String,
    /// A bincode `BlockingRequest`.
    #[serde(with = "crate::wire::bytes")]
    pub request: Vec<u8>,
}

/// The minion keys db read: this server's master's and the other servers' published ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MinionKeys {
    /// Minion ids with an accepted key in this server's own pki directory.
    pub own: Vec<String>,
    /// (server, minion, public key as PKCS#1 DER) of the other servers, by server then
    /// minion; rows that do not parse are left out (and logged by db).
    pub others: Vec<(String, String, Vec<u8>)>,
}

/// What the leader's commits changed, as a standby's db heard it (`NOTIFY
/// saltpeter_live`), coalesced per run and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveNotice {
    /// Changes may have been missed (the listener connected, again or for the first
    /// time, or too many came at once): read every run in flight again.
    pub resync: bool,
    pub changes: Vec<LiveChange>,
}

/// One run changed by a committed batch of the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LiveChange {
    pub run: RunId,
    pub kind: LiveKind,
    /// For output, the highest frame seq the batch committed; 0 for a run's record.
    pub seq: u64,
}

/// What of a run a committed batch changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum LiveKind {
    /// Its record or a target's (created, started, settled, retried).
    Run,
    /// Output of one of its targets.
    Output,
}

/// Where this daemon stands among the daemons sharing the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseReport {
    /// This daemon holds the lease: it fires the schedule and runs the runs.
    pub leader: bool,
    /// The database answered the last try; false while it is unreachable (and then
    /// `leader` is false: the lease cannot be confirmed).
    pub reachable: bool,
    /// The server that holds the lease, by the name it recorded (`None`: unknown).
    pub holder: Option<String>,
    /// The secret every server shares (tokens and resume keys derive from it), as hex;
    /// sent with the first report.
    pub shared_secret: Option<SharedSecret>,
}

/// A secret in transit on the main <-> db link; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SharedSecret(pub String);

impl std::fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedSecret(***)")
    }
}

// ---- payloads: runs and targets

/// A run to record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NewRun {
    pub job: String,
    /// Scheduled instant; `None` for a manual run.
    pub slot: Option<Millis>,
    pub trigger: Trigger,
    pub state: RunState,
    pub reason: Option<String>,
    /// Machines and their initial states (e.g. `pending`, `skipped_maintenance`).
    pub targets: Vec<(String, TargetState)>,
    pub now: Millis,
}

/// Changes to a run; only the fields that are `Some` change.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunUpdate {
    pub state: Option<RunState>,
    pub reason: Option<String>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
}

/// Changes to a target; only the fields that are `Some` change.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TargetUpdate {
    pub state: Option<TargetState>,
    pub reason: Option<TargetReason>,
    pub exit_code: Option<i32>,
    pub started: Option<Millis>,
    pub ended: Option<Millis>,
    pub last_seen: Option<Millis>,
    pub wrapper_version: Option<String>,
    /// SHA-256 (hex) of the session's resume key.
    pub resume_key_sha256: Option<String>,
    pub token_used: Option<bool>,
    /// Suspended by an operator (`targets.suspended`).
    pub suspended: Option<bool>,
    /// How the job's limits were applied (`targets.limits`).
    pub limits: Option<String>,
    /// The server whose master launched it (`targets.server`; several masters).
    pub server: Option<String>,
}

/// A target's final outcome as stored, when a later one was not written over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeptOutcome {
    pub reason: TargetReason,
    pub exit_code: Option<i32>,
    pub ended: Option<Millis>,
}

/// A target with the columns that `TargetRecord` does not show.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TargetDetail {
    pub record: TargetRecord,
    pub last_seen: Option<Millis>,
    pub wrapper_version: Option<String>,
    /// Bytes of output received, kept or not.
    pub output_bytes: u64,
    /// Bytes dropped by the output limit.
    pub omitted_bytes: u64,
    /// Every output seq up to this one is stored or accounted for.
    pub contiguous_seq: u64,
    pub resume_key_sha256: Option<String>,
    pub token_used: bool,
    /// The attempt in effect (1 for the first; `retries` add one each).
    pub attempt: u32,
}

/// Which runs db's `list_runs` returns, newest first; `before_id` pages backwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunFilter {
    pub job: Option<String>,
    pub state: Option<RunState>,
    /// Runs created at or after this instant.
    pub since: Option<Millis>,
    pub before_id: Option<RunId>,
    pub limit: Option<usize>,
    /// Runs created at or before this instant.
    pub until: Option<Millis>,
}

/// What db's `prune` removes from one job; only runs in final states go. A run is
/// removed when any given rule says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Retention {
    /// Keep this many newest final runs.
    pub keep_runs: Option<usize>,
    /// Remove runs created before this instant.
    pub older_than: Option<Millis>,
    /// Keep the stored output of the job's final runs under this many bytes (the newest
    /// final run is always kept).
    pub max_output_bytes: Option<u64>,
}

/// What db's `prune` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PruneOutcome {
    pub runs: u64,
    pub output_bytes: u64,
}

// ---- payloads: output

/// Bytes of output kept per target (a job's `output_limit`).
pub(crate) use crate::config::OutputLimit;

/// Which part of a target's output db's `read_output` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct OutputQuery {
    /// Only this stream.
    pub stream: Option<Stream>,
    /// Absolute position in the output to start at (a previous `next_from`).
    pub from: u64,
    /// Only the last this many bytes of what is selected.
    pub tail: Option<u64>,
    /// At most this many bytes (after `tail`).
    pub max_bytes: Option<u64>,
}

/// Output read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct OutputBytes {
    /// Kept bytes in arrival order (stdout and stderr interleaved as they came).
    #[serde(with = "crate::wire::bytes")]
    pub data: Vec<u8>,
    /// Bytes dropped by the output limit (all of the target, not only this slice).
    pub omitted_bytes: u64,
    /// Bytes received for the target in total, kept or not.
    pub total_bytes: u64,
    /// Index in `data` where the omitted bytes were, when `data` spans that gap.
    pub omitted_at: Option<usize>,
    /// Position to pass as `from` to continue after this read.
    pub next_from: u64,
}

// ---- payloads: audit events

/// An audit event to record (`kind` is a short snake_case name such as `run_created`,
/// `target_lost`, `maintenance_set`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NewEvent {
    pub at: Millis,
    pub kind: String,
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub machine: Option<String>,
    pub message: String,
    /// The operator who asked for it (admin socket peer); `None` for the daemon.
    pub uid: Option<u32>,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct EventRecord {
    pub id: u64,
    pub event: NewEvent,
}

/// Which events db's `list_events` returns; `before_id` pages backwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct EventFilter {
    pub job: Option<String>,
    pub run: Option<RunId>,
    pub kind: Option<String>,
    pub since: Option<Millis>,
    pub before_id: Option<u64>,
    pub limit: Option<usize>,
}

// ---- payloads: attempts

pub(crate) use super::records::AttemptRecord;

// ---- payloads: fleet state

/// Which wrapper build a minion was last seen with, at one path (fleet state: it
/// survives restarts and is shared by the servers of one PostgreSQL database).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WrapperSeen {
    pub minion: String,
    pub path: String,
    pub sha256: String,
    /// When it was seen or deployed (unix ms, server clock).
    pub seen: Millis,
}
