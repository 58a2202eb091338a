//! What operators see: how an answer leaves main (`answer`), live streams (`live`), the
//! dashboard's and `/ws`'s typed views (`ui`), `/metrics` (`metrics`), the run-time
//! maintenance settings (`maintenance`) and a standby's mirror of the leader's runs
//! (`mirror`, `mirror_view`).

pub(crate) mod answer;
pub(crate) mod live;
pub(crate) mod metrics;
pub(crate) mod mirror;
pub(crate) mod mirror_view;
pub(crate) mod ui;
