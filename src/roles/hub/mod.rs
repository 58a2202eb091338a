//! The `hub` process: every outside connection, and no business logic.
//!
//! It accepts `saltpeterctl` on the admin socket and wrappers on their WebSocket port,
//! validates what arrives (sizes, framing, message shapes) and forwards it to main as typed
//! requests; main's answers and commands go back out. A bad or slow client is dropped with
//! a log line and never holds up anyone else.

mod admin;
mod wrappers;

use std::time::{Duration, Instant};

use mio::event::Event;

use super::{ControlLink, Controlled, Link, RoleArgs, RoleError, attach_control, open_link};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::rpc::{CallError, Packet, PendingCalls};
use crate::wire::link::{ControlDown, HubAnswer, HubReply, HubRequest, MainToHub, Role};

type MainLink = Link<Packet<HubRequest, HubAnswer>, Packet<MainToHub, HubReply>>;

/// What to do with main's answer to a call.
#[derive(Debug, Clone, Copy)]
pub enum Waiting {
    Admin(admin::ConnId),
    Hello(crate::wire::link::ConnId),
}

pub struct Hub {
    control: ControlLink,
    main: MainLink,
    calls: PendingCalls<Waiting>,
    admin: admin::Admin,
    wrappers: wrappers::Wrappers,
}

impl Controlled for Hub {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        if let ControlDown::Shutdown = msg {
            log::info!("shutting down");
            ctx.stop();
        }
    }
}

impl Hub {
    /// Call main; the answer is dispatched by `Waiting`.
    pub fn call_main(&mut self, req: HubRequest, timeout: Duration, waiting: Waiting) {
        let id = self.calls.start(Instant::now(), timeout, waiting);
        if let Err(e) = self.main.send(&Packet::Call { id, req }) {
            log::error!("could not reach main: {e}");
            if let Some(waiting) = self.calls.finish(id) {
                self.call_failed(waiting, CallError::PeerGone(Role::Main));
            }
        }
    }

    /// Tell main something that needs no answer.
    pub fn cast_main(&mut self, req: HubRequest) {
        if let Err(e) = self.main.send(&Packet::Cast(req)) {
            log::error!("could not reach main: {e}");
        }
    }

    fn call_failed(&mut self, waiting: Waiting, err: CallError) {
        match waiting {
            Waiting::Admin(conn) => admin::fail(self, conn, &err),
            Waiting::Hello(conn) => wrappers::hello_failed(self, conn, &err),
        }
    }
}

fn on_main(hub: &mut Hub, ctx: &mut Ctx<Hub>, _: (), event: &Event) -> Flow {
    if event.is_writable()
        && let Err(e) = hub.main.on_writable()
    {
        log::debug!("link to main: {e}");
    }
    let msgs = match hub.main.receive() {
        Ok(msgs) => msgs,
        Err(e) => {
            for (_, waiting, err) in hub.calls.fail_all() {
                hub.call_failed(waiting, err);
            }
            return super::link_failed(ctx, &e);
        }
    };
    for msg in msgs {
        match msg {
            Packet::Reply { id, result } => {
                let Some(waiting) = hub.calls.finish(id) else {
                    log::warn!("answer {id} from main arrived after its deadline");
                    continue;
                };
                match (waiting, result) {
                    (Waiting::Admin(conn), Ok(HubReply::Admin(resp))) => {
                        admin::respond(hub, ctx, conn, resp)
                    }
                    (Waiting::Hello(conn), Ok(HubReply::Verdict(v))) => {
                        wrappers::verdict(hub, ctx, conn, v)
                    }
                    (waiting, Ok(other)) => {
                        log::error!("main answered {waiting:?} with {other:?}");
                    }
                    (waiting, Err(e)) => hub.call_failed(waiting, CallError::Remote(e)),
                }
            }
            Packet::Cast(cmd) => match cmd {
                MainToHub::ToWrapper { conn, msg } => wrappers::send(hub, ctx, conn, &msg.0),
                MainToHub::CloseWrapper { conn } => wrappers::close(hub, ctx, conn),
                MainToHub::AdminProgress { call, line } => admin::progress(hub, call, line),
            },
            Packet::Call { id, .. } => log::warn!("main made call {id}, which hub does not serve"),
        }
    }
    Flow::Continue
}

fn expire_calls(hub: &mut Hub, _ctx: &mut Ctx<Hub>) {
    for (id, waiting, err) in hub.calls.expire(Instant::now()) {
        log::warn!("call {id} to main: {err}");
        hub.call_failed(waiting, err);
    }
}

pub fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let mut ev: EventLoop<Hub> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let stream = args.take_stream("main")?;
    let (main, _) = open_link(ev.ctx(), stream, Role::Hub, Role::Main, (), on_main)?;
    let admin = admin::Admin::listen(ev.ctx(), args.take_fd("admin")?)?;
    // Start-only limits; main owns the rest of the configuration.
    let limits = match crate::config::load_settings(&args.dirs.config) {
        Ok(settings) => wrappers::Limits::from_config(&settings),
        Err(e) => {
            log::warn!("cannot read the configuration ({e}); default limits apply");
            wrappers::Limits::default()
        }
    };
    let wrappers = wrappers::Wrappers::listen(ev.ctx(), args.take_fd("wrappers")?, limits)?;
    ev.ctx().every(Duration::from_millis(250), expire_calls);
    ev.ctx().every(Duration::from_secs(1), wrappers::sweep);
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut hub = Hub {
        control,
        main,
        calls: PendingCalls::new(Role::Main),
        admin,
        wrappers,
    };
    ev.run(&mut hub).map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
