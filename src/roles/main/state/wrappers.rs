//! The state of wrapper sessions kept beside the runs: refused hellos (`welcome`). (How
//! main launches wrappers and which build each minion has is the fleet, `fleet/`.)

use crate::logsafe::PerKey;

/// The refusal rate limit, per peer address.
#[derive(Debug)]
pub(crate) struct Refusals(pub(crate) PerKey<String>);
