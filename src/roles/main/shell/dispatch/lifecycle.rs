//! What the life cycle's messages do to the rest of main. The parts (`lifecycle/`) keep
//! the state and decide; what follows needs parts they sit below: the loop's hooks (the
//! schedule timer), recovery of the runs in flight, the firing of missed slots, the
//! views, the admin requests parked during start-up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::config::LoadedConfig;
use crate::evloop::Ctx;
use crate::roles::main::lifecycle::boot::Restore;
use crate::roles::main::lifecycle::heap;
use crate::roles::main::lifecycle::reload::{Changes, Read};
use crate::roles::main::lifecycle::watch::Rescan;
use crate::roles::main::messages::{BlockingResult, Parked};
use crate::roles::main::rules::scheduler::Due;
use crate::roles::main::shell::firing;
use crate::roles::main::shell::firing::missed;
use crate::roles::main::shell::{DbWait, Main, MainRole, history};
use crate::wire::db::{DbRequest, NewRun};
use crate::wire::records::{Millis, RunState, Trigger};

/// Why a slot found missed at start-up was missed.
const DOWN: &str = "the daemon was not running at this slot";

/// A setting start-up loaded goes to its part.
pub(super) fn restore(core: &mut Main, restore: Option<Restore>) {
    match restore {
        Some(Restore::Maintenance(value)) => core.maintenance.restore(value),
        Some(Restore::JobCtl(value)) => core.jobctl.restore(value),
        None => {}
    }
}

/// This server leads from now on: the start-up hold, start-up's loads, the runs in
/// flight, the notifications.
pub(super) fn adopt(core: &mut Main) {
    core.flight.begin_recovery();
    let out = core.fleet.start(&core.config);
    core.perform(out);
    let out = core.boot.start(crate::roles::main::jobctl::META_KEY);
    core.perform(out);
    crate::roles::main::shell::run::recovery::start(core);
    // Only the leader sends notifications: a standby would release the leader's leases.
    let out = core.notify.start(crate::wire::records::now_ms());
    core.perform(out);
}

/// Start-up has everything: settle the missed slots, lift the start-up hold, arm the
/// schedule, answer the parked requests.
pub(super) fn finish_start(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    last_slots: &BTreeMap<String, Millis>,
    parked: Vec<Parked>,
) {
    let core = &mut role.core;
    core.flight.recovered();
    catch_up(core, last_slots, Utc::now());
    role.arm_schedule(ctx);
    for Parked {
        call,
        req,
        uid,
        name,
    } in parked
    {
        // Handled as whoever asked (the admin socket's peer or the API identity), as it
        // would have been without the wait.
        role.core.actor.admin(uid);
        if let Some(name) = name {
            role.core.actor.api(name);
        }
        crate::roles::main::shell::requests::handle(&mut role.core, call, req);
        role.core.actor.admin_done();
        role.core.actor.api_done();
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
        core.views
            .metrics_mut()
            .slots_missed(&job.name, slots.count());
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
    firing::fire(core, &due, now, Trigger::Catchup, None);
}

/// Record a slot as a run in state `skipped`.
fn record_skip(core: &mut Main, job: &str, slot: DateTime<Utc>, trigger: Trigger, reason: String) {
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

/// blocking read the files of the reload asked for at `started`: put the configuration
/// in effect, then answer who asked.
pub(super) fn config_read(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    started: Instant,
    result: BlockingResult,
) {
    let now = Utc::now();
    let core = &mut role.core;
    let loaded = match core
        .reloads
        .read(&core.config, started, result, now, Instant::now())
    {
        Read::Apply(loaded) => loaded,
        Read::Done(out) => return core.perform(out),
    };
    // Executor plugins check their part of it first (`config::plugin_check`).
    let loaded = match core.reloads.check_plugins(loaded, started) {
        Ok(out) => return core.perform(out),
        Err(loaded) => loaded,
    };
    apply(role, ctx, *loaded, now);
    let core = &mut role.core;
    let out = core.reloads.applied(&core.config, started, Instant::now());
    core.perform(out);
}

/// A plugin's `check_config` of the configuration being loaded answered: once every
/// plugin has, put it in effect.
pub(super) fn plugin_checked(
    role: &mut MainRole,
    ctx: &mut Ctx<MainRole>,
    plugin: String,
    result: BlockingResult,
) {
    let Some((loaded, started)) = role.core.reloads.plugin_checked(&plugin, result) else {
        return;
    };
    apply(role, ctx, *loaded, Utc::now());
    let core = &mut role.core;
    let out = core.reloads.applied(&core.config, started, Instant::now());
    core.perform(out);
}

/// Put a loaded configuration in effect and re-plan the schedule.
fn apply(role: &mut MainRole, ctx: &mut Ctx<MainRole>, loaded: LoadedConfig, now: DateTime<Utc>) {
    let core = &mut role.core;
    let changes = Changes::between(&core.config, &loaded);
    let old_maintenance = std::mem::replace(&mut core.config, loaded).maintenance;
    if changes.maintenance {
        let out = core.maintenance.file_changed(
            &old_maintenance,
            &core.config.maintenance,
            crate::wire::records::now_ms(),
        );
        core.perform(out);
    }
    if changes.retention {
        // New retention applies to the existing history too.
        history::apply_retention_to_all(core);
    }
    core.views.ui().config_changed(core.config.jobs.keys());
    core.scheduler.plan(core.config.valid_jobs(), now);
    role.arm_schedule(ctx);
    // Connected `/ws` clients see the change now, not at the next event.
    crate::roles::main::shell::views::flush_ui(&mut role.core);
    // A reload may turn the wrappers' deployment on (`wrapper_deploy`).
    role.core
        .post(crate::roles::main::messages::Message::ConfigReloaded);
    heap::trim_soon(ctx);
}

/// The watch of the configuration directory (`lifecycle/watch.rs`) on main's state.
impl Rescan for MainRole {
    fn reloading(&self) -> bool {
        self.core.reloads.in_flight()
    }

    fn rescan(&mut self, ctx: &mut Ctx<MainRole>) {
        if self.core.reloads.in_flight() {
            return;
        }
        match self.core.config.changed_on_disk() {
            Ok(true) => {
                log::info!("configuration changed on disk; reloading");
                let core = &mut self.core;
                let out = core.reloads.request(&core.config, None, Instant::now());
                core.perform(out);
                self.pump(ctx);
            }
            Ok(false) => {}
            Err(e) => log::warn!("cannot scan the configuration directory: {e}"),
        }
    }
}
