//! The `db` process: the only daemon process that touches SQLite.
//!
//! Placeholder loop until the store is wired in: it answers main's link and the
//! supervisor's control messages.

use mio::event::Event;

use super::{Controlled, ControlLink, Link, RoleArgs, RoleError, attach_control, open_link};
use crate::evloop::{Ctx, EventLoop, Flow};
use crate::ipc::rpc::Packet;
use crate::wire::link::{ControlDown, Role};

type MainLink = Link<Packet<(), ()>, Packet<(), ()>>;

pub struct Db {
    control: ControlLink,
    main: MainLink,
}

impl Controlled for Db {
    fn control(&mut self) -> &mut ControlLink {
        &mut self.control
    }

    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown) {
        if let ControlDown::Shutdown = msg {
            ctx.stop();
        }
    }
}

fn on_main(db: &mut Db, ctx: &mut Ctx<Db>, _: (), _event: &Event) -> Flow {
    let _ = db.main.on_writable();
    match db.main.receive() {
        Ok(_) => Flow::Continue,
        Err(e) => {
            log::error!("link to main: {e}; exiting");
            ctx.stop();
            Flow::Close
        }
    }
}

pub fn run(mut args: RoleArgs) -> Result<i32, RoleError> {
    let mut ev: EventLoop<Db> = EventLoop::new().map_err(RoleError::setup("event loop"))?;
    let stream = args.take_stream("main")?;
    let (main, _) = open_link(ev.ctx(), stream, Role::Db, Role::Main, (), on_main)?;
    let control = attach_control(ev.ctx(), &mut args)?;
    let mut db = Db { control, main };
    ev.run(&mut db).map_err(RoleError::setup("event loop"))?;
    Ok(0)
}
