//! Whether this server's salt master is up, as the leader lease needs to know: a server
//! whose master is down cannot launch anything, so it does not lead while another
//! server, whose master reaches the same minions (multi-master), can (docs/ha.md, "A
//! salt master down").
//!
//! The daemon drives a master on its own host (the salt bridge and `salt` need its local
//! sockets), so the probe is a connect to the master's event socket
//! (`<sock_dir>/master_event_pub.ipc`), which costs microseconds and answers at once:
//! - no `sock_dir` at all: no master was ever set up here (a server of local jobs
//!   only): never "down";
//! - the socket accepts: up;
//! - the socket refuses, or is missing from an existing `sock_dir` (a master that died,
//!   or stopped and removed it): down;
//! - anything else (this user may not connect to it): not known, so not "down" — a
//!   probe that cannot judge must not keep a healthy server from leading.
//!
//! Down counts only after [`DOWN_AFTER`] of failed probes, so a master restarting (a few
//! seconds) does not move the lead back and forth.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the master must have been down before this server gives up or refuses
/// the lead.
pub(super) const DOWN_AFTER: Duration = Duration::from_secs(3);

pub(super) struct MasterProbe {
    sock_dir: PathBuf,
    socket: PathBuf,
    down_since: Option<Instant>,
}

impl MasterProbe {
    /// The probe of the master configured in `salt_config_dir`.
    pub(super) fn new(salt_config_dir: &Path) -> MasterProbe {
        let sock_dir = crate::minion_key::master_sock_dir(salt_config_dir);
        MasterProbe {
            socket: sock_dir.join("master_event_pub.ipc"),
            sock_dir,
            down_since: None,
        }
    }

    /// The master answers now (see the module note).
    fn answers(&self) -> bool {
        if !self.sock_dir.is_dir() {
            return true;
        }
        match std::os::unix::net::UnixStream::connect(&self.socket) {
            Ok(_) => true,
            // Nothing listens (a dead master's socket file), or no socket at all.
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ),
        }
    }

    /// Probe once; whether the master has been down for [`DOWN_AFTER`] by `now`.
    pub(super) fn down(&mut self, now: Instant) -> bool {
        if self.answers() {
            if self.down_since.take().is_some() {
                log::info!("the salt master answers again ({})", self.socket.display());
            }
            return false;
        }
        let since = *self.down_since.get_or_insert_with(|| {
            log::warn!(
                "the salt master does not answer ({})",
                self.socket.display()
            );
            now
        });
        now.duration_since(since) >= DOWN_AFTER
    }

    #[cfg(test)]
    pub(super) fn socket(&self) -> &Path {
        &self.socket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_master_here_a_listening_socket_and_a_dead_one() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("etc");
        std::fs::create_dir_all(&config).unwrap();
        let sock_dir = dir.path().join("sock");
        std::fs::write(
            config.join("master"),
            format!("sock_dir: {}\n", sock_dir.display()),
        )
        .unwrap();
        let mut probe = MasterProbe::new(&config);
        let t0 = Instant::now();
        // No sock_dir: no master on this host, never down.
        assert!(!probe.down(t0 + DOWN_AFTER * 2));
        // A master listening.
        std::fs::create_dir_all(&sock_dir).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(probe.socket()).unwrap();
        assert!(!probe.down(t0));
        // It died (its socket file stays): down only after DOWN_AFTER.
        drop(listener);
        assert!(!probe.down(t0));
        assert!(!probe.down(t0 + DOWN_AFTER / 2));
        assert!(probe.down(t0 + DOWN_AFTER));
        // Back: up at once, and the clock starts again.
        std::fs::remove_file(probe.socket()).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(probe.socket()).unwrap();
        assert!(!probe.down(t0 + DOWN_AFTER * 2));
        // Gone with its socket file from an existing sock_dir: down too.
        drop(_listener);
        std::fs::remove_file(probe.socket()).unwrap();
        let t1 = t0 + DOWN_AFTER * 3;
        assert!(!probe.down(t1));
        assert!(probe.down(t1 + DOWN_AFTER));
    }
}
