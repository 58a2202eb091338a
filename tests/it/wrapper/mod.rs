//! The real `saltpeter-wrapper` binary against an in-test protocol peer (`peer`): the
//! wrapper's side of the protocol in isolation, including cases the daemon cannot easily
//! provoke (reconnects mid-output, spool overflow, pre-staging, final rejections).

mod detach;
mod flow;
mod in_process;
mod launch;
mod lost_server;
mod peer;
mod servers;
mod staged;
mod suspend;
mod throughput;
