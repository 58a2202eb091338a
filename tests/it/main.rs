//! Integration tests: real binaries, real processes, real sockets and SQLite files.

mod util;

mod api;
mod bench;
mod bench_scale;
mod compat;
mod ctl;
mod ctl_more;
mod ctl_verbs;
mod daemon;
mod durability;
mod hub;
mod joblog;
mod jobs;
mod maintenance;
mod notify;
mod reload;
mod retries;
mod salt;
mod scheduling;
mod wrapper;
