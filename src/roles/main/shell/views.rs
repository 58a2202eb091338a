//! The views' glue (`views/`): what they are handed of the other parts — the runs in
//! flight as [`RunSeen`], the configuration, the schedule, whether this server is a
//! standby, the gauges of `/metrics` — and the two steps the views take where they read
//! the runs in flight while they change (a run changed; the end of a turn).

use std::time::Instant;

use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::messages::DbResult;
use crate::roles::main::run::active::ActiveRun;
use crate::roles::main::shell::Main;
use crate::roles::main::views::metrics::{Gauges, HaGauges, render};
use crate::roles::main::views::seen::RunSeen;
use crate::roles::main::views::ui::render::Shown;
use crate::wire::db::{LiveNotice, calls};
use crate::wire::records::{RunId, now_ms};

/// A run in flight as the views read it.
pub(crate) fn seen(active: &ActiveRun) -> RunSeen<'_> {
    RunSeen {
        id: active.id(),
        job: &active.job().name,
        slot: active.slot(),
        trigger: active.trigger(),
        awaiting_go: active.awaiting_go(),
        targets: active.targets(),
    }
}

/// This server is a standby: the runs the leader drives are mirrored.
pub(crate) fn standby(core: &Main) -> bool {
    core.ha.standby()
}

/// `Message::RunChanged`: the watchers of `run` hear which targets moved, the dashboard
/// marks its job. A run no longer in flight has nothing more to watch.
pub(crate) fn run_changed(core: &mut Main, run: RunId) {
    let Some(active) = core.run(run) else {
        core.views.live().run_gone(run);
        return;
    };
    let moved = core.views.live_progress(run, active.targets());
    let job = active.job().name.clone();
    let out = core.views.run_changed(run, &job, moved, now_ms());
    core.perform(out);
}

/// db heard the leader's commits.
pub(crate) fn notice(core: &mut Main, notice: LiveNotice) {
    let standby = standby(core);
    core.views.mirror_notice(notice, standby);
}

/// The end of a turn (batching: a turn's notices cost one read per run, its changes one
/// view per job): the mirror reads what the leader's commits said changed, then the
/// dashboard is sent the views of what changed.
pub(crate) fn end_of_turn(core: &mut Main) {
    let standby = standby(core);
    let out = core.views.mirror_turn(Instant::now(), standby);
    core.perform(out);
    flush_ui(core);
}

/// Send the hub the dashboard's views of what changed (`views/ui/`).
pub(crate) fn flush_ui(core: &mut Main) {
    let shown = Shown {
        config: &core.config,
        runs: || core.runs().map(seen),
        next_of: |job: &str| core.scheduler.next_of(job).map(|t| t.timestamp_millis()),
        now: now_ms(),
        instant: Instant::now(),
    };
    let Some(changes) = core.views.ui_changes(&shown) else {
        return;
    };
    let out = core.views.ui().sent(changes);
    core.perform(out);
}

/// This server took over and the recovery loaded the runs in flight: the mirrored runs it
/// adopted leave the mirror, the others are read once more.
pub(crate) fn adopted(core: &mut Main) {
    let (adopted, others): (Vec<RunId>, Vec<RunId>) = core
        .views
        .mirrored_runs()
        .partition(|run| core.in_flight(*run));
    let out = core.views.mirror_adopted(adopted, others);
    core.perform(out);
}

/// `Message::MirrorRun`: db's record of a run the leader drives.
pub(crate) fn mirror_run(core: &mut Main, run: RunId, result: DbResult) {
    let here = core.in_flight(run);
    let standby = standby(core);
    let out = core.views.mirror_run(run, result, here, standby);
    core.perform(out);
}

/// `Message::FollowRun`: db's record of the run an output follower follows.
pub(crate) fn follow_run(core: &mut Main, call: CallId, result: DbResult) {
    let record = calls::GetRun::take(result);
    let here = matches!(&record, Ok(Some(r)) if core.in_flight(r.id));
    let standby = standby(core);
    let out = core.views.follow_run(call, record, here, standby);
    core.perform(out);
}

/// `/metrics`: main's counts and the other parts' gauges.
pub(crate) fn metrics_text(core: &Main) -> String {
    let leads = core.launcher.leads(&core.config.saltpeter);
    let prestage_leads = core
        .config
        .jobs
        .iter()
        .filter_map(|(name, entry)| {
            let job = entry.job_ref()?;
            (job.executor == crate::config::Executor::Salt).then(|| {
                (
                    name.as_str(),
                    leads.of(job).num_milliseconds() as f64 / 1000.0,
                )
            })
        })
        .collect();
    // The targets in flight, counted once for both gauges.
    let (suspended, throttled) =
        core.runs()
            .flat_map(|r| r.targets().values())
            .fold((0, 0), |(s, q), t| {
                (
                    s + usize::from(t.suspended()),
                    q + usize::from(t.is_throttled()),
                )
            });
    let ha = &core.ha;
    let gauges = Gauges {
        config: &core.config,
        publishes: core.rounds.publishes(),
        deployments: core.fleet.deployments_total(),
        prestage_leads,
        wrappers_connected: core.sessions.len(),
        runs_in_flight: core.runs_in_flight(),
        targets_suspended: suspended,
        targets_throttled: throttled,
        ha: ha.shared().then(|| HaGauges {
            server: ha.server(),
            role: ha.role(),
            leader: ha.leader(),
            holder: ha.known_holder(),
            takeovers: ha.takeovers(),
        }),
        storage_trouble: core.storage.trouble().is_some(),
        db_write_failures: core.storage.write_failures(),
        slots_refused: core.storage.slots_refused(),
        outcomes_unstored: core.storage.outcomes_waiting(),
        stalls: core.liveness.stalls(),
        outbox: core.notify.outbox(),
        now: now_ms(),
    };
    render(core.views.metrics(), &gauges)
}
