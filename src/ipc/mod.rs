//! Links between Saltpeter's processes.
//!
//! Every link is a Unix stream socket carrying frames: a `u32` little-endian length, then
//! a bincode payload (`codec` is the only module that names bincode). Outline:
//! - `frame`: splitting a byte stream into frames, rejecting oversize ones before any
//!   allocation, and a write queue flushed on writability (never a blocking write);
//! - `codec`: typed payloads to and from bytes, with a size limit;
//! - `hello`: the `Hello` (role, protocol version, pid) that opens every link;
//! - `channel`: a typed `Channel<Tx, Rx>` over a non-blocking socket, checking that hello;
//! - `rpc`: call ids, deadlines and the `PeerGone` / `Timeout` failures of pending calls.

pub(crate) mod channel;
pub(crate) mod codec;
pub(crate) mod frame;
pub(crate) mod hello;
pub(crate) mod rpc;

pub(crate) use channel::{Channel, ChannelError};
pub(crate) use hello::Role;
pub(crate) use rpc::{CallError, CallId};
