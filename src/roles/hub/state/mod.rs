//! The hub's state, below all of its behaviour: the state of each endpoint (`http`; `wrappers`,
//! with its output `flow`). The endpoints' modules change it; nothing here names them.

pub mod budget;
pub mod flow;
pub mod http;
pub mod identity;
pub mod live;
pub mod sessions;
pub mod wrappers;
