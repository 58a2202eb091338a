//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Outline:
//! 1. Start-up: load the configuration and the server secret, connect the links, plan the
//!    schedule, say `Ready`.
//! 2. The schedule timer fires at the earliest slot; each due slot becomes a run Workflow
//!    (`run`), or a recorded skip (overlap, missed).
//! 3. Wrapper sessions (`sessions`) arrive from the hub; main vets hellos, keeps the
//!    liveness clock, forwards output to db and acks only what db committed.
//! 4. Requests (`requests/`, one file per topic) from the admin socket, the HTTP API and
//!    `/ws` read and change the same state.
//!
//! Everything that changes a run emits a wake key; after each event the loop hands the
//! keys to the Workflow registry, which resumes the steps waiting on them. The registry
//! lives beside the state (`MainRole`), so steps get `&mut Main` without shared cells.
//!
//! The state is in `state/`, below every part; each part makes its own db calls with its
//! own continuation (`DbWait`), and no part names this file.

mod dispatch;
mod firing;
mod fleet;
mod jobctl;
mod lifecycle;
mod main_loop;
mod maintenance;
mod masters;
mod messages;
mod notify;
mod orphans;
mod requests;
mod rounds;
mod rules;
mod run;
mod sessions;
mod shell;
mod state;
mod views;
mod wrappers;

pub use rules::tokens;

use std::time::Instant;

use super::common::{ControlLink, Controlled};
use crate::evloop::Ctx;
use crate::wire::link::ControlDown;
use crate::wire::records::{RunId, RunState};
use crate::workflow::WakeKey;
use firing::chains;
use main_loop::{pump, stop_when_settled};
use messages::{FinishedRun, Message};
use state::active::ActiveRun;
use state::{MainRole, SHUTDOWN_GRACE};

pub(crate) use main_loop::run;
pub(crate) use state::Main;

impl Main {
    /// A run ended and its end is recorded: its end listeners hear of it (the dispatch,
    /// `Message::RunEnded`: its waiters are answered, its followers and watchers told, the
    /// views count it), and the jobs chained to it start. (The run Workflow calls this.)
    pub(crate) fn run_ended(&mut self, active: &ActiveRun, state: RunState) {
        self.post(Message::RunEnded(FinishedRun {
            run: active.id,
            job: active.job.name.clone(),
            state,
            slot: active.slot,
            trigger: active.trigger,
            targets: active.targets.iter().map(|(m, t)| t.record(m)).collect(),
            waiters: active.waiters.clone(),
        }));
        chains::run_ended(self, &active.job.name, active.id, state);
    }

    pub(crate) fn wake_run(&mut self, run: RunId) {
        self.wake(WakeKey::Event(Main::run_event(run)));
        // A target of it may have ended: runs waiting for a place look again.
        self.wake_capacity();
        // The views look again (`Message::RunChanged`).
        self.post(Message::RunChanged(run));
    }
}

impl Controlled for MainRole {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.core.links.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        match msg {
            ControlDown::Shutdown => {
                log::info!(
                    "shutting down; {} runs in flight continue on their targets",
                    self.core.runs_in_flight()
                );
                self.core.flight.stopping = true;
                let deadline = Instant::now() + SHUTDOWN_GRACE;
                stop_when_settled(self, ctx, deadline);
            }
            ControlDown::Stopping => {
                log::info!("an ordered stop began: nothing new is launched");
                self.core.flight.stopping = true;
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
                self.core.daemon.started_at = started_at;
                self.core.daemon.processes = processes;
                self.core.daemon.wrapper_port = wrapper_port;
                self.core.daemon.api_port = api_port;
            }
            // Answered by `roles::common::control_event` before it reaches a role.
            ControlDown::Ping(_) => {}
        }
    }
}
