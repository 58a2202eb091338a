//! Admin calls that stream before their final answer: output followers (`logs -f`,
//! `output -f`) and run watchers (`run --wait` progress, `watch.rs`).
//!
//! Pushed, not polled: main knows the instant output is committed (db's reply to the
//! append) and the instant a target changes (`Message::RunChanged`), so that is when
//! followers read and watchers hear. On a standby, the leader's commits say so
//! (`mirror/`).
//!
//! A follower, per target:
//! 1. resolve the run (given, the job's newest in flight, else its newest in history) and
//!    its targets (db `GetRun`); stream `FollowStart`;
//! 2. read from its position (the first read may take only the tail), stream the bytes as
//!    `OutputChunk`, and read again while more arrived meanwhile (one read in flight per
//!    target, so a burst of frames costs one read, not one per frame);
//! 3. when the run ends ([`Live::run_ended`]), one last read per target catches what was
//!    committed before the end; then the run record read back is the final `Followed`.
//!
//! Each db reply comes back as a message (`Message::FollowLatest`, `FollowRun`,
//! `FollowRead`, `FollowEnd`) to the method named after it. The hub casts `AdminGone`
//! when the operator's connection closes, which drops its followers and watchers.

#[cfg(test)]
mod tests;
pub(crate) mod watch;

use std::collections::{BTreeMap, HashMap};

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::messages::{DbResult, Message, Out, Then};
use crate::roles::main::views::answer::{MAX_SLICE, db_failure};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbRequest, OutputQuery, RunFilter, calls};
use crate::wire::link::MainToHub;
use crate::wire::records::{RunId, RunRecord, TargetReason, TargetState};
use crate::wire::wrapper::Stream;

/// Bytes one follower read takes at most; a larger backlog takes several reads.
const FOLLOW_READ: u64 = 256 << 10;

/// Output followers and run watchers, by admin call.
#[derive(Default)]
pub(crate) struct Live {
    followers: HashMap<CallId, Follower>,
    watchers: HashMap<RunId, Vec<Watcher>>,
}

/// What `Follow` asked for.
#[derive(Debug, Clone)]
pub(crate) struct FollowSpec {
    pub run: Option<RunId>,
    pub job: Option<String>,
    pub machine: Option<String>,
    pub stream: Option<Stream>,
    pub tail: Option<u64>,
    pub live: bool,
}

struct Follower {
    spec: FollowSpec,
    run: RunId,
    in_flight: bool,
    cursors: BTreeMap<String, Cursor>,
    ending: bool,
}

/// A run watcher (`watch.rs`).
struct Watcher {
    call: CallId,
    /// What the watcher last heard of each target: state, reason, suspended.
    seen: BTreeMap<String, (TargetState, Option<TargetReason>, bool)>,
}

#[derive(Default)]
struct Cursor {
    next_from: u64,
    read_once: bool,
    reading: bool,
    /// More may be there: read again once the read in flight is answered.
    dirty: bool,
}

impl Follower {
    fn pending(spec: FollowSpec) -> Follower {
        Follower {
            spec,
            run: 0,
            in_flight: false,
            cursors: BTreeMap::new(),
            ending: false,
        }
    }
}

/// Stream `resp` to admin call `call` before its answer.
fn stream(out: &mut Out, call: CallId, resp: AdminResponse) {
    debug_assert!(resp.is_stream(), "only stream responses precede the answer");
    out.hub(MainToHub::AdminStream { call, resp });
}

impl Live {
    /// `Follow` (admin call `call`). `newest`: the newest run in flight (here or on the
    /// leader) of the job followed, if any.
    pub(crate) fn follow(&mut self, call: CallId, spec: FollowSpec, newest: Option<RunId>) -> Out {
        let mut out = Out::new();
        if let Some(run) = spec.run {
            self.start(call, spec, run, &mut out);
            return out;
        }
        let Some(job) = spec.job.clone() else {
            let why = AdminFailure::Invalid("follow needs a run or a job".into());
            out.answer(call, AdminResponse::Failure(why));
            return out;
        };
        match newest {
            Some(run) if spec.live => self.start(call, spec, run, &mut out),
            _ => {
                // Not in flight (or not live): the newest run in history.
                self.followers.insert(call, Follower::pending(spec));
                out.db(
                    DbRequest::ListRuns(RunFilter {
                        job: Some(job),
                        limit: Some(1),
                        ..Default::default()
                    }),
                    Then::tell(move |result| Message::FollowLatest { call, result }),
                );
            }
        }
        out
    }

    fn start(&mut self, call: CallId, spec: FollowSpec, run: RunId, out: &mut Out) {
        let mut f = self
            .followers
            .remove(&call)
            .unwrap_or_else(|| Follower::pending(spec));
        f.run = run;
        self.followers.insert(call, f);
        out.db(
            DbRequest::GetRun(run),
            Then::tell(move |result| Message::FollowRun { call, result }),
        );
    }

    /// Whether admin call `call` follows output.
    pub(crate) fn follows(&self, call: CallId) -> bool {
        self.followers.contains_key(&call)
    }

    /// db's newest run of the job followed by `call`.
    pub(crate) fn latest_read(&mut self, call: CallId, result: DbResult) -> Out {
        let mut out = Out::new();
        match calls::ListRuns::take(result) {
            Ok(runs) => match runs.first() {
                Some(r) => {
                    if let Some(spec) = self.followers.get(&call).map(|f| f.spec.clone()) {
                        self.start(call, spec, r.id, &mut out);
                    }
                }
                None => {
                    let job = self
                        .followers
                        .remove(&call)
                        .and_then(|f| f.spec.job)
                        .unwrap_or_default();
                    let why = AdminFailure::NotFound(format!("job {job} has no runs"));
                    out.answer(call, AdminResponse::Failure(why));
                }
            },
            Err(e) => self.give_up(call, e, &mut out),
        }
        out
    }

    /// db's record of the run `call` follows (or why there is none). `in_flight`: the run
    /// is in flight, here or (on a standby) on the leader.
    pub(crate) fn run_read(
        &mut self,
        call: CallId,
        record: Result<Option<RunRecord>, CallError>,
        in_flight: bool,
    ) -> Out {
        let mut out = Out::new();
        match record {
            Ok(Some(record)) => self.begin(call, record, in_flight, &mut out),
            Ok(None) => {
                let run = self.followers.remove(&call).map(|f| f.run);
                let msg = format!("no run {}", run.unwrap_or_default());
                out.answer(call, AdminResponse::Failure(AdminFailure::NotFound(msg)));
            }
            Err(e) => self.give_up(call, e, &mut out),
        }
        out
    }

    fn give_up(&mut self, call: CallId, err: CallError, out: &mut Out) {
        self.followers.remove(&call);
        out.answer(call, AdminResponse::Failure(db_failure(err)));
    }

    /// The run's targets are known: announce them and read what is stored.
    fn begin(&mut self, call: CallId, record: RunRecord, in_flight: bool, out: &mut Out) {
        let Some(f) = self.followers.get_mut(&call) else {
            return;
        };
        let mut machines: Vec<String> = record.targets.iter().map(|t| t.machine.clone()).collect();
        if let Some(only) = f.spec.machine.clone() {
            if !machines.contains(&only) {
                self.followers.remove(&call);
                let msg = format!("{only} is not a target of run {}", record.id);
                out.answer(call, AdminResponse::Failure(AdminFailure::NotFound(msg)));
                return;
            }
            machines = vec![only];
        }
        f.in_flight = f.spec.live && in_flight;
        f.cursors = machines
            .iter()
            .map(|m| (m.clone(), Cursor::default()))
            .collect();
        let live = f.in_flight;
        stream(
            out,
            call,
            AdminResponse::FollowStart {
                run: record.id,
                job: record.job.clone(),
                machines: machines.clone(),
                live,
            },
        );
        for m in machines {
            self.read(call, &m, out);
        }
        self.maybe_end(call, out);
    }

    fn read(&mut self, call: CallId, machine: &str, out: &mut Out) {
        let Some(f) = self.followers.get_mut(&call) else {
            return;
        };
        let Some(c) = f.cursors.get_mut(machine) else {
            return;
        };
        c.reading = true;
        c.dirty = false;
        let query = OutputQuery {
            stream: f.spec.stream,
            from: c.next_from,
            tail: if c.read_once { None } else { f.spec.tail },
            max_bytes: Some(FOLLOW_READ.min(MAX_SLICE)),
        };
        let run = f.run;
        let to = machine.to_string();
        out.db(
            DbRequest::Output {
                run,
                machine: machine.to_string(),
                query,
            },
            Then::tell(move |result| Message::FollowRead {
                call,
                machine: to,
                result,
            }),
        );
    }

    /// db's read of `machine`'s output for `call`.
    pub(crate) fn output_read(&mut self, call: CallId, machine: &str, result: DbResult) -> Out {
        let mut out = Out::new();
        let Some(c) = self
            .followers
            .get_mut(&call)
            .and_then(|f| f.cursors.get_mut(machine))
        else {
            return out;
        };
        c.reading = false;
        c.read_once = true;
        match calls::Output::take(result) {
            Ok(bytes) => {
                c.next_from = c.next_from.max(bytes.next_from);
                if bytes.data.len() as u64 >= FOLLOW_READ {
                    c.dirty = true;
                }
                if !bytes.data.is_empty() {
                    stream(
                        &mut out,
                        call,
                        AdminResponse::OutputChunk {
                            machine: machine.to_string(),
                            data: bytes.data,
                            omitted_bytes: bytes.omitted_bytes,
                            omitted_at: bytes.omitted_at,
                        },
                    );
                }
            }
            // A target whose row is gone (retention) has nothing more to show.
            Err(e) => log::warn!("follower {call}: output of {machine} unreadable: {e}"),
        }
        if c.dirty {
            self.read(call, machine, &mut out);
        } else {
            self.maybe_end(call, &mut out);
        }
        out
    }

    /// Once the run is over and every target's last read is answered: the final answer.
    fn maybe_end(&mut self, call: CallId, out: &mut Out) {
        let Some(f) = self.followers.get_mut(&call) else {
            return;
        };
        let settled = f.cursors.values().all(|c| !c.reading && !c.dirty);
        if f.in_flight || f.ending || !settled {
            return;
        }
        f.ending = true;
        out.db(
            DbRequest::GetRun(f.run),
            Then::tell(move |result| Message::FollowEnd { call, result }),
        );
    }

    /// db's record of the run `call` followed, once over: the final answer.
    pub(crate) fn end_read(&mut self, call: CallId, result: DbResult) -> Out {
        let mut out = Out::new();
        if self.followers.remove(&call).is_none() {
            return out;
        }
        let resp = match calls::GetRun::take(result) {
            Ok(Some(record)) => AdminResponse::Followed(record),
            Ok(None) => AdminResponse::Failure(AdminFailure::NotFound("the run is gone".into())),
            Err(e) => AdminResponse::Failure(db_failure(e)),
        };
        out.answer(call, resp);
        out
    }

    /// Output of `machine` in `run` was committed: followers read it.
    pub(crate) fn output_stored(&mut self, run: RunId, machine: &str) -> Out {
        let mut out = Out::new();
        if self.followers.is_empty() {
            return out;
        }
        let mut to_read = Vec::new();
        for (call, f) in self.followers.iter_mut() {
            if f.run != run || !f.in_flight {
                continue;
            }
            if let Some(c) = f.cursors.get_mut(machine) {
                if c.reading {
                    c.dirty = true;
                } else {
                    to_read.push(*call);
                }
            }
        }
        for call in to_read {
            self.read(call, machine, &mut out);
        }
        out
    }

    /// `run` ended: followers make a last read of every target; watchers are done (their
    /// final answer goes through the run's waiters).
    pub(crate) fn run_ended(&mut self, run: RunId) -> Out {
        let mut out = Out::new();
        self.watchers.remove(&run);
        let mut to_read = Vec::new();
        for (call, f) in self.followers.iter_mut() {
            if f.run != run || !f.in_flight {
                continue;
            }
            f.in_flight = false;
            for (m, c) in f.cursors.iter_mut() {
                if c.reading {
                    c.dirty = true;
                } else {
                    to_read.push((*call, m.clone()));
                }
            }
        }
        let calls: Vec<CallId> = to_read.iter().map(|(c, _)| *c).collect();
        for (call, machine) in to_read {
            self.read(call, &machine, &mut out);
        }
        for call in calls {
            self.maybe_end(call, &mut out);
        }
        out
    }

    /// The operator's connection closed: forget its followers and watchers.
    pub(crate) fn calls_gone(&mut self, calls: &[CallId]) {
        for call in calls {
            self.followers.remove(call);
        }
        self.watchers.retain(|_, ws| {
            ws.retain(|w| !calls.contains(&w.call));
            !ws.is_empty()
        });
    }
}
