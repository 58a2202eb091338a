//! The hub's state, below all of its behaviour: the state of each endpoint (`http`; `wrappers`,
//! with its output `flow`). The endpoints' modules change it; nothing here names them.

pub mod flow;
pub mod http;
pub mod wrappers;
