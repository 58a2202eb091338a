//! The `hub` process: every outside connection, and no business logic.
//!
//! It accepts `saltpeterctl` on the admin socket and wrappers on their WebSocket port,
//! validates what arrives (sizes, framing, message shapes) and forwards it to main as typed
//! requests; main's answers and commands go back out. A bad or slow client is dropped with
//! a log line and never holds up anyone else.

mod admin;
pub(crate) mod client_addr;
mod http;
pub(crate) mod logsafe;
mod state;
mod wrappers;

use std::time::Instant;

use mio::event::Event;

use super::common::{ControlLink, Controlled, RoleArgs, RoleError, attach_control, open_link};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::Role;
use crate::ipc::rpc::{CallError, Packet, PendingCalls};
use crate::wire::link::{ControlDown, HubReply, MainToHub};
use state::{Hub, Waiting};

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

/// A call to main failed: tell the part that made it.
fn call_failed(hub: &mut Hub, waiting: Waiting, err: CallError) {
    match waiting {
        Waiting::Admin(conn) => admin::fail(hub, conn, &err),
        Waiting::Hello(conn) => wrappers::hello_failed(hub, conn, &err),
        Waiting::Http(conn, _) => http::call_failed(hub, conn, &err),
        Waiting::Ws(conn, expect) => http::ws_ui::call_failed(hub, conn, expect, &err),
        Waiting::LiveFetch(fid) => http::feed::live_base(hub, None, fid, Err(err)),
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
                call_failed(hub, waiting, err);
            }
            return super::common::link_failed(ctx, &e);
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
                    (Waiting::Http(conn, expect), Ok(HubReply::Admin(resp))) => {
                        http::answer(hub, ctx, conn, expect, resp)
                    }
                    (Waiting::Ws(conn, expect), Ok(HubReply::Admin(resp))) => {
                        http::ws_ui::answer(hub, ctx, conn, expect, resp)
                    }
                    (Waiting::LiveFetch(fid), Ok(HubReply::Admin(resp))) => {
                        http::feed::live_base(hub, Some(ctx), fid, Ok(resp))
                    }
                    (waiting, Ok(other)) => {
                        log::error!("main answered {waiting:?} with {other:?}");
                    }
                    (waiting, Err(e)) => call_failed(hub, waiting, CallError::Remote(e)),
                }
            }
            Packet::Cast(cmd) => match cmd {
                MainToHub::ToWrapper { conn, msg } => wrappers::send(hub, ctx, conn, &msg.0),
                MainToHub::ToWrappers { conns, msg } => {
                    wrappers::broadcast(hub, ctx, &conns, &msg.0)
                }
                MainToHub::CloseWrapper { conn } => wrappers::close(hub, ctx, conn),
                MainToHub::AdminProgress { call, line } => admin::progress(hub, call, line),
                MainToHub::AdminStream { call, resp } => admin::stream(hub, ctx, call, resp),
                MainToHub::UiConfig(view) => http::views::on_config(hub, ctx, view),
                MainToHub::UiStatus(view) => http::views::on_status(hub, ctx, view),
                MainToHub::UiDetails(view) => http::views::on_details(hub, ctx, view),
                MainToHub::UiStoredOutput {
                    job,
                    run,
                    machine,
                    seq,
                    data,
                } => http::feed::wrapper_output(hub, ctx, &job, run, &machine, seq, &data),
                MainToHub::UiForget(runs) => http::feed::forget_runs(hub, &runs),
                MainToHub::OutputCredit(credits) => wrappers::on_credit(hub, ctx, credits),
            },
            Packet::Call { id, .. } => log::warn!("main made call {id}, which hub does not serve"),
        }
    }
    Flow::Continue
}

fn expire_calls(hub: &mut Hub, _: &mut Ctx<Hub>) {
    hub.expiry_timer = None;
    for (id, waiting, err) in hub.calls.expire(Instant::now()) {
        log::warn!("call {id} to main: {err}");
        call_failed(hub, waiting, err);
    }
}

/// Timers only while there is something to time: the earliest call deadline, and the
/// hello deadline of connections that have not said hello.
fn arm_timers(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let next = hub.calls.next_deadline();
    let stale = match (hub.expiry_timer, next) {
        (Some((_, at)), Some(next)) => next < at,
        (None, Some(_)) => true,
        (Some(_), None) => false,
        (None, None) => false,
    };
    if stale || hub.expiry_due {
        hub.expiry_due = false;
        if let Some((timer, _)) = hub.expiry_timer.take() {
            ctx.cancel(timer);
        }
        if let Some(at) = next {
            hub.expiry_timer = Some((ctx.at(at, expire_calls), at));
        }
    }
    wrappers::arm_sweep_if_waiting(hub, ctx);
    http::arm_sweep(hub, ctx);
}

pub(crate) fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let mut ev: EventLoop<Hub> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let stream = args.take_stream("main")?;
    let (main, _) = open_link(ev.ctx(), stream, Role::Hub, Role::Main, (), on_main)?;
    let mut admin = state::admin::Admin::listen(ev.ctx(), args.take_fd("admin")?)?;
    // Start-only settings; main owns the rest of the configuration.
    let (limits, saltpeter) = match crate::config::load_settings(&args.dirs.config) {
        Ok(settings) => {
            admin.set_group(settings.admin_group.as_deref());
            (wrappers::Limits::from_config(&settings), settings)
        }
        Err(e) => {
            log::warn!("cannot read the configuration ({e}); default limits apply");
            admin.set_group(None);
            (wrappers::Limits::default(), Default::default())
        }
    };
    // The supervisor checked (and created) the files; a failure now is a start error.
    let tls = crate::tls::material::load(&saltpeter.tls_settings(), &args.dirs.state)
        .and_then(|m| m.as_ref().map(crate::tls::server_config).transpose())
        .map_err(|e| RoleError::BadStart(e.to_string()))?;
    let wrappers =
        wrappers::Wrappers::listen(ev.ctx(), args.take_fd("wrappers")?, limits, tls.clone())?;
    let http = match args.has_fd("api") {
        true => Some(http::Http::listen(
            ev.ctx(),
            args.take_fd("api")?,
            &saltpeter,
            tls,
            &args.dirs.state,
        )?),
        false => None,
    };
    ev.ctx()
        .every(crate::wire::link::HUB_TICK, |hub: &mut Hub, _| {
            hub.cast_main(crate::wire::link::HubRequest::HubTick)
        });
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut hub = Hub {
        control,
        main,
        calls: PendingCalls::new(Role::Main),
        expiry_due: false,
        expiry_timer: None,
        admin,
        wrappers,
        http,
        on_call_failed: call_failed,
    };
    // Once per turn: what the turn posted to main goes out, and the timers of what the
    // turn started (calls' deadlines, the endpoints' sweeps) are armed.
    ev.run_with(&mut hub, |hub, ctx| {
        if let Err(e) = hub.main.on_writable() {
            log::debug!("link to main: {e}");
        }
        arm_timers(hub, ctx);
    })
    .map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
