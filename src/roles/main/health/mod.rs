//! The daemon's own health as main's parts see it: whether the database stores and what
//! waits for it to store again (`storage`), and when a wrapper's silence may be judged
//! (`liveness`: stalls of main or the hub do not count). Both are pure: every call takes
//! `now`.

pub(crate) mod liveness;
pub(crate) mod storage;
