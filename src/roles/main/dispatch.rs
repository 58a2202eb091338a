//! The loop's one match over [`Message`]: what each message does, and to which part. It
//! runs after every event, before the Workflows are woken (`main_loop::pump`), until no
//! message is left (a part's answer may post another).

use crate::config::LoadedConfig;
use crate::roles::main::fleet::{self, Now};
use crate::roles::main::messages::Message;
use crate::roles::main::state::{Flight, MainRole};
use crate::workflow::{WakeEvent, WakeKey};

/// Most messages handled in one turn: a part that posts forever cannot hold the loop.
const MAX_PER_TURN: usize = 100_000;

/// Hand every message posted to the part it is for.
pub(super) fn drain(role: &mut MainRole) {
    let core = &mut role.core;
    for _ in 0..MAX_PER_TURN {
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
            Message::StartupDone => {
                // The stale minions' upgrade waits for the start-up hold to be lifted.
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.upgrade_stale(daemon);
                core.perform(out);
            }
            Message::ConfigReloaded => {
                // A reload may turn the deployment on (`wrapper_deploy`).
                let daemon = fleet_daemon(&core.config, &core.flight);
                let out = core.fleet.upgrade_stale(daemon);
                core.perform(out);
            }
        }
    }
    log::warn!(
        "{} messages are left for the next turn: more than {MAX_PER_TURN} were posted in this one",
        core.inbox.len()
    );
}

/// The daemon around the fleet: its settings and where it is in its life.
fn fleet_daemon<'a>(config: &'a LoadedConfig, flight: &Flight) -> fleet::Daemon<'a> {
    fleet::Daemon {
        sp: &config.saltpeter,
        recovering: flight.recovering,
        stopping: flight.stopping,
    }
}
