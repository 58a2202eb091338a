//! The `main` process: configuration, schedules, run state and Workflows.
//!
//! Placeholder until the run machinery is wired in: it serves `status`.

use mio::event::Event;

use super::{Controlled, ControlLink, Link, RoleArgs, RoleError, attach_control, open_link};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::rpc::{CallId, Packet};
use crate::wire::admin::{AdminFailure, AdminRequest, AdminResponse, StatusInfo};
use crate::wire::link::{
    BlockingNotice, BlockingReply, BlockingRequest, ControlDown, HubAnswer, HubReply, HubRequest,
    MainToHub, ProcessInfo, Role,
};

type HubLink = Link<Packet<MainToHub, HubReply>, Packet<HubRequest, HubAnswer>>;
type DbLink = Link<Packet<(), ()>, Packet<(), ()>>;
type BlockingLink = Link<Packet<BlockingRequest, BlockingNotice>, Packet<BlockingNotice, BlockingReply>>;

#[derive(Debug, Clone, Copy)]
enum Peer {
    Hub,
    Db,
    Blocking,
}

pub struct Main {
    control: ControlLink,
    hub: HubLink,
    db: DbLink,
    blocking: BlockingLink,
    processes: Vec<ProcessInfo>,
    started_at: i64,
}

impl Controlled for Main {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        match msg {
            ControlDown::Shutdown => ctx.stop(),
            ControlDown::Reload => log::info!("reload requested"),
            ControlDown::Processes {
                started_at,
                processes,
            } => {
                self.started_at = started_at;
                self.processes = processes;
            }
        }
    }
}

fn on_link(main: &mut Main, ctx: &mut Ctx<Main>, peer: Peer, event: &Event) -> Flow {
    let writable = event.is_writable();
    let result = match peer {
        Peer::Hub => {
            if writable {
                let _ = main.hub.on_writable();
            }
            main.hub.receive().map(|msgs| {
                for msg in msgs {
                    on_hub(main, ctx, msg);
                }
            })
        }
        Peer::Db => {
            if writable {
                let _ = main.db.on_writable();
            }
            main.db.receive().map(|_| ())
        }
        Peer::Blocking => {
            if writable {
                let _ = main.blocking.on_writable();
            }
            main.blocking.receive().map(|_| ())
        }
    };
    match result {
        Ok(()) => Flow::Continue,
        Err(e) => {
            log::error!("{e}; exiting");
            ctx.stop();
            Flow::Close
        }
    }
}

fn on_hub(main: &mut Main, _ctx: &mut Ctx<Main>, msg: Packet<HubRequest, HubAnswer>) {
    match msg {
        Packet::Call { id, req: HubRequest::Admin(req) } => {
            let resp = admin(main, req);
            reply_hub(main, id, HubReply::Admin(resp));
        }
        other => log::debug!("hub: {other:?}"),
    }
}

fn reply_hub(main: &mut Main, id: CallId, reply: HubReply) {
    if let Err(e) = main.hub.send(&Packet::Reply { id, result: Ok(reply) }) {
        log::error!("could not answer hub: {e}");
    }
}

fn admin(main: &mut Main, req: AdminRequest) -> AdminResponse {
    match req {
        AdminRequest::Status => {
            let now = chrono::Utc::now().timestamp_millis();
            AdminResponse::Status(StatusInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_at: main.started_at,
                uptime_s: ((now - main.started_at).max(0) / 1000) as u64,
                processes: main.processes.clone(),
                jobs: 0,
                running_runs: 0,
                config_errors: Vec::new(),
            })
        }
        other => AdminResponse::Failure(AdminFailure::Invalid(format!(
            "{other:?} is not available yet"
        ))),
    }
}

pub fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let mut ev: EventLoop<Main> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let s = args.take_stream("hub")?;
    let (hub, _) = open_link(ev.ctx(), s, Role::Main, Role::Hub, Peer::Hub, on_link)?;
    let s = args.take_stream("db")?;
    let (db, _) = open_link(ev.ctx(), s, Role::Main, Role::Db, Peer::Db, on_link)?;
    let s = args.take_stream("blocking")?;
    let (blocking, _) = open_link(
        ev.ctx(),
        s,
        Role::Main,
        Role::Blocking,
        Peer::Blocking,
        on_link,
    )?;
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut main = Main {
        control,
        hub,
        db,
        blocking,
        processes: Vec::new(),
        started_at: chrono::Utc::now().timestamp_millis(),
    };
    ev.run(&mut main).map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
