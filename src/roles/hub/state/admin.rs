//! The admin socket's state: its connections (who each peer is, its streaming calls),
//! the refused peers still draining, the admin group. Data only; `admin` changes it.

use std::collections::HashMap;

use mio::Token;
use mio::net::UnixStream;

use crate::ipc::CallId;
use crate::ipc::channel::Channel;
use crate::wire::admin::{AdminPeer, AdminRequest, AdminResponse};

pub(crate) type ConnId = u64;

/// Why a peer of the admin socket is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerRefusal {
    #[error("SO_PEERCRED: {0}")]
    Credentials(nix::Error),
    #[error("{why} (pid {pid})")]
    Denied {
        why: crate::access::Denied,
        pid: i32,
    },
}

pub(crate) struct Conn {
    pub link: Channel<UnixStream, AdminResponse, AdminRequest>,
    pub token: Token,
    /// Who it is, or why it is refused.
    pub peer: Result<AdminPeer, PeerRefusal>,
    /// Calls that stream (follow, watch): main drops them when the connection closes.
    pub long_calls: Vec<CallId>,
}

/// A refused peer: its refusal is written, and what it sends is drained unread until it
/// hangs up (closing a Unix socket with unread data would reset the peer before it could
/// read its refusal).
pub(crate) struct Refused {
    pub link: Channel<UnixStream, AdminResponse, AdminRequest>,
    pub token: Token,
    pub discarded: usize,
}

pub(crate) struct Admin {
    pub conns: HashMap<ConnId, Conn>,
    pub refused: HashMap<ConnId, Refused>,
    pub next_id: ConnId,
    /// The admin group (name, gid), if any.
    pub group: Option<(String, u32)>,
    /// Refusals are logged at most every 10 s (a local flood must not fill the journal).
    pub refusals: crate::roles::hub::logsafe::Repeated,
}
