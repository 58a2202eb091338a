//! Noticing changes to the configuration directory without waking up while nothing changes.
//!
//! The directory is watched with inotify: a file created, written, renamed, removed or
//! given new attributes wakes main's loop, which waits [`SETTLE`] for the writer to finish
//! (an editor's save or a `cp` is several events) and then runs the same check as before
//! ([`Rescan::rescan`]: a `stat` per file compared with the fingerprints of the loaded
//! files), so what counts as a change did not move. While a reload is in flight the check
//! waits for it, as the scan did.
//!
//! inotify does not see a file changed through a symbolic link that points out of the
//! directory, and it can fail (no inotify, the per-user watch limit reached, the directory
//! replaced). So a scan still runs: every [`SAFETY_SCAN`] with a working watch (one `stat`
//! per file a minute, next to nothing while idle), every [`FALLBACK_SCAN`] without one (the
//! old behaviour, logged once as a warning).

use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use mio::Interest;
use mio::event::Event;
use mio::unix::SourceFd;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::evloop::{Ctx, Flow, Listener};

/// From the first event of a burst to the check.
const SETTLE: Duration = Duration::from_millis(100);
/// While a reload is in flight, how often the pending check looks again.
const WAIT_FOR_RELOAD: Duration = Duration::from_millis(200);
/// The scan that backs up a working watch.
const SAFETY_SCAN: Duration = Duration::from_secs(60);
/// The scan when there is no watch.
const FALLBACK_SCAN: Duration = Duration::from_secs(1);

/// What the watch asks of the loop's state (main's, `dispatch/lifecycle.rs`).
pub(crate) trait Rescan: Sized + 'static {
    /// A reload is in flight: the check waits for it.
    fn reloading(&self) -> bool;

    /// Compare the configuration directory with what is loaded, and reload when a file
    /// changed (none while a load is in flight: the next scan after it sees what changed
    /// meanwhile).
    fn rescan(&mut self, ctx: &mut Ctx<Self>);
}

/// The inotify watch of the configuration directory, as an event-loop listener.
struct ConfigWatch {
    inotify: Inotify,
    /// A check is already scheduled: later events of the same burst need no other one.
    check_armed: Rc<Cell<bool>>,
}

/// Watch `dir`; falls back to scanning it every second when inotify is unavailable.
pub(crate) fn start<R: Rescan>(ctx: &mut Ctx<R>, dir: &Path) {
    match watch(ctx, dir) {
        Ok(()) => {
            ctx.every(SAFETY_SCAN, R::rescan);
        }
        Err(e) => {
            log::warn!(
                "cannot watch the configuration directory {} with inotify ({e}); \
                 scanning it every {} s instead",
                dir.display(),
                FALLBACK_SCAN.as_secs()
            );
            ctx.every(FALLBACK_SCAN, R::rescan);
        }
    }
}

/// Why the configuration directory cannot be watched (it is scanned instead).
#[derive(Debug)]
enum WatchError {
    /// `inotify_init` failed (no inotify, or the instance limit is reached).
    Init(Errno),
    /// `inotify_add_watch` failed (the watch limit is reached, the directory is gone).
    AddWatch(Errno),
    /// The descriptor could not be registered with the loop.
    Register(std::io::Error),
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Init(e) => write!(f, "inotify_init: {e}"),
            Self::AddWatch(e) => write!(f, "inotify_add_watch: {e}"),
            Self::Register(e) => write!(f, "registering the inotify descriptor: {e}"),
        }
    }
}

fn watch<R: Rescan>(ctx: &mut Ctx<R>, dir: &Path) -> Result<(), WatchError> {
    let inotify = open_watch(dir)?;
    let fd = inotify.as_fd().as_raw_fd();
    let listener = ConfigWatch {
        inotify,
        check_armed: Rc::new(Cell::new(false)),
    };
    ctx.register(&mut SourceFd(&fd), Interest::READABLE, listener)
        .map_err(WatchError::Register)?;
    Ok(())
}

/// A non-blocking inotify descriptor watching what can change a configuration file.
fn open_watch(dir: &Path) -> Result<Inotify, WatchError> {
    let inotify =
        Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(WatchError::Init)?;
    let flags = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR;
    inotify
        .add_watch(dir, flags)
        .map_err(WatchError::AddWatch)?;
    Ok(inotify)
}

impl<R: Rescan> Listener<R> for ConfigWatch {
    fn handle_event(&mut self, _role: &mut R, ctx: &mut Ctx<R>, _event: &Event) -> Flow {
        let mut watch_gone = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => {
                    watch_gone |= events.iter().any(|e| {
                        e.mask.intersects(
                            AddWatchFlags::IN_IGNORED
                                | AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF,
                        )
                    });
                }
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    log::warn!("reading configuration directory events failed: {e}");
                    watch_gone = true;
                    break;
                }
            }
        }
        if !self.check_armed.replace(true) {
            let armed = Rc::clone(&self.check_armed);
            ctx.after(SETTLE, move |role, ctx| check(role, ctx, armed));
        }
        if watch_gone {
            log::warn!(
                "the configuration directory is no longer watched (removed, moved or \
                 unreadable events); scanning it every {} s instead",
                FALLBACK_SCAN.as_secs()
            );
            ctx.every(FALLBACK_SCAN, R::rescan);
            return Flow::Close;
        }
        Flow::Continue
    }
}

/// The settled check: wait for a reload in flight, then compare the directory with what
/// is loaded.
fn check<R: Rescan>(role: &mut R, ctx: &mut Ctx<R>, armed: Rc<Cell<bool>>) {
    if role.reloading() {
        ctx.after(WAIT_FOR_RELOAD, move |role, ctx| check(role, ctx, armed));
        return;
    }
    armed.set(false);
    role.rescan(ctx);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(inotify: &Inotify) -> usize {
        match inotify.read_events() {
            Ok(events) => events.len(),
            Err(Errno::EAGAIN) => 0,
            Err(e) => panic!("read_events: {e}"),
        }
    }

    #[test]
    fn writing_renaming_and_removing_a_file_are_all_seen_and_nothing_else_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inotify = open_watch(dir.path()).expect("watch");
        assert_eq!(events(&inotify), 0, "no event before any change");
        let file = dir.path().join("jobs.yaml");
        std::fs::write(&file, "a: 1\n").expect("write");
        assert!(events(&inotify) > 0, "a new file");
        std::fs::write(dir.path().join(".tmp"), "b: 2\n").expect("write");
        let _ = events(&inotify);
        std::fs::rename(dir.path().join(".tmp"), &file).expect("rename");
        assert!(events(&inotify) > 0, "an editor's save by rename");
        let _ = std::fs::read_to_string(&file).expect("read");
        assert_eq!(events(&inotify), 0, "reading is not a change");
        std::fs::remove_file(&file).expect("remove");
        assert!(events(&inotify) > 0, "a removed file");
    }

    #[test]
    fn a_missing_directory_is_an_error_that_names_the_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = open_watch(&dir.path().join("gone")).expect_err("no directory");
        assert!(matches!(err, WatchError::AddWatch(Errno::ENOENT)), "{err}");
        assert!(err.to_string().starts_with("inotify_add_watch: "), "{err}");
    }
}
