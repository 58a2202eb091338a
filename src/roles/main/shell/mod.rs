//! What the parts above use to act on the world, on top of the state: the links to the
//! other processes (`links`), launch settings as the other parts ask for them (`launcher`,
//! over `fleet::Launcher`), maintenance windows (`windows`), capacity (`throttle`), the
//! notification outbox (`notify`), the job log (`joblog`), retention (`history`) and
//! the Salt calls other servers' masters make (`delegate`) or this one makes for them
//! (`serve_salt`).

pub(crate) mod delegate;
pub(crate) mod history;
pub(crate) mod joblog;
pub(crate) mod launcher;
pub(crate) mod links;
pub(crate) mod notify;
pub(crate) mod perform;
pub(crate) mod serve_salt;
pub(crate) mod throttle;
