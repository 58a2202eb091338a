//! What counts as one client when the hub limits or throttles by address: the crate's
//! one rule (`crate::client_addr`), which main's refusal records follow too.

pub(crate) use crate::client_addr::client_key;
