//! What operators watch: admin calls that stream before their answer (`live`: output
//! followers and run watchers), the dashboard's `/ws` views (`ui`), `/metrics`
//! (`metrics`, and its per-job series, `job_metrics`), a standby's mirror of the
//! leader's runs (`mirror`), and the bounds and shapes every answer keeps (`answer`).

//!
//! [`Views`] is the part. Each of its pieces keeps its state in private fields and changes
//! it only in its own methods, which return what should happen (`messages::Out`): db reads
//! whose replies come back as messages (`dispatch.rs`), responses streamed to admin calls,
//! views and stored output for the hub, answers. What they show of other parts (runs in
//! flight as [`RunSeen`](seen::RunSeen), the configuration, the schedule, whether this
//! server is a standby) is handed in by the caller (`shell/views.rs`, the dispatch, the
//! requests), and time is an input, so the tests pin it.
//!
//! What moves them:
//! 1. a run changes (`Message::RunChanged`): its watchers hear which targets moved, the
//!    dashboard marks its job; a run ends (`Message::RunEnded`): followers make their last
//!    reads, watchers are done, it becomes its job's last run and is counted;
//! 2. output is committed (db's reply to an append here; the leader's commits on a
//!    standby): followers read it;
//! 3. at the end of every turn (`shell/views.rs`) the mirror reads what the turn's notices
//!    said changed, and the dashboard is sent the views of what changed: batching, so that
//!    a turn's many changes cost one read per run and one view per job.

pub(crate) mod answer;
pub(crate) mod job_metrics;
pub(crate) mod live;
pub(crate) mod metrics;
pub(crate) mod mirror;
pub(crate) mod seen;
#[cfg(test)]
mod tests;
pub(crate) mod ui;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::ipc::CallId;
use crate::ipc::rpc::CallError;
use crate::roles::main::messages::{DbResult, FinishedRun, Message, Out, Then};
use crate::roles::main::run::target::Target;
use crate::wire::db::{DbRequest, LiveNotice, OutputQuery};
use crate::wire::records::{Millis, RunId, RunRecord, TargetRecord};
use answer::LIVE_BASE_BYTES;
use live::{FollowSpec, Live};
use metrics::MainMetrics;
use mirror::Mirror;
use seen::RunSeen;
use ui::UiState;
use ui::render::{Shown, UiChanges};

/// What operators watch.
#[derive(Default)]
pub(crate) struct Views {
    /// Admin calls that stream: output followers and run watchers.
    live: Live,
    /// The dashboard's live view.
    ui: UiState,
    /// What `/metrics` counts.
    metrics: MainMetrics,
    /// On a standby: the leader's runs in flight, for the same views.
    mirror: Mirror,
}

impl Views {
    /// Output followers and run watchers.
    pub(crate) fn live(&mut self) -> &mut Live {
        &mut self.live
    }

    /// The dashboard's live view.
    pub(crate) fn ui(&mut self) -> &mut UiState {
        &mut self.ui
    }

    /// Which targets of `run` (in flight, with `targets`) moved since its watchers last
    /// heard, for whom ([`Views::run_changed`] tells them).
    pub(crate) fn live_progress(
        &self,
        run: RunId,
        targets: &BTreeMap<String, Target>,
    ) -> Vec<(CallId, TargetRecord)> {
        self.live.progress(run, targets)
    }

    /// The dashboard's views of what changed since the last ones went out (`None`:
    /// nothing did), as the other parts are `shown` now; `UiState::sent` sends them.
    pub(crate) fn ui_changes<'a, R, I, N>(&self, shown: &Shown<'a, R, N>) -> Option<UiChanges>
    where
        R: Fn() -> I,
        I: Iterator<Item = RunSeen<'a>>,
        N: Fn(&str) -> Option<Millis>,
    {
        self.ui.changes(shown, &self.mirror)
    }

    /// What `/metrics` counts.
    pub(crate) fn metrics(&self) -> &MainMetrics {
        &self.metrics
    }

    /// What `/metrics` counts, to count more.
    pub(crate) fn metrics_mut(&mut self) -> &mut MainMetrics {
        &mut self.metrics
    }

    /// How many runs of the leader's are mirrored (`status`'s runs in flight on a standby).
    pub(crate) fn mirrored_count(&self) -> usize {
        self.mirror.count()
    }

    /// Start-up: the configuration goes out at once, the status once db said what ran
    /// last.
    pub(crate) fn start(&mut self) -> Out {
        self.ui.start()
    }

    /// `Follow` (admin call `call`). `newest_here`: the newest run in flight here of the
    /// job followed (when a job is); the leader's mirrored runs are looked at after it.
    pub(crate) fn follow(
        &mut self,
        call: CallId,
        spec: FollowSpec,
        newest_here: Option<RunId>,
    ) -> Out {
        let newest = newest_here.or_else(|| {
            spec.job
                .as_deref()
                .and_then(|job| self.mirror.newest_of(job))
        });
        self.live.follow(call, spec, newest)
    }

    /// db's record of the run `call` follows (or why there is none). `here`: the run is in
    /// flight on this server; `standby`: this server is a standby (a run the leader
    /// drives is then followed as its output is committed there, mirrored from now on).
    pub(crate) fn follow_run(
        &mut self,
        call: CallId,
        record: Result<Option<RunRecord>, CallError>,
        here: bool,
        standby: bool,
    ) -> Out {
        let in_flight = match &record {
            Ok(Some(record)) => {
                here || (self.live.follows(call) && self.mirror_follows(record, standby))
            }
            _ => false,
        };
        self.live.run_read(call, record, in_flight)
    }

    /// Output followers of `record` on a standby: whether the leader drives it (the
    /// follower then reads as its output is committed), mirrored from now on if it was
    /// not.
    fn mirror_follows(&mut self, record: &RunRecord, standby: bool) -> bool {
        if !standby || record.state.is_final() {
            return false;
        }
        match self.mirror.in_flight(record.id) {
            Some(in_flight) => in_flight,
            None => {
                self.mirror.insert(record.clone());
                self.ui.job_changed(&record.job);
                true
            }
        }
    }

    /// Something about `run` (of `job`, in flight) changed at `now`: the watchers hear
    /// what moved (`moved`: [`Live::progress`]), the dashboard shows it.
    pub(crate) fn run_changed(
        &mut self,
        run: RunId,
        job: &str,
        moved: Vec<(CallId, TargetRecord)>,
        now: Millis,
    ) -> Out {
        let out = self.live.progressed(run, moved);
        self.ui.run_changed(run, job, now);
        out
    }

    /// A run ended at `now`, its end stored: it becomes its job's last run and is
    /// counted; its followers make their last reads and its watchers are done (the run's
    /// waiters are answered by the caller).
    pub(crate) fn run_ended(&mut self, end: FinishedRun, now: Millis) -> Out {
        let run = end.run;
        self.ui.run_finished(end, now, &mut self.metrics);
        self.live.run_ended(run)
    }

    /// A slot of `job` came, `lateness_ms` late: it ran or was skipped (`skip` says why).
    pub(crate) fn slot_fired(&mut self, job: &str, lateness_ms: i64, skip: Option<&str>) {
        self.metrics.observe_lateness(lateness_ms);
        self.ui.slot_fired(job, skip);
    }

    /// An output frame of `bytes` bytes and seq `seq` arrived from the wrapper of
    /// `machine` in `run` (`in_flight` here) and goes to db: counted, and its seq kept
    /// (the hub shows it live from the frame it relayed).
    pub(crate) fn output_framed(
        &mut self,
        run: RunId,
        machine: &str,
        seq: u64,
        bytes: usize,
        in_flight: bool,
    ) {
        self.metrics.output(bytes);
        if in_flight {
            self.ui.output_framed(run, machine, seq);
        }
    }

    /// `LiveOutput` (admin call `call`, from the hub's `/ws` view of `machine` in `run`):
    /// where the target's live view starts. `acked`: for a target of a run in flight
    /// here, the output seq committed (`None`: not in flight here).
    pub(crate) fn live_base(
        &mut self,
        call: CallId,
        run: RunId,
        machine: String,
        acked: Option<u64>,
    ) -> Out {
        let query = OutputQuery {
            tail: Some(LIVE_BASE_BYTES),
            ..OutputQuery::default()
        };
        let mut out = Out::new();
        let then = if self.mirror.base_read(run, &machine) {
            // A run the leader drives, on a standby: fed from the database.
            let to = machine.clone();
            Then::tell(move |result| Message::MirrorBase {
                call,
                run,
                machine: to,
                result,
            })
        } else {
            // Everything passed on so far is in what db reads now: the link to db keeps
            // the order, and frames go to db as they arrive.
            let upto_seq = self.ui.seen_seq(run, &machine, acked);
            Then::tell(move |result| Message::LiveBase {
                call,
                upto_seq,
                result,
            })
        };
        out.db(
            DbRequest::Output {
                run,
                machine,
                query,
            },
            then,
        );
        out
    }

    /// db heard the leader's commits (`standby`: this server is one, else they are not
    /// mirrored).
    pub(crate) fn mirror_notice(&mut self, notice: LiveNotice, standby: bool) {
        self.mirror.notice(notice, standby);
    }

    /// The end of a turn, at `now`: the mirror reads what the turn's notices said changed
    /// (and resyncs when due, `standby` being one); followers of its runs read.
    pub(crate) fn mirror_turn(&mut self, now: Instant, standby: bool) -> Out {
        self.mirror.turn(now, standby, &mut self.live)
    }

    /// db's runs in flight on the leader (a resync of the mirror), `standby` still.
    pub(crate) fn mirror_in_flight(&mut self, result: DbResult, standby: bool) -> Out {
        self.mirror
            .in_flight_read(result, standby, &mut self.live, &mut self.ui)
    }

    /// db's record of `run`, driven by the leader (`here`: in flight on this server
    /// since; `standby` still).
    pub(crate) fn mirror_run(
        &mut self,
        run: RunId,
        result: DbResult,
        here: bool,
        standby: bool,
    ) -> Out {
        self.mirror
            .run_read(run, result, here, standby, &mut self.live, &mut self.ui)
    }

    /// db's read of `machine`'s output in mirrored `run`, for its `/ws` feed.
    pub(crate) fn mirror_feed(&mut self, run: RunId, machine: String, result: DbResult) -> Out {
        self.mirror.feed_read(run, machine, result, &mut self.ui)
    }

    /// db's read of where `machine`'s `/ws` view starts in mirrored `run`: the answer
    /// to `call`, and the start of the target's feed.
    pub(crate) fn mirror_base(
        &mut self,
        call: CallId,
        run: RunId,
        machine: String,
        result: DbResult,
    ) -> Out {
        self.mirror
            .base_read_done(call, run, machine, result, &mut self.ui)
    }

    /// The runs mirrored, in run id order.
    pub(crate) fn mirrored_runs(&self) -> impl Iterator<Item = RunId> + '_ {
        self.mirror.runs()
    }

    /// This server took over and the recovery loaded the runs in flight: those it
    /// `adopted` leave the mirror, the `others` are read once more.
    pub(crate) fn mirror_adopted(&mut self, adopted: Vec<RunId>, others: Vec<RunId>) -> Out {
        self.mirror.adopted(adopted, others)
    }
}
