//! Admin calls that stream before their final answer: output followers (`logs -f`,
//! `output -f`) and run watchers (`run --wait` progress).
//!
//! Pushed, not polled: main knows the instant output is committed (db's `OutputStored`
//! reply) and the instant a target changes (`Main::wake_run`), so that is when followers
//! read and watchers hear. On a standby, the leader's commits say so (`mirror.rs`).
//!
//! A follower, per target:
//! 1. resolve the run (given, the job's newest in flight, else its newest in history) and
//!    its targets (db `GetRun`); stream `FollowStart`;
//! 2. read from its position (the first read may take only the tail), stream the bytes as
//!    `OutputChunk`, and read again while more arrived meanwhile (one read in flight per
//!    target, so a burst of frames costs one read, not one per frame);
//! 3. when the run ends (`run_ended`), one last read per target catches what was
//!    committed before the end; then the run record read back is the final `Followed`.
//!
//! A watcher gets a `RunProgress` snapshot, then a `TargetProgress` for each target whose
//! state changes, and the final `Run` through the run's waiters. The hub
//! casts `AdminGone` when the operator's connection closes, which drops its followers and
//! watchers.

use crate::roles::main::state::views::{Cursor, FollowSpec, Follower, Watcher};
use std::collections::BTreeMap;

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::{CallError, RemoteError};
use crate::roles::main::state::{DbWait, Main};
use crate::roles::main::views::answer::send_run;
use crate::roles::main::views::answer::{MAX_SLICE, failure, respond};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::OutputQuery;
use crate::wire::db::RunFilter;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::link::MainToHub;
use crate::wire::records::{RunId, RunRecord, RunState};

/// Bytes one follower read takes at most; a larger backlog takes several reads.
const FOLLOW_READ: u64 = 256 << 10;

/// What a follower waits for from db.
#[derive(Debug, Clone)]
pub(crate) enum FollowWait {
    /// The job's newest run in history.
    Latest(CallId),
    /// The run's targets.
    Targets(CallId),
    /// A read of one target's output.
    Read(CallId, String),
    /// The run record for the final answer.
    End(CallId),
}

fn stream(core: &mut Main, call: CallId, resp: AdminResponse) {
    debug_assert!(resp.is_stream(), "only stream responses precede the answer");
    core.tell_hub(MainToHub::AdminStream { call, resp });
}

fn db(core: &mut Main, req: DbRequest, wait: FollowWait) {
    core.db_call(req, DbWait::with(wait, answer));
}

pub(crate) fn follow(core: &mut Main, call: CallId, spec: FollowSpec) {
    if let Some(run) = spec.run {
        return start(core, call, spec, run);
    }
    let Some(job) = spec.job.clone() else {
        return failure(
            core,
            call,
            AdminFailure::Invalid("follow needs a run or a job".into()),
        );
    };
    let in_flight = core
        .runs()
        .filter(|r| r.job.name == job)
        .map(|r| r.id)
        .max()
        .or_else(|| crate::roles::main::views::mirror_view::newest_of(core, &job));
    match in_flight {
        Some(run) if spec.live => start(core, call, spec, run),
        _ => {
            // Not in flight (or not live): the newest run in history.
            core.views
                .live
                .followers
                .insert(call, Follower::pending(spec.clone()));
            db(
                core,
                DbRequest::ListRuns(RunFilter {
                    job: Some(job),
                    limit: Some(1),
                    ..Default::default()
                }),
                FollowWait::Latest(call),
            );
        }
    }
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

fn start(core: &mut Main, call: CallId, spec: FollowSpec, run: RunId) {
    let mut f = core
        .views
        .live
        .followers
        .remove(&call)
        .unwrap_or_else(|| Follower::pending(spec));
    f.run = run;
    core.views.live.followers.insert(call, f);
    db(core, DbRequest::GetRun(run), FollowWait::Targets(call));
}

/// A db reply for a follower.
pub(crate) fn answer(core: &mut Main, wait: FollowWait, result: Result<DbReply, CallError>) {
    match wait {
        FollowWait::Latest(call) => match calls::ListRuns::take(result) {
            Ok(runs) => match runs.first() {
                Some(r) => {
                    let spec = match core.views.live.followers.get(&call) {
                        Some(f) => f.spec.clone(),
                        None => return,
                    };
                    start(core, call, spec, r.id)
                }
                None => {
                    let job = core
                        .views
                        .live
                        .followers
                        .remove(&call)
                        .and_then(|f| f.spec.job)
                        .unwrap_or_default();
                    failure(
                        core,
                        call,
                        AdminFailure::NotFound(format!("job {job} has no runs")),
                    )
                }
            },
            Err(e) => give_up(core, call, e),
        },
        FollowWait::Targets(call) => match calls::GetRun::take(result) {
            Ok(Some(record)) => begin(core, call, record),
            Ok(None) => {
                let run = core.views.live.followers.remove(&call).map(|f| f.run);
                let msg = format!("no run {}", run.unwrap_or_default());
                failure(core, call, AdminFailure::NotFound(msg));
            }
            Err(e) => give_up(core, call, e),
        },
        FollowWait::Read(call, machine) => read_done(core, call, &machine, result),
        FollowWait::End(call) => {
            if core.views.live.followers.remove(&call).is_none() {
                return;
            }
            match calls::GetRun::take(result) {
                Ok(Some(record)) => respond(core, call, AdminResponse::Followed(record)),
                Ok(None) => give_up(
                    core,
                    call,
                    CallError::Remote(RemoteError::NotFound("the run is gone".into())),
                ),
                Err(e) => give_up(core, call, e),
            }
        }
    }
}

fn give_up(core: &mut Main, call: CallId, err: CallError) {
    core.views.live.followers.remove(&call);
    let f = match err {
        CallError::Remote(RemoteError::NotFound(what)) => AdminFailure::NotFound(what),
        e => AdminFailure::Internal(e.to_string()),
    };
    failure(core, call, f);
}

/// The run's targets are known: announce them and read what is stored.
fn begin(core: &mut Main, call: CallId, record: RunRecord) {
    // On a standby, a run the leader drives is followed as its output is committed there.
    let in_flight = core.in_flight(record.id)
        || (core.views.live.followers.contains_key(&call)
            && crate::roles::main::views::mirror_view::follows(core, &record));
    let Some(f) = core.views.live.followers.get_mut(&call) else {
        return;
    };
    let mut machines: Vec<String> = record.targets.iter().map(|t| t.machine.clone()).collect();
    if let Some(only) = f.spec.machine.clone() {
        if !machines.contains(&only) {
            core.views.live.followers.remove(&call);
            let msg = format!("{only} is not a target of run {}", record.id);
            return failure(core, call, AdminFailure::NotFound(msg));
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
        core,
        call,
        AdminResponse::FollowStart {
            run: record.id,
            job: record.job.clone(),
            machines: machines.clone(),
            live,
        },
    );
    for m in machines {
        read(core, call, &m);
    }
    maybe_end(core, call);
}

fn read(core: &mut Main, call: CallId, machine: &str) {
    let Some(f) = core.views.live.followers.get_mut(&call) else {
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
    db(
        core,
        DbRequest::Output {
            run,
            machine: machine.to_string(),
            query,
        },
        FollowWait::Read(call, machine.to_string()),
    );
}

fn read_done(core: &mut Main, call: CallId, machine: &str, result: Result<DbReply, CallError>) {
    let Some(c) = core
        .views
        .live
        .followers
        .get_mut(&call)
        .and_then(|f| f.cursors.get_mut(machine))
    else {
        return;
    };
    c.reading = false;
    c.read_once = true;
    match calls::Output::take(result) {
        Ok(out) => {
            c.next_from = c.next_from.max(out.next_from);
            if out.data.len() as u64 >= FOLLOW_READ {
                c.dirty = true;
            }
            if !out.data.is_empty() {
                stream(
                    core,
                    call,
                    AdminResponse::OutputChunk {
                        machine: machine.to_string(),
                        data: out.data,
                        omitted_bytes: out.omitted_bytes,
                        omitted_at: out.omitted_at,
                    },
                );
            }
        }
        // A target whose row is gone (retention) has nothing more to show.
        Err(e) => log::warn!("follower {call}: output of {machine} unreadable: {e}"),
    }
    let again = core
        .views
        .live
        .followers
        .get(&call)
        .and_then(|f| f.cursors.get(machine))
        .is_some_and(|c| c.dirty);
    if again {
        read(core, call, machine);
    } else {
        maybe_end(core, call);
    }
}

/// Once the run is over and every target's last read is answered: the final answer.
fn maybe_end(core: &mut Main, call: CallId) {
    let Some(f) = core.views.live.followers.get_mut(&call) else {
        return;
    };
    let settled = f.cursors.values().all(|c| !c.reading && !c.dirty);
    if f.in_flight || f.ending || !settled {
        return;
    }
    f.ending = true;
    let run = f.run;
    db(core, DbRequest::GetRun(run), FollowWait::End(call));
}

/// Output of `machine` in `run` was committed: followers read it.
pub(crate) fn output_arrived(core: &mut Main, run: RunId, machine: &str) {
    if core.views.live.followers.is_empty() {
        return;
    }
    let mut to_read = Vec::new();
    for (call, f) in core.views.live.followers.iter_mut() {
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
        read(core, call, machine);
    }
}

/// `run` ended: followers make a last read of every target; watchers are done (their
/// final answer goes through the run's waiters).
pub(crate) fn run_ended(core: &mut Main, run: RunId) {
    core.views.live.watchers.remove(&run);
    let mut to_read = Vec::new();
    for (call, f) in core.views.live.followers.iter_mut() {
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
        read(core, call, &machine);
    }
    for call in calls {
        maybe_end(core, call);
    }
}

/// `WatchRun`: stream the run's progress, answer when it ends.
pub(crate) fn watch(core: &mut Main, call: CallId, run: RunId) {
    let Some(active) = core.run_mut(run) else {
        // Not in flight (it may have ended already): the stored record answers.
        return send_run(core, call, run);
    };
    active.waiters.push(call);
    let targets: Vec<_> = active.targets.iter().map(|(m, t)| t.record(m)).collect();
    let seen = targets
        .iter()
        .map(|t| (t.machine.clone(), (t.state, t.reason, t.suspended)))
        .collect();
    let snapshot = RunRecord {
        id: active.id,
        job: active.job.name.clone(),
        slot: active.slot,
        trigger: active.trigger,
        state: RunState::Running,
        reason: None,
        started: None,
        ended: None,
        targets,
        attempts: Vec::new(),
    };
    stream(core, call, AdminResponse::RunProgress(snapshot));
    core.views
        .live
        .watchers
        .entry(run)
        .or_default()
        .push(Watcher { call, seen });
}

/// Something about `run` changed: tell its watchers which targets moved.
pub(crate) fn run_changed(core: &mut Main, run: RunId) {
    let Some(mut watchers) = core.views.live.watchers.remove(&run) else {
        return;
    };
    let Some(active) = core.run(run) else {
        return; // ended: nothing more to watch
    };
    let mut updates = Vec::new();
    for w in watchers.iter_mut() {
        for (m, t) in &active.targets {
            let now = (t.state(), t.outcome().and_then(|o| o.reason), t.suspended());
            if w.seen.get(m) != Some(&now) {
                w.seen.insert(m.clone(), now);
                updates.push((w.call, t.record(m)));
            }
        }
    }
    core.views.live.watchers.insert(run, watchers);
    for (call, target) in updates {
        stream(core, call, AdminResponse::TargetProgress { run, target });
    }
}

/// The operator's connection closed: forget its followers and watchers.
pub(crate) fn calls_gone(core: &mut Main, calls: &[CallId]) {
    for call in calls {
        core.views.live.followers.remove(call);
    }
    core.views.live.watchers.retain(|_, ws| {
        ws.retain(|w| !calls.contains(&w.call));
        !ws.is_empty()
    });
}
