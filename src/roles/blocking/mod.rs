//! The `blocking` process: slow commands as child processes, so no other loop waits.
//!
//! Main asks it to launch wrappers (through the executor of the job); each launch is a
//! child process whose pipes are drained by the loop while it runs, and the reply goes
//! back when every target's launch has exited, or for a local wrapper started directly,
//! has said it runs on its own (`local.rs`; such wrappers are reaped here when they end
//! and do not hold up a stop). Other slow work (reading and parsing the configuration for
//! main's reloads, hashing and copying the wrapper binary) runs in helper processes, the
//! daemon binary in a hidden mode (`helpers.rs`). Nothing here decides anything about runs.

pub(crate) mod deliver;
pub(crate) mod helpers;
mod local;
mod plugin;
mod plugin_launch;
pub(crate) mod salt;
mod state;

use mio::event::Event;

use super::common::{ControlLink, Controlled, RoleArgs, RoleError, attach_control, open_link};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::Role;
use crate::ipc::rpc::{CallId, Packet, RemoteError};
use crate::wire::link::{BlockingReply, BlockingRequest, ControlDown, ExecutorKind, PluginCall};
use state::Blocking;

impl Controlled for Blocking {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        if let ControlDown::Shutdown = msg {
            self.stopping = true;
            stop_when_idle(self, ctx);
        }
    }
}

fn stop_when_idle(state: &mut Blocking, ctx: &mut Ctx<Blocking>) {
    if state.stopping
        && ctx.children().is_empty()
        && state.launches.is_idle()
        && state.salt.is_idle()
    {
        ctx.stop();
    }
}

fn on_main(state: &mut Blocking, ctx: &mut Ctx<Blocking>, _: (), event: &Event) -> Flow {
    if event.is_writable()
        && let Err(e) = state.main.on_writable()
    {
        log::debug!("link to main: {e}");
    }
    let msgs = match state.main.receive() {
        Ok(msgs) => msgs,
        Err(e) => return super::common::link_failed(ctx, &e),
    };
    for msg in msgs {
        match msg {
            Packet::Call { id, req, .. } => handle(state, ctx, id, req),
            Packet::Cast(req) => log::warn!("unexpected one-way request from main: {req:?}"),
            Packet::Reply { id, .. } => log::warn!("reply {id} from main to a call never made"),
        }
    }
    Flow::Continue
}

fn handle(state: &mut Blocking, ctx: &mut Ctx<Blocking>, id: CallId, req: BlockingRequest) {
    match req {
        BlockingRequest::Launch {
            executor,
            wrapper_path,
            runs,
            url,
            targets,
            salt,
            await_returns,
        } => match (executor, salt, runs.as_slice()) {
            _ if targets.is_empty() || runs.is_empty() => {
                state.reply(id, Ok(BlockingReply::Launched(Vec::new())))
            }
            (ExecutorKind::Local, _, &[run]) => {
                let launch = state::Launch {
                    wrapper: wrapper_path,
                    run,
                    url,
                };
                local::launch(state, ctx, id, launch, targets)
            }
            (ExecutorKind::Plugin { spec, deploy }, _, &[run]) => {
                let launch = state::Launch {
                    wrapper: wrapper_path,
                    run,
                    url,
                };
                plugin_launch::launch(state, ctx, id, *spec, deploy, launch, targets)
            }
            (ExecutorKind::Local | ExecutorKind::Plugin { .. }, _, _) => state.reply(
                id,
                Err(RemoteError::Failed(
                    "a local or plugin launch starts exactly one run".into(),
                )),
            ),
            (ExecutorKind::Salt, Some(salt), _) => {
                let launch = salt::exec::SaltLaunch {
                    wrapper: wrapper_path,
                    runs,
                    url,
                    await_returns,
                };
                salt::exec::launch(state, ctx, id, salt, launch, targets)
            }
            (ExecutorKind::Salt, None, _) => state.reply(
                id,
                Err(RemoteError::Failed(
                    "a salt launch needs salt settings".into(),
                )),
            ),
        },
        BlockingRequest::Resolve {
            salt,
            target,
            target_type,
            from_cache,
        } => salt::exec::resolve(state, ctx, id, salt, target, target_type, from_cache),
        BlockingRequest::Deploy {
            salt,
            minions,
            wrapper_path,
            wrapper_source,
        } => salt::exec::deploy(state, ctx, id, salt, minions, wrapper_path, wrapper_source),
        BlockingRequest::LoadConfig { dir, known } => {
            helpers::load_config_call(state, ctx, id, dir, known)
        }
        BlockingRequest::Deliver(order) => deliver::deliver_call(state, ctx, id, order),
        BlockingRequest::Plugin {
            spec,
            call: PluginCall::Kill { run, machines },
        } => plugin_launch::kill(state, ctx, id, &spec, run, machines),
        BlockingRequest::Plugin { spec, call } => plugin::call(state, ctx, id, *spec, call),
    }
}

pub(crate) fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let mut ev: EventLoop<Blocking> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let stream = args.take_stream("main")?;
    let (main, _) = open_link(ev.ctx(), stream, Role::Blocking, Role::Main, (), on_main)?;
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut state = Blocking {
        control,
        main,
        stopping: false,
        batches: Default::default(),
        launches: Default::default(),
        wrapper_log_dir: args.dirs.state.join("wrapper-logs"),
        token_dir: args.dirs.launch_tokens(),
        state_dir: args.dirs.state.clone(),
        salt: Default::default(),
    };
    ev.run(&mut state).map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
