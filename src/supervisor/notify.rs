//! Telling systemd how the daemon is (`sd_notify(3)`): `READY=1`, `STOPPING=1` and the
//! watchdog's `WATCHDOG=1`, as datagrams to `$NOTIFY_SOCKET`.
//!
//! The send never blocks: a manager that does not read its socket (a stalled systemd, a
//! test that reads only `READY=1`) fills the socket's queue, and a blocking send would
//! then stop the supervisor's loop, its signal handling and its stop with it. A message
//! that does not fit is dropped and said at debug level. `WATCHDOG=1` is sent only when
//! systemd asked for it (`$WATCHDOG_USEC`, for this process when `$WATCHDOG_PID` names
//! one); without `$NOTIFY_SOCKET` nothing is sent.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// One state for systemd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Ready,
    Stopping,
    Watchdog,
}

impl State {
    fn text(self) -> &'static str {
        match self {
            State::Ready => "READY=1\n",
            State::Stopping => "STOPPING=1\n",
            State::Watchdog => "WATCHDOG=1\n",
        }
    }
}

/// Sends `state` to `$NOTIFY_SOCKET` without waiting; `Ok` without the variable.
pub(crate) fn send(state: State) -> io::Result<()> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) => send_to(&path, state),
        None => Ok(()),
    }
}

/// Sends `state` to the socket `path` (`@name`: an abstract one) without waiting.
fn send_to(path: &OsStr, state: State) -> io::Result<()> {
    let addr = match path.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    socket.send_to_addr(state.text().as_bytes(), &addr)?;
    Ok(())
}

/// The watchdog interval systemd asked for (`WatchdogSec=`), from `watchdog_usec` and
/// `watchdog_pid` as the environment holds them; `None` when it asked for none or for
/// another process.
pub(crate) fn watchdog_interval(
    watchdog_usec: Option<&str>,
    watchdog_pid: Option<&str>,
    me: u32,
) -> Option<Duration> {
    let usec: u64 = watchdog_usec?.trim().parse().ok().filter(|u| *u > 0)?;
    match watchdog_pid.map(|p| p.trim().parse::<u32>()) {
        Some(Ok(pid)) if pid != me => None,
        Some(Err(_)) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

/// [`watchdog_interval`] of this process's environment.
pub(crate) fn watchdog_asked() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_asked_for_by_usec_and_only_for_this_process() {
        let half_minute = Some(Duration::from_secs(30));
        assert_eq!(watchdog_interval(Some("30000000"), None, 7), half_minute);
        assert_eq!(
            watchdog_interval(Some("30000000"), Some("7"), 7),
            half_minute
        );
        assert_eq!(watchdog_interval(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("30000000"), Some("x"), 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
    }

    #[test]
    fn a_socket_nobody_reads_never_blocks_the_sender() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let reader = UnixDatagram::bind(&path).unwrap();
        // Far more than the queue holds: the sends fail with WouldBlock, never wait.
        let mut refused = 0;
        for _ in 0..5_000 {
            if let Err(e) = send_to(path.as_os_str(), State::Watchdog) {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
                refused += 1;
            }
        }
        assert!(refused > 0, "the queue never filled");
        let mut buf = [0u8; 64];
        let n = reader.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1\n");
    }
}
