//! A standby's mirror of the runs the leader drives (docs/ha.md, "A standby's live
//! views"): the same live views as on the leader, fed from the shared database.
//!
//! db hears the leader's commits (`DbNotice::Live`, `roles/db/live.rs`); they are hints,
//! coalesced here per run until the next turn's [`poll`], which reads what changed:
//! 1. `run` changes: the run's record (db `GetRun`, one read in flight per run). A run in
//!    flight is kept in [`Mirror::runs`]; `status`, the dashboard's status and a watched
//!    job's details show it as they show the leader's own runs (`ui.rs`).
//! 2. `output` changes: output followers (`saltpeterctl output -f`, `logs -f`,
//!    `live`) read from their own positions, as on the leader; and each target
//!    a `/ws` view shows ([`Feed`]) is read from its position and handed to the hub as
//!    stored output (`MainToHub::UiStoredOutput`), positions in bytes standing for the
//!    frame seqs the hub counts on the leader. A feed's start is the hub's read of the
//!    stored output ([`base_wait`]); a read for a feed is not made while that one is out,
//!    so the feed continues exactly where the hub's read ended.
//! 3. A record read is shown only once the feeds of its run have read what was
//!    committed before it (a target's end is never shown before its last lines), and
//!    the run leaves the mirror once its final record is shown.
//! 4. A resync (db's listener connected again, or every [`RESYNC_EVERY`] while runs are
//!    mirrored) reads every run in flight and makes every follower and feed read again:
//!    what a lost notification hid is read from each one's last position.
//! 5. Taking over ([`adopted`]): runs the recovery adopted leave the mirror (the hub is
//!    told to read their output again, now fed by their wrappers' frames); the others
//!    are read once more and end as their record says.
//!
//! Work per notice is bounded by the runs it names (db caps a notice, `NOTICE_MAX`),
//! and at most one read per run and per target is in flight.

use crate::roles::main::state::views::{Feed, Mirrored};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::{Call, CallError};
use crate::roles::main::state::{DbWait, Main};
use crate::roles::main::views::live;
use crate::roles::main::views::mirror_view::standby;
use crate::wire::admin::AdminFailure;
use crate::wire::db::{DbReply, DbRequest, LiveKind, LiveNotice, OutputBytes, OutputQuery, calls};
use crate::wire::link::MainToHub;
use crate::wire::records::RunId;

/// Bytes one feed read takes at most (the hub's largest chunk).
const FEED_READ: u64 = 256 << 10;
/// Runs waiting for a record read at most; past it, one resync instead.
const STALE_MAX: usize = 4096;
/// A safety net for a notification lost without a reconnect.
const RESYNC_EVERY: Duration = Duration::from_secs(30);

impl Feed {
    fn busy(&self) -> bool {
        self.reading || self.dirty || self.base
    }
}

/// What a db reply for the mirror is.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    InFlight,
    Record(RunId),
    Feed(RunId, String),
    Base(CallId, RunId, String),
}

/// db heard the leader's commits.
pub(crate) fn notice(core: &mut Main, notice: LiveNotice) {
    if !standby(core) {
        return;
    }
    let m = &mut core.views.mirror;
    m.resync |= notice.resync;
    for change in notice.changes {
        match change.kind {
            LiveKind::Output if m.runs.contains_key(&change.run) => {
                m.output.insert(change.run);
            }
            // A run not mirrored yet is read first.
            LiveKind::Output | LiveKind::Run => {
                m.stale.insert(change.run);
            }
        }
    }
    if m.stale.len() > STALE_MAX {
        m.stale.clear();
        m.resync = true;
    }
}

/// Once per turn: read what the notices since the last turn said changed.
pub(crate) fn poll(core: &mut Main) {
    let due = core
        .views
        .mirror
        .resynced_at
        .is_none_or(|at| at.elapsed() >= RESYNC_EVERY);
    let standby = standby(core);
    let m = &mut core.views.mirror;
    if standby && !m.resyncing && (m.resync || (due && !m.runs.is_empty())) {
        m.resync = false;
        m.resyncing = true;
        m.resynced_at = Some(Instant::now());
        core.db_call(
            DbRequest::InFlightDetails,
            DbWait::with(Wait::InFlight, answer),
        );
    }
    let m = &mut core.views.mirror;
    let output = std::mem::take(&mut m.output);
    let stale: Vec<RunId> = m.stale.difference(&m.reading).copied().collect();
    for run in output {
        output_committed(core, run);
    }
    for run in stale {
        let m = &mut core.views.mirror;
        m.stale.remove(&run);
        m.reading.insert(run);
        core.db_call(
            DbRequest::GetRun(run),
            DbWait::with(Wait::Record(run), answer),
        );
    }
}

fn output_committed(core: &mut Main, run: RunId) {
    let Some(entry) = core.views.mirror.runs.get(&run) else {
        return;
    };
    let machines: Vec<String> = entry
        .shown
        .targets
        .iter()
        .map(|t| t.machine.clone())
        .collect();
    for machine in &machines {
        live::output_arrived(core, run, machine);
    }
    for machine in feeds_of(core, run) {
        read_feed(core, run, machine);
    }
}

fn feeds_of(core: &Main, run: RunId) -> Vec<String> {
    core.views
        .mirror
        .feeds
        .range((run, String::new())..)
        .take_while(|((r, _), _)| *r == run)
        .map(|((_, m), _)| m.clone())
        .collect()
}

fn read_feed(core: &mut Main, run: RunId, machine: String) {
    let Some(feed) = core.views.mirror.feeds.get_mut(&(run, machine.clone())) else {
        return;
    };
    if feed.reading || feed.base {
        feed.dirty = true;
        return;
    }
    feed.reading = true;
    feed.dirty = false;
    let query = OutputQuery {
        from: feed.next_from,
        max_bytes: Some(FEED_READ),
        ..OutputQuery::default()
    };
    let wait = DbWait::with(Wait::Feed(run, machine.clone()), answer);
    let read = DbRequest::Output {
        run,
        machine,
        query,
    };
    core.db_call(read, wait);
}

/// A db reply for the mirror.
pub(crate) fn answer(core: &mut Main, wait: Wait, result: Result<DbReply, CallError>) {
    match wait {
        Wait::InFlight => in_flight_read(core, result),
        Wait::Record(run) => record_read(core, run, result),
        Wait::Feed(run, machine) => feed_read(core, run, machine, result),
        Wait::Base(call, run, machine) => base_read(core, call, run, machine, result),
    }
}

fn in_flight_read(core: &mut Main, result: Result<DbReply, CallError>) {
    core.views.mirror.resyncing = false;
    let runs = match calls::InFlightDetails::take(result) {
        Ok(runs) => runs,
        Err(e) => return log::warn!("the leader's runs in flight could not be read: {e}"),
    };
    if !standby(core) {
        return;
    }
    let listed: BTreeSet<RunId> = runs.iter().map(|(r, _)| r.id).collect();
    let m = &mut core.views.mirror;
    // Mirrored runs no longer in flight ended meanwhile: their record says how.
    let gone: Vec<RunId> = m
        .runs
        .keys()
        .filter(|r| !listed.contains(r))
        .copied()
        .collect();
    m.stale.extend(gone);
    for (record, _) in runs {
        let run = record.id;
        let job = record.job.clone();
        let m = &mut core.views.mirror;
        match m.runs.get_mut(&run) {
            Some(entry) => entry.next = Some(record),
            None => {
                m.runs.insert(
                    run,
                    Mirrored {
                        shown: record,
                        next: None,
                    },
                );
            }
        }
        crate::roles::main::views::ui::job_changed(core, &job);
        // Whatever a lost notification hid is read from each one's position, before
        // the record read now is shown (`settle`).
        output_committed(core, run);
        settle(core, run);
    }
}

fn record_read(core: &mut Main, run: RunId, result: Result<DbReply, CallError>) {
    core.views.mirror.reading.remove(&run);
    let record = match calls::GetRun::take(result) {
        Ok(record) => record,
        Err(e) => return log::warn!("run {run} of the leader could not be read: {e}"),
    };
    if core.in_flight(run) {
        return forget_adopted(core, vec![run]);
    }
    let Some(record) = record else {
        // Gone (retention): nothing more to show.
        if core.views.mirror.runs.remove(&run).is_some() {
            live::run_ended(core, run);
        }
        return;
    };
    let known = core.views.mirror.runs.contains_key(&run);
    if record.state.is_final() {
        if !known {
            // Never seen in flight: only its result counts.
            return crate::roles::main::views::ui::mirrored_run_ended(core, &record);
        }
        // Followers make their last reads; the views wait for the feeds (`settle`).
        live::run_ended(core, run);
    } else if !standby(core) {
        // A run nobody adopted, seen after taking over: the leader's orphan sweep
        // (`run::orphans`) takes it up.
        core.views.mirror.runs.remove(&run);
        return;
    }
    match core.views.mirror.runs.get_mut(&run) {
        Some(entry) => entry.next = Some(record),
        None => {
            let job = record.job.clone();
            core.views.mirror.runs.insert(
                run,
                Mirrored {
                    shown: record,
                    next: None,
                },
            );
            crate::roles::main::views::ui::job_changed(core, &job);
        }
    }
    for machine in feeds_of(core, run) {
        read_feed(core, run, machine);
    }
    settle(core, run);
}

/// Shows the record read once the run's feeds are idle; a final one ends the run.
fn settle(core: &mut Main, run: RunId) {
    let busy = core
        .views
        .mirror
        .feeds
        .range((run, String::new())..)
        .take_while(|((r, _), _)| *r == run)
        .any(|(_, f)| f.busy());
    if busy {
        return;
    }
    let Some(entry) = core.views.mirror.runs.get_mut(&run) else {
        return;
    };
    let Some(next) = entry.next.take() else {
        return;
    };
    if !next.state.is_final() {
        let job = next.job.clone();
        entry.shown = next;
        return crate::roles::main::views::ui::job_changed(core, &job);
    }
    core.views.mirror.runs.remove(&run);
    for machine in feeds_of(core, run) {
        core.views.mirror.feeds.remove(&(run, machine));
    }
    crate::roles::main::views::ui::mirrored_run_ended(core, &next);
}

fn feed_read(core: &mut Main, run: RunId, machine: String, result: Result<DbReply, CallError>) {
    let key = (run, machine);
    let Some(feed) = core.views.mirror.feeds.get_mut(&key) else {
        return;
    };
    feed.reading = false;
    match calls::Output::take(result) {
        Ok(out) => {
            if out.data.len() as u64 >= FEED_READ {
                feed.dirty = true;
            }
            if out.next_from > feed.next_from && !out.data.is_empty() {
                feed.next_from = out.next_from;
                let msg = MainToHub::UiStoredOutput {
                    job: feed.job.clone(),
                    run,
                    machine: key.1.clone(),
                    seq: out.next_from,
                    data: with_elision(out),
                };
                core.tell_hub(msg);
            }
        }
        Err(e) => log::debug!("output of {} in run {run} unreadable: {e}", key.1),
    }
    let again = core.views.mirror.feeds.get(&key).is_some_and(|f| f.dirty);
    if again {
        read_feed(core, run, key.1);
    } else {
        settle(core, run);
    }
}

/// The bytes read, with the marker of what the output limit left out where it was.
fn with_elision(out: OutputBytes) -> Vec<u8> {
    let Some(at) = out.omitted_at.filter(|_| out.omitted_bytes > 0) else {
        return out.data;
    };
    let at = at.min(out.data.len());
    let marker = crate::json::elision_marker(out.omitted_bytes);
    let mut data = Vec::with_capacity(out.data.len() + marker.len());
    data.extend_from_slice(&out.data[..at]);
    data.extend_from_slice(marker.as_bytes());
    data.extend_from_slice(&out.data[at..]);
    data
}

/// The hub reads where a target's `/ws` view starts: for a mirrored run, the read that
/// also starts the target's feed (see the module outline).
pub(crate) fn base_wait(
    core: &mut Main,
    call: CallId,
    run: RunId,
    machine: &str,
) -> Option<DbWait> {
    let job = core.views.mirror.runs.get(&run)?.shown.job.clone();
    let feed = core
        .views
        .mirror
        .feeds
        .entry((run, machine.to_string()))
        .or_insert(Feed {
            job,
            next_from: 0,
            reading: false,
            dirty: false,
            base: false,
        });
    feed.base = true;
    Some(DbWait::with(
        Wait::Base(call, run, machine.to_string()),
        answer,
    ))
}

fn base_read(
    core: &mut Main,
    call: CallId,
    run: RunId,
    machine: String,
    result: Result<DbReply, CallError>,
) {
    let key = (run, machine);
    match calls::Output::take(result) {
        Ok(out) => {
            // Frames are counted in bytes here: later reads start where this one ended.
            let upto = out.next_from;
            if let Some(feed) = core.views.mirror.feeds.get_mut(&key) {
                feed.next_from = feed.next_from.max(upto);
            }
            let resp = crate::roles::main::views::answer::live_read(out, upto);
            crate::roles::main::views::answer::respond(core, call, resp);
        }
        Err(e) => {
            let why = AdminFailure::Internal(e.to_string());
            crate::roles::main::views::answer::failure(core, call, why);
        }
    }
    let Some(feed) = core.views.mirror.feeds.get_mut(&key) else {
        return;
    };
    feed.base = false;
    if feed.dirty {
        feed.dirty = false;
        read_feed(core, run, key.1);
    } else {
        settle(core, run);
    }
}

/// This server took over and the recovery loaded the runs in flight: those it adopted
/// leave the mirror (their output now comes from their wrappers' frames, so the hub
/// reads it again); the others are read once more and end as their record says.
pub(crate) fn adopted(core: &mut Main) {
    core.views.mirror.resync = false;
    let (adopted, other): (Vec<RunId>, Vec<RunId>) = core
        .views
        .mirror
        .runs
        .keys()
        .partition(|run| core.in_flight(**run));
    core.views.mirror.stale.extend(other);
    forget_adopted(core, adopted);
}

fn forget_adopted(core: &mut Main, runs: Vec<RunId>) {
    let runs: Vec<RunId> = runs
        .into_iter()
        .filter(|run| core.views.mirror.runs.remove(run).is_some())
        .collect();
    if runs.is_empty() {
        return;
    }
    core.views
        .mirror
        .feeds
        .retain(|(run, _), _| !runs.contains(run));
    core.tell_hub(MainToHub::UiForget(runs));
}
