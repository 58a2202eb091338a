//! What the parts above use to act on the world, on top of the state: the links to the
//! other processes (`links`), launch settings as the other parts ask for them
//! (`launcher`, over `fleet::Launcher`), capacity (`throttle`), the job log (`joblog`),
//! retention (`history`), what the views are handed of the other parts (`views`), and
//! what the launch rounds are (`rounds`).

pub(crate) mod history;
pub(crate) mod joblog;
pub(crate) mod launcher;
pub(crate) mod links;
pub(crate) mod perform;
pub(crate) mod rounds;
pub(crate) mod throttle;
pub(crate) mod views;
