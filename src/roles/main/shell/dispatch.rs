//! The loop's one match over [`Message`]: what each message does, and to which part. It
//! runs after every event, before the Workflows are woken (`main_loop::pump`), until no
//! message is left (a part's answer may post another).

mod lifecycle;

use crate::evloop::Ctx;
use std::time::Instant;

use crate::config::LoadedConfig;
use crate::roles::main::fleet::{self, Now};
use crate::roles::main::masters::serve;
use crate::roles::main::messages::Message;
use crate::roles::main::notify;
use crate::roles::main::run::Flight;
use crate::roles::main::shell::requests::answer::send_run;
use crate::roles::main::shell::run;
use crate::roles::main::shell::{Main, MainRole};
use crate::roles::main::shell::{firing, views};
use crate::roles::main::views::answer::live_base_read;
use crate::wire::records::now_ms;
use crate::workflow::{WakeEvent, WakeKey};

/// Most messages handled in one turn: a part that posts forever cannot hold the loop.
const MAX_PER_TURN: usize = 100_000;

/// Hand every message posted to the part it is for.
pub(super) fn drain(role: &mut MainRole, ctx: &mut Ctx<MainRole>) {
    for _ in 0..MAX_PER_TURN {
        let core = &mut role.core;
        let Some(msg) = core.inbox.pop_front() else {
            return;
        };
        match msg {
            Message::MaintenanceSaved { call, note, result } => {
                let out = core
                    .maintenance
                    .saved(&core.config.maintenance, call, note, result);
                core.perform(out);
            }
            Message::StartupLoaded { load, result } => {
                let now = std::time::Instant::now();
                let (restore, out) = core.boot.loaded(load, result, now);
                lifecycle::restore(core, restore);
                core.perform(out);
            }
            Message::StartupRetry => {
                let out = core.boot.retry();
                core.perform(out);
            }
            Message::StartupDone { last_slots, parked } => {
                lifecycle::finish_start(role, ctx, &last_slots, parked);
                // The stale minions' upgrade waits for the start-up hold to be lifted.
                let core = &mut role.core;
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.upgrade_stale(daemon);
                core.perform(out);
            }
            Message::Adopt => lifecycle::adopt(core),
            Message::Lease(report) => {
                if let Some(secret) = crate::roles::main::lifecycle::ha::shared_secret(&report) {
                    core.secret = secret;
                }
                let out = core.ha.reported(report);
                core.perform(out);
            }
            Message::LeaseApply => {
                let out = core.ha.apply();
                core.perform(out);
            }
            Message::LeaseLost => ctx.stop(),
            Message::ScheduleChanged => role.arm_schedule(ctx),
            Message::ConfigRead { started, result } => {
                lifecycle::config_read(role, ctx, started, result)
            }
            Message::PluginKilled { run, result } => match result {
                Ok(crate::wire::link::BlockingReply::Launched(outcomes)) => {
                    for (_, o) in outcomes {
                        match o.result {
                            Ok(()) => log::info!(
                                "run {run}: the executor killed the wrapper on {}",
                                o.machine
                            ),
                            Err(why) => {
                                log::warn!("run {run}: no out-of-band kill on {}: {why}", o.machine)
                            }
                        }
                    }
                }
                Ok(other) => log::warn!("run {run}: the out-of-band kill got {other:?}"),
                Err(e) => log::warn!("run {run}: the out-of-band kill failed: {e}"),
            },
            Message::PluginChecked { plugin, result } => {
                lifecycle::plugin_checked(role, ctx, plugin, result)
            }
            Message::Later { at, msg } => {
                let _ = ctx.at(at, move |role: &mut MainRole, ctx| {
                    role.core.post(*msg);
                    role.pump(ctx);
                });
            }
            Message::NotifyLastRuns { result } => core.notify.last_runs(result),
            Message::NotifyTailsRead { decided, result } => {
                let limit = core.config.saltpeter.notify_rate_limit;
                let out = core.notify.tails_read(limit, *decided, result, now_ms());
                core.perform(out);
            }
            Message::NotifyQueued { result } => {
                let out = core.notify.queued(result, now_ms());
                core.perform(out);
            }
            Message::DeliveriesDue { result } => {
                let out = core.notify.due(&core.config.saltpeter, result, now_ms());
                core.perform(out);
            }
            Message::DeliveryAnswered { attempt, result } => {
                let out = core.notify.answered(attempt, result, now_ms());
                core.perform(out);
            }
            Message::DeliveriesListed { call, result } => {
                core.perform(notify::deliveries::listed(call, result))
            }
            Message::SaltCallSent {
                call,
                index,
                wait,
                result,
            } => {
                let me = core.ha.server();
                let out = core
                    .delegation
                    .sent(me, call, index, wait, result, Instant::now());
                core.perform(out);
            }
            Message::SaltPartAnswered {
                call,
                index,
                result,
            } => {
                let out = core
                    .delegation
                    .local_part(core.ha.server(), call, index, result);
                core.perform(out);
            }
            Message::SaltCallMerged { call, result } => core.blocking_merged(call, result),
            Message::SaltCallServed { row, from, result } => {
                core.perform(serve::served(row, &from, result));
            }
            Message::JobCtlSaved { call, note, result } => {
                let out = core.jobctl.saved(call, note, result);
                core.perform(out);
            }
            Message::RunChanged(run) => views::run_changed(core, run),
            Message::RunEnded(end) => {
                // The run's end listeners, in this order: the jobs chained to it start,
                // its waiters are answered, the views count it (and tell its followers).
                firing::chains::run_ended(core, &end.job, end.run, end.state);
                for call in &end.waiters {
                    // The stored record is the truth (ended time, state): read it back.
                    send_run(core, *call, end.run);
                }
                let out = core.views.run_ended(end, now_ms());
                core.perform(out);
            }
            Message::FollowLatest { call, result } => {
                let out = core.views.live().latest_read(call, result);
                core.perform(out);
            }
            Message::FollowRun { call, result } => views::follow_run(core, call, result),
            Message::FollowRead {
                call,
                machine,
                result,
            } => {
                let out = core.views.live().output_read(call, &machine, result);
                core.perform(out);
            }
            Message::FollowEnd { call, result } => {
                let out = core.views.live().end_read(call, result);
                core.perform(out);
            }
            Message::LiveBase {
                call,
                upto_seq,
                result,
            } => core.perform(live_base_read(call, upto_seq, result)),
            Message::LastRuns(result) => core.views.ui().last_runs(result),
            Message::MirrorInFlight(result) => {
                let standby = views::standby(core);
                let out = core.views.mirror_in_flight(result, standby);
                core.perform(out);
            }
            Message::MirrorRun { run, result } => views::mirror_run(core, run, result),
            Message::MirrorFeed {
                run,
                machine,
                result,
            } => {
                let out = core.views.mirror_feed(run, machine, result);
                core.perform(out);
            }
            Message::MirrorBase {
                call,
                run,
                machine,
                result,
            } => {
                let out = core.views.mirror_base(call, run, machine, result);
                core.perform(out);
            }
            Message::FleetLoaded { result } => {
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.loaded(daemon, result, Now::read());
                core.perform(out);
            }
            Message::WrapperHashed { result } => {
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.hashed(daemon, result, Now::read());
                core.perform(out);
            }
            Message::WrappersDeployed {
                path,
                minions,
                result,
            } => {
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core
                    .fleet
                    .deployed(daemon, path, minions, result, Now::read());
                core.perform(out);
            }
            Message::FleetChanged => core.wake(WakeKey::event(WakeEvent::Fleet)),
            Message::WrapperTargetResolved {
                call,
                target,
                path,
                result,
            } => {
                let sp = &core.config.saltpeter;
                let out = fleet::on_demand::resolved(sp, call, target, path, result);
                core.perform(out);
            }
            Message::WrapperDeployedOnDemand {
                call,
                path,
                lines,
                result,
            } => {
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out =
                    core.fleet
                        .deployed_on_demand(daemon, call, path, lines, result, Now::read());
                core.perform(out);
            }
            Message::ConfigReloaded => {
                // A reload may turn the deployment on (`wrapper_deploy`).
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.upgrade_stale(daemon);
                core.perform(out);
            }
            Message::LaunchAnswered { runs, sent, result } => {
                let stopping = core.flight.is_stopping();
                let now = Instant::now();
                if let Some(answered) = core.rounds.answered(runs, sent, result, stopping, now) {
                    core.views.metrics_mut().observe_launch(answered.took);
                    for run in answered.runs {
                        core.wake(WakeKey::event(Main::run_event(run)));
                    }
                }
            }
            Message::OrphansRead { result } => run::orphans::loaded(core, result),
            Message::InFlightRead { result } => run::recovery::recovered(role, ctx, result),
        }
    }
    log::warn!(
        "{} messages are left for the next turn: more than {MAX_PER_TURN} were posted in this one",
        role.core.inbox.len()
    );
}

/// The daemon around the fleet: its settings and where it is in its life.
fn fleet_daemon<'a>(config: &'a LoadedConfig, flight: &Flight) -> fleet::Daemon<'a> {
    fleet::Daemon {
        sp: &config.saltpeter,
        recovering: flight.is_recovering(),
        stopping: flight.is_stopping(),
    }
}
