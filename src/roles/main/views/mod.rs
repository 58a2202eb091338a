//! What operators see: how an answer leaves main (`answer`), live streams (`live`), the
//! dashboard's and `/ws`'s typed views (`ui`), `/metrics` (`metrics`), the run-time
//! maintenance settings (`maintenance`), a standby's mirror of the leader's runs
//! (`mirror`, `mirror_view`) and the notification deliveries (`delivery_view`).

pub mod answer;
pub mod delivery_view;
pub mod live;
pub mod maintenance;
pub mod metrics;
pub mod mirror;
pub mod mirror_view;
pub mod ui;
