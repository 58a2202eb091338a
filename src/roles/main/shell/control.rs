//! What the supervisor says to main: stop, an ordered stop, reload, this daemon's
//! processes.

use std::time::Instant;

use crate::evloop::Ctx;
use crate::roles::common::{ControlLink, Controlled};
use crate::roles::main::shell::main_loop::{pump, stop_when_settled};
use crate::roles::main::shell::{MainRole, SHUTDOWN_GRACE};
use crate::wire::link::ControlDown;

impl Controlled for MainRole {
    fn control(&mut self) -> &mut ControlLink {
        self.core.links.control()
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        match msg {
            ControlDown::Shutdown => {
                log::info!(
                    "shutting down; {} runs in flight continue on their targets",
                    self.core.runs_in_flight()
                );
                self.core.flight.stop();
                let deadline = Instant::now() + SHUTDOWN_GRACE;
                stop_when_settled(self, ctx, deadline);
            }
            ControlDown::Stopping => {
                log::info!("an ordered stop began: nothing new is launched");
                self.core.flight.stop();
                pump(self, ctx);
            }
            ControlDown::Reload => {
                let core = &mut self.core;
                let out = core.reloads.request(&core.config, None, Instant::now());
                core.perform(out);
                pump(self, ctx);
            }
            ControlDown::Processes {
                started_at,
                processes,
                wrapper_port,
                api_port,
            } => {
                self.core
                    .daemon
                    .processes_known(started_at, processes, wrapper_port, api_port);
            }
            // Answered by `roles::common::control_event` before it reaches a role.
            ControlDown::Ping(_) => {}
        }
    }
}
