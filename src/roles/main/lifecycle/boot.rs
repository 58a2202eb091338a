//! Start-up: what main must know from db before it fires anything.
//!
//! 1. `start` asks db for the run-time maintenance settings and the job control state
//!    (paused and skipping jobs, `jobctl.rs`), both in `meta`, and the newest recorded slot
//!    of every job; `recovery::start` asks for the runs in flight.
//! 2. Until all four answers are in, `Main::recovering` holds: no slot fires, no run
//!    starts, no hello is vetted. A failed load is asked again (at most once a second).
//!    Admin requests that depend on these (run now, maintenance) are parked meanwhile.
//! 3. `finish_when_ready` (called from the loop's pump) then records or catches up the
//!    slots missed while the daemon was down (`missed.rs`), arms the schedule and answers
//!    the parked requests.

use crate::roles::main::state::lifecycle::{Boot, Load};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::evloop::Ctx;
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::ipc::rpc::CallError;
use crate::roles::main::firing::jobctl;
use crate::roles::main::firing::missed;
use crate::roles::main::maintenance;
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::state::{DbWait, Main, MainRole};
use crate::wire::admin::AdminRequest;
use crate::wire::db::NewRun;
use crate::wire::db::calls;
use crate::wire::db::{DbReply, DbRequest};
use crate::wire::records::{Millis, RunState, Trigger};

/// Why a slot found missed at start-up was missed.
const DOWN: &str = "the daemon was not running at this slot";

impl Boot {
    /// Keep an admin request that depends on what start-up loads (run now, maintenance)
    /// until start-up is done.
    pub(crate) fn park(&mut self, call: CallId, req: AdminRequest, uid: Option<u32>) {
        self.parked.push((call, req, uid));
    }

    /// The runs in flight are restored (`recovery.rs`).
    pub(crate) fn in_flight_loaded(&mut self) {
        self.in_flight_loaded = true;
    }
}

/// Ask db for the maintenance settings and the newest slot of every job.
pub(crate) fn start(core: &mut Main) {
    core.flight.recovering = true;
    let out = core.fleet.start(&core.config);
    core.perform(out);
    ask(core, Load::Maintenance);
    ask(core, Load::LastSlots);
    ask(core, Load::JobCtl);
}

fn ask(core: &mut Main, load: Load) {
    let req = match load {
        Load::Maintenance => DbRequest::GetMeta(maintenance::META_KEY.to_string()),
        Load::LastSlots => DbRequest::LastSlots,
        Load::JobCtl => DbRequest::GetMeta(jobctl::META_KEY.to_string()),
    };
    core.db_call(req, DbWait::with(load, answer));
}

/// db's answer to one load.
pub(crate) fn answer(core: &mut Main, load: Load, result: Result<DbReply, CallError>) {
    let loaded = match load {
        Load::Maintenance => calls::GetMeta::take(result).map(|value| {
            core.maintenance.restore(value);
            core.boot.maintenance_loaded = true;
        }),
        Load::LastSlots => calls::LastSlots::take(result).map(|slots| {
            core.boot.last_slots = Some(slots);
        }),
        Load::JobCtl => calls::GetMeta::take(result).map(|value| {
            jobctl::restore(core, value);
            core.boot.jobctl_loaded = true;
        }),
    };
    match loaded {
        Ok(()) => {}
        Err(e) => {
            // Without these main cannot tell what may fire: ask again rather than guess.
            log::error!("start-up could not load {load:?} ({e}); asking again");
            core.boot.failed.push(load);
            core.boot
                .retry_at
                .get_or_insert_with(|| Instant::now() + Duration::from_secs(1));
        }
    }
}

/// Once everything is loaded: settle the missed slots, lift the start-up hold, arm the
/// schedule.
pub(crate) fn finish_when_ready(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    let core = &mut role.core;
    if core.boot.done {
        return;
    }
    if core.boot.retry_at.is_some_and(|at| at <= Instant::now()) {
        core.boot.retry_at = None;
        for load in std::mem::take(&mut core.boot.failed) {
            ask(core, load);
        }
    }
    let boot = &core.boot;
    let loaded = boot.maintenance_loaded && boot.jobctl_loaded && boot.in_flight_loaded;
    if !(loaded && boot.last_slots.is_some()) {
        return;
    }
    core.boot.done = true;
    core.flight.recovering = false;
    core.post(crate::roles::main::messages::Message::StartupDone);
    let last = core.boot.last_slots.take().unwrap_or_default();
    catch_up(core, &last, Utc::now());
    role.arm_schedule(ctx);
    for (call, req, uid) in std::mem::take(&mut role.core.boot.parked) {
        // Handled as the peer that asked, as it would have been without the wait.
        role.core.actor.uid = uid;
        crate::roles::main::requests::handle(role, ctx, call, req);
        role.core.actor.uid = None;
    }
}

/// Record (or run, for `missed: latest`) the slots each job missed while the daemon was
/// down: those after its newest recorded slot and before its next planned one.
fn catch_up(core: &mut Main, last_slots: &BTreeMap<String, Millis>, now: DateTime<Utc>) {
    let limit = core.config.saltpeter.missed_record_limit as usize;
    let started = Instant::now();
    let mut jobs = Vec::new();
    for job in core
        .config
        .jobs
        .values()
        .filter_map(|e| e.job_ref())
        .filter(|j| j.enabled)
    {
        let Some(last) = last_slots
            .get(&job.name)
            .and_then(|ms| DateTime::from_timestamp_millis(*ms))
        else {
            continue; // never fired: nothing can have been missed
        };
        let before = core
            .scheduler
            .next_of(&job.name)
            .unwrap_or(now + chrono::Duration::milliseconds(1));
        let slots = missed::missed_slots(&job.schedule, last, before, limit);
        if !slots.slots.is_empty() {
            jobs.push((Arc::clone(job), slots));
        }
    }
    let mut recorded = 0;
    for (job, slots) in jobs {
        core.views.ui.metrics.slots_missed(&job.name, slots.count());
        log::warn!(
            "{}: {} slot(s) missed while the daemon was down, since {}",
            job.name,
            slots.slots.len(),
            slots.since
        );
        for action in missed::decide(&job, &slots, now, DOWN) {
            match action {
                missed::Action::Skip { slot, reason } => {
                    record_skip(core, &job.name, slot, Trigger::Schedule, reason);
                    recorded += 1;
                }
                missed::Action::Run { slot } => catch_up_run(core, &job, slot, now),
            }
        }
    }
    if recorded > 0 {
        log::info!(
            "recorded {recorded} missed slot(s) in {} ms",
            started.elapsed().as_millis()
        );
    }
}

/// A missed slot runs late (trigger `catchup`), under the rules of any firing (global
/// maintenance, overlap).
fn catch_up_run(
    core: &mut Main,
    job: &Arc<crate::config::Job>,
    slot: DateTime<Utc>,
    now: DateTime<Utc>,
) {
    log::info!("{}: catching up the missed slot {slot}", job.name);
    let due = Due {
        job: job.name.clone(),
        slot,
        missed: false,
        early: false,
    };
    jobctl::fire(core, &due, now, Trigger::Catchup, None);
}

/// Record a slot as a run in state `skipped`.
pub(crate) fn record_skip(
    core: &mut Main,
    job: &str,
    slot: DateTime<Utc>,
    trigger: Trigger,
    reason: String,
) {
    core.db_call(
        DbRequest::CreateRun(NewRun {
            job: job.to_string(),
            slot: Some(slot.timestamp_millis()),
            trigger,
            state: RunState::Skipped,
            reason: Some(reason),
            targets: Vec::new(),
            now: Utc::now().timestamp_millis(),
        }),
        DbWait::write("a skipped slot"),
    );
}
