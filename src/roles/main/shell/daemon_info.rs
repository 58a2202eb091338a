//! This daemon as operators see it (`DaemonInfo`): its processes, when it started and the
//! ports it serves, as the supervisor tells main (`ControlDown::Processes`).

use crate::wire::link::ProcessInfo;

/// This daemon as operators see it.
#[derive(Default)]
pub(crate) struct DaemonInfo {
    processes: Vec<ProcessInfo>,
    /// When the daemon started (unix ms).
    started_at: i64,
    wrapper_port: u16,
    /// The HTTP API's port (0: not served).
    api_port: u16,
}

impl DaemonInfo {
    /// Main starts at `started_at` (unix ms); the rest comes from the supervisor.
    pub(crate) fn started(started_at: i64) -> Self {
        DaemonInfo {
            started_at,
            ..Default::default()
        }
    }

    /// The supervisor told main the daemon's processes, start time and ports.
    pub(crate) fn processes_known(
        &mut self,
        started_at: i64,
        processes: Vec<ProcessInfo>,
        wrapper_port: u16,
        api_port: u16,
    ) {
        self.started_at = started_at;
        self.processes = processes;
        self.wrapper_port = wrapper_port;
        self.api_port = api_port;
    }

    /// The daemon's processes.
    pub(crate) fn processes(&self) -> &[ProcessInfo] {
        &self.processes
    }

    /// When the daemon started (unix ms).
    pub(crate) fn started_at(&self) -> i64 {
        self.started_at
    }

    /// The port wrappers call.
    pub(crate) fn wrapper_port(&self) -> u16 {
        self.wrapper_port
    }

    /// The HTTP API's port (0: not served).
    pub(crate) fn api_port(&self) -> u16 {
        self.api_port
    }
}
