//! Integration tests: real binaries, real processes, real sockets and SQLite files.

mod util;

#[path = "../support/pg_cluster.rs"]
mod pg_cluster;
/// `SALTPETER_TEST_SKIP`: which missing components skip their tests instead of failing.
use pg_cluster::components;

#[path = "../support/sshd.rs"]
mod sshd;

mod active_range;
mod api;
mod bench;
mod bench_salt;
mod bench_scale;
mod bench_ssh;
mod compat;
mod ctl;
mod ctl_more;
mod ctl_verbs;
mod daemon;
mod durability;
mod executor_conformance;
mod executor_plugin;
mod executor_ssh;
mod executor_ssh_daemon;
mod faults;
mod ha;
mod ha_bench;
mod ha_live;
mod hostile_text;
mod hub;
mod identities;
mod ingest;
mod jobctl;
mod joblog;
mod jobs;
mod limits;
mod local_executor;
mod lost_daemon;
mod maintenance;
mod notify;
mod notify_tls;
mod output_backpressure;
mod output_bomb;
mod pg_tls;
mod queued;
mod quickstart;
mod refusals;
mod reload;
mod resource_limits;
mod retries;
mod salt;
mod salt_fleet;
mod salt_herd;
mod salt_hostile;
mod salt_masters;
mod salt_restart;
mod salt_topology;
mod salt_unreachable;
mod scheduling;
mod sim_fleet;
mod suspend;
mod throttle;
mod throttle_salt;
mod tls;
mod tls_bench;
mod watchdog;
mod wrapper;
