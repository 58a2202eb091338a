//! What the parts above use to act on the world, on top of the state: the links to the
//! other processes (`links`), launch settings (`launcher`), the fleet's wrapper builds
//! (`fleet`, `deploy`), maintenance windows (`windows`), capacity (`throttle`), the
//! notification outbox (`notify`), the job log (`joblog`) and retention (`history`).

pub mod deploy;
pub mod fleet;
pub mod history;
pub mod joblog;
pub mod launcher;
pub mod links;
pub mod notify;
pub mod throttle;
pub mod windows;
