//! A standby's mirror of the runs the leader drives (docs/ha.md, "A standby's live
//! views"): the same live views as on the leader, fed from the shared database.
//!
//! db hears the leader's commits (`DbNotice::Live`, `roles/db/live.rs`); they are hints,
//! coalesced here per run until the end of the turn ([`Mirror::turn`]), which reads
//! what changed:
//! 1. `run` changes: the run's record (db `GetRun`, one read in flight per run). A run in
//!    flight is kept in [`Mirror`]; `status`, the dashboard's status and a watched job's
//!    details show it as they show the leader's own runs (`view.rs`, `ui/`).
//! 2. `output` changes: output followers (`saltpeterctl output -f`, `logs -f`,
//!    `live`) read from their own positions, as on the leader; and each target
//!    a `/ws` view shows ([`Feed`]) is read from its position and handed to the hub as
//!    stored output (`MainToHub::UiStoredOutput`), positions in bytes standing for the
//!    frame seqs the hub counts on the leader. A feed's start is the hub's read of the
//!    stored output ([`Mirror::base_read`]); a read for a feed is not made while that one
//!    is out, so the feed continues exactly where the hub's read ended.
//! 3. A record read is shown only once the feeds of its run have read what was
//!    committed before it (a target's end is never shown before its last lines), and
//!    the run leaves the mirror once its final record is shown.
//! 4. A resync (db's listener connected again, or every [`RESYNC_EVERY`] while runs are
//!    mirrored) reads every run in flight and makes every follower and feed read again:
//!    what a lost notification hid is read from each one's last position.
//! 5. Taking over ([`Mirror::adopted`]): runs the recovery adopted leave the mirror
//!    (the hub is told to read their output again, now fed by their wrappers' frames);
//!    the others are read once more and end as their record says.
//!
//! Work per notice is bounded by the runs it names (db caps a notice, `NOTICE_MAX`),
//! and at most one read per run and per target is in flight. Each db reply comes back as a
//! message (`Message::MirrorInFlight`, `MirrorRun`, `MirrorFeed`, `MirrorBase`).

#[cfg(test)]
mod tests;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::messages::{DbResult, Message, Out, Then};
use crate::roles::main::views::answer::live_read;
use crate::roles::main::views::live::Live;
use crate::roles::main::views::ui::UiState;
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbRequest, LiveKind, LiveNotice, OutputBytes, OutputQuery, calls};
use crate::wire::link::MainToHub;
use crate::wire::records::{RunId, RunRecord};

/// Bytes one feed read takes at most (the hub's largest chunk).
const FEED_READ: u64 = 256 << 10;
/// Runs waiting for a record read at most; past it, one resync instead.
const STALE_MAX: usize = 4096;
/// A safety net for a notification lost without a reconnect.
const RESYNC_EVERY: Duration = Duration::from_secs(30);

/// The leader's runs in flight as a standby shows them, and what is to be read of them.
#[derive(Default)]
pub(crate) struct Mirror {
    runs: BTreeMap<RunId, Mirrored>,
    /// Runs whose record is to be read.
    stale: BTreeSet<RunId>,
    /// Runs whose record read is out.
    reading: BTreeSet<RunId>,
    /// Runs with output committed since the last turn.
    output: BTreeSet<RunId>,
    feeds: BTreeMap<(RunId, String), Feed>,
    resync: bool,
    resyncing: bool,
    resynced_at: Option<Instant>,
}

struct Mirrored {
    /// As the views show it.
    shown: RunRecord,
    /// Read, shown once the run's feeds have caught up with it.
    next: Option<RunRecord>,
}

/// The stored output of one target, as the hub's `/ws` view of it was given so far.
struct Feed {
    job: String,
    next_from: u64,
    reading: bool,
    /// More was committed while a read was out.
    dirty: bool,
    /// The hub's read of the stored output is out.
    base: bool,
}

impl Feed {
    fn busy(&self) -> bool {
        self.reading || self.dirty || self.base
    }
}

impl Mirror {
    /// `record`, driven by the leader, is mirrored from now on.
    pub(super) fn insert(&mut self, record: RunRecord) {
        self.runs.insert(
            record.id,
            Mirrored {
                shown: record,
                next: None,
            },
        );
    }

    /// The machines of `run`'s `/ws` feeds.
    fn feeds_of(&self, run: RunId) -> Vec<String> {
        self.feeds
            .range((run, String::new())..)
            .take_while(|((r, _), _)| *r == run)
            .map(|((_, m), _)| m.clone())
            .collect()
    }

    fn read_feed(&mut self, run: RunId, machine: String, out: &mut Out) {
        let Some(feed) = self.feeds.get_mut(&(run, machine.clone())) else {
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
        let to = machine.clone();
        let read = DbRequest::Output {
            run,
            machine,
            query,
        };
        out.db(
            read,
            Then::tell(move |result| Message::MirrorFeed {
                run,
                machine: to,
                result,
            }),
        );
    }

    /// The hub reads where `machine`'s `/ws` view starts in `run`: for a mirrored run,
    /// the read that also starts the target's feed (see the module outline); `false`: not
    /// mirrored.
    pub(super) fn base_read(&mut self, run: RunId, machine: &str) -> bool {
        let Some(entry) = self.runs.get(&run) else {
            return false;
        };
        let job = entry.shown.job.clone();
        let feed = self
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
        true
    }

    /// `runs` leave the mirror (taken over here): the hub reads their output again.
    fn forget_adopted(&mut self, runs: Vec<RunId>, out: &mut Out) {
        let runs: Vec<RunId> = runs
            .into_iter()
            .filter(|run| self.runs.remove(run).is_some())
            .collect();
        if runs.is_empty() {
            return;
        }
        self.feeds.retain(|(run, _), _| !runs.contains(run));
        out.hub(MainToHub::UiForget(runs));
    }
}

impl Mirror {
    /// db heard the leader's commits (`standby`: this server is one, else they are not
    /// mirrored).
    pub(crate) fn notice(&mut self, notice: LiveNotice, standby: bool) {
        if !standby {
            return;
        }
        let m = self;
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

    /// The end of a turn, at `now`: read what the turn's notices said changed (and resync
    /// when due, `standby` being one).
    pub(crate) fn turn(&mut self, now: Instant, standby: bool, live: &mut Live) -> Out {
        let mut out = Out::new();
        let m = &mut *self;
        let due = m
            .resynced_at
            .is_none_or(|at| now.saturating_duration_since(at) >= RESYNC_EVERY);
        if standby && !m.resyncing && (m.resync || (due && !m.runs.is_empty())) {
            m.resync = false;
            m.resyncing = true;
            m.resynced_at = Some(now);
            out.db(
                DbRequest::InFlightDetails,
                Then::tell(Message::MirrorInFlight),
            );
        }
        let output = std::mem::take(&mut m.output);
        let stale: Vec<RunId> = m.stale.difference(&m.reading).copied().collect();
        for run in output {
            self.output_committed(run, live, &mut out);
        }
        for run in stale {
            self.stale.remove(&run);
            self.reading.insert(run);
            out.db(
                DbRequest::GetRun(run),
                Then::tell(move |result| Message::MirrorRun { run, result }),
            );
        }
        out
    }

    fn output_committed(&mut self, run: RunId, live: &mut Live, out: &mut Out) {
        let Some(entry) = self.runs.get(&run) else {
            return;
        };
        let machines: Vec<String> = entry
            .shown
            .targets
            .iter()
            .map(|t| t.machine.clone())
            .collect();
        for machine in &machines {
            out.extend(live.output_stored(run, machine));
        }
        for machine in self.feeds_of(run) {
            self.read_feed(run, machine, out);
        }
    }

    /// db's runs in flight (a resync), `standby` still.
    pub(crate) fn in_flight_read(
        &mut self,
        result: DbResult,
        standby: bool,
        live: &mut Live,
        ui: &mut UiState,
    ) -> Out {
        let mut out = Out::new();
        self.resyncing = false;
        let runs = match calls::InFlightDetails::take(result) {
            Ok(runs) => runs,
            Err(e) => {
                log::warn!("the leader's runs in flight could not be read: {e}");
                return out;
            }
        };
        if !standby {
            return out;
        }
        let listed: BTreeSet<RunId> = runs.iter().map(|(r, _)| r.id).collect();
        let m = &mut *self;
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
            match self.runs.get_mut(&run) {
                Some(entry) => entry.next = Some(record),
                None => self.insert(record),
            }
            ui.job_changed(&job);
            // Whatever a lost notification hid is read from each one's position, before
            // the record read now is shown (`settle`).
            self.output_committed(run, live, &mut out);
            self.settle(run, ui);
        }
        out
    }

    /// db's record of `run` (`here`: in flight on this server; `standby` still).
    pub(crate) fn run_read(
        &mut self,
        run: RunId,
        result: DbResult,
        here: bool,
        standby: bool,
        live: &mut Live,
        ui: &mut UiState,
    ) -> Out {
        let mut out = Out::new();
        self.reading.remove(&run);
        let record = match calls::GetRun::take(result) {
            Ok(record) => record,
            Err(e) => {
                log::warn!("run {run} of the leader could not be read: {e}");
                return out;
            }
        };
        if here {
            self.forget_adopted(vec![run], &mut out);
            return out;
        }
        let Some(record) = record else {
            // Gone (retention): nothing more to show.
            if self.runs.remove(&run).is_some() {
                out.extend(live.run_ended(run));
            }
            return out;
        };
        let known = self.runs.contains_key(&run);
        if record.state.is_final() {
            if !known {
                // Never seen in flight: only its result counts.
                ui.mirrored_run_ended(&record);
                return out;
            }
            // Followers make their last reads; the views wait for the feeds (`settle`).
            out.extend(live.run_ended(run));
        } else if !standby {
            // A run nobody adopted, seen after taking over: the leader's orphan sweep
            // (`orphans/`) takes it up.
            self.runs.remove(&run);
            return out;
        }
        match self.runs.get_mut(&run) {
            Some(entry) => entry.next = Some(record),
            None => {
                let job = record.job.clone();
                self.insert(record);
                ui.job_changed(&job);
            }
        }
        for machine in self.feeds_of(run) {
            self.read_feed(run, machine, &mut out);
        }
        self.settle(run, ui);
        out
    }

    /// Shows the record read once the run's feeds are idle; a final one ends the run.
    fn settle(&mut self, run: RunId, ui: &mut UiState) {
        let m = self;
        let busy = m
            .feeds
            .range((run, String::new())..)
            .take_while(|((r, _), _)| *r == run)
            .any(|(_, f)| f.busy());
        if busy {
            return;
        }
        let Some(entry) = m.runs.get_mut(&run) else {
            return;
        };
        let Some(next) = entry.next.take() else {
            return;
        };
        if !next.state.is_final() {
            let job = next.job.clone();
            entry.shown = next;
            return ui.job_changed(&job);
        }
        m.runs.remove(&run);
        for machine in m.feeds_of(run) {
            m.feeds.remove(&(run, machine));
        }
        ui.mirrored_run_ended(&next);
    }

    /// db's read of `machine`'s output in `run` for its `/ws` feed.
    pub(crate) fn feed_read(
        &mut self,
        run: RunId,
        machine: String,
        result: DbResult,
        ui: &mut UiState,
    ) -> Out {
        let mut out = Out::new();
        let key = (run, machine);
        let Some(feed) = self.feeds.get_mut(&key) else {
            return out;
        };
        feed.reading = false;
        match calls::Output::take(result) {
            Ok(bytes) => {
                if bytes.data.len() as u64 >= FEED_READ {
                    feed.dirty = true;
                }
                if bytes.next_from > feed.next_from && !bytes.data.is_empty() {
                    feed.next_from = bytes.next_from;
                    out.hub(MainToHub::UiStoredOutput {
                        job: feed.job.clone(),
                        run,
                        machine: key.1.clone(),
                        seq: bytes.next_from,
                        data: with_elision(bytes),
                    });
                }
            }
            Err(e) => log::debug!("output of {} in run {run} unreadable: {e}", key.1),
        }
        if feed.dirty {
            self.read_feed(run, key.1, &mut out);
        } else {
            self.settle(run, ui);
        }
        out
    }

    /// db's read of where `machine`'s `/ws` view starts in `run`: the answer to `call`,
    /// and the start of the target's feed.
    pub(crate) fn base_read_done(
        &mut self,
        call: CallId,
        run: RunId,
        machine: String,
        result: DbResult,
        ui: &mut UiState,
    ) -> Out {
        let mut out = Out::new();
        let key = (run, machine);
        match calls::Output::take(result) {
            Ok(bytes) => {
                // Frames are counted in bytes here: later reads start where this one ended.
                let upto = bytes.next_from;
                if let Some(feed) = self.feeds.get_mut(&key) {
                    feed.next_from = feed.next_from.max(upto);
                }
                out.answer(call, live_read(bytes, upto));
            }
            Err(e) => {
                let why = AdminFailure::Internal(e.to_string());
                out.answer(call, AdminResponse::Failure(why));
            }
        }
        let Some(feed) = self.feeds.get_mut(&key) else {
            return out;
        };
        feed.base = false;
        if feed.dirty {
            feed.dirty = false;
            self.read_feed(run, key.1, &mut out);
        } else {
            self.settle(run, ui);
        }
        out
    }

    /// The runs mirrored, in run id order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = RunId> + '_ {
        self.runs.keys().copied()
    }

    /// This server took over and the recovery loaded the runs in flight: those it
    /// `adopted` leave the mirror (their output now comes from their wrappers' frames, so
    /// the hub reads it again); the `others` are read once more and end as their record
    /// says.
    pub(crate) fn adopted(&mut self, adopted: Vec<RunId>, others: Vec<RunId>) -> Out {
        let mut out = Out::new();
        self.resync = false;
        self.stale.extend(others);
        self.forget_adopted(adopted, &mut out);
        out
    }
}

/// The bytes read, with the marker of what the output limit left out where it was.
fn with_elision(bytes: OutputBytes) -> Vec<u8> {
    let Some(at) = bytes.omitted_at.filter(|_| bytes.omitted_bytes > 0) else {
        return bytes.data;
    };
    let at = at.min(bytes.data.len());
    let marker = crate::json::elision_marker(bytes.omitted_bytes);
    let mut data = Vec::with_capacity(bytes.data.len() + marker.len());
    data.extend_from_slice(&bytes.data[..at]);
    data.extend_from_slice(marker.as_bytes());
    data.extend_from_slice(&bytes.data[at..]);
    data
}
