//! The hub's state, below all of its behaviour: the role's struct (the links, the calls
//! waiting for main and what each answer is for) and the state of each endpoint (`admin`;
//! `http` with its `budget`, `identity`, `live` text and login `sessions`; `wrappers`,
//! with its output `flow`). The endpoints' modules change it; nothing here names them.

pub(crate) mod admin;
pub(crate) mod budget;
pub(crate) mod flow;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod live;
pub(crate) mod sessions;
pub(crate) mod wrappers;

use std::time::{Duration, Instant};

use crate::evloop::timers::TimerId;
use crate::ipc::Role;
use crate::ipc::rpc::{CallError, Packet, PendingCalls};
use crate::roles::common::{ControlLink, Link};
use crate::wire::link::{HubAnswer, HubReply, HubRequest, MainToHub};
use admin::Admin;
use http::Http;
use wrappers::Wrappers;

pub(super) type MainLink = Link<Packet<HubRequest, HubAnswer>, Packet<MainToHub, HubReply>>;

/// What to do with main's answer to a call.
#[derive(Debug, Clone, Copy)]
pub(super) enum Waiting {
    Admin(admin::ConnId),
    Hello(crate::wire::link::ConnId),
    /// An HTTP request of an API connection.
    Http(http::ConnId, http::Expect),
    /// A `/ws` client's command or timeline.
    Ws(http::ConnId, http::WsExpect),
    /// The stored output of a target for the `/ws` live view.
    LiveFetch(u64),
}

pub(super) struct Hub {
    pub control: ControlLink,
    pub main: MainLink,
    pub calls: PendingCalls<Waiting>,
    /// A call was started since the expiry timer was last armed.
    pub expiry_due: bool,
    pub expiry_timer: Option<(TimerId, Instant)>,
    pub admin: Admin,
    pub wrappers: Wrappers,
    /// The HTTP API, `/ws` and the dashboard, when `api_ws` is on.
    pub http: Option<Http>,
    /// Tells the part that made a failed call (`hub/mod.rs` sets it at start to its
    /// dispatch by `Waiting`): a call can fail as it starts, and the parts that start
    /// calls are below that dispatch.
    pub on_call_failed: fn(&mut Hub, Waiting, CallError),
}

impl Hub {
    /// Call main; the answer is dispatched by `Waiting`.
    pub(super) fn call_main(
        &mut self,
        req: HubRequest,
        timeout: Duration,
        waiting: Waiting,
    ) -> crate::ipc::CallId {
        let id = self.calls.start(Instant::now(), timeout, waiting);
        self.expiry_due = true;
        if let Err(e) = self.main.post(&Packet::Call {
            id,
            req,
            due: crate::ipc::rpc::Due::Soon,
        }) {
            log::error!("could not reach main: {e}");
            if let Some(waiting) = self.calls.finish(id) {
                (self.on_call_failed)(self, waiting, CallError::PeerGone(Role::Main));
            }
        }
        id
    }

    /// Tell main something that needs no answer.
    pub(super) fn cast_main(&mut self, req: HubRequest) {
        if let Err(e) = self.main.post(&Packet::Cast(req)) {
            log::error!("could not reach main: {e}");
        }
    }
}
