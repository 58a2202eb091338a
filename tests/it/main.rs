//! Integration tests: real binaries, real processes, real sockets and SQLite files.

mod util;

mod bench;
mod bench_scale;
mod compat;
mod ctl;
mod daemon;
mod durability;
mod hub;
mod jobs;
mod maintenance;
mod reload;
mod salt;
mod scheduling;
mod wrapper;
