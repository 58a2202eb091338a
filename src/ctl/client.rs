//! The blocking admin client: connect, hello, request, answer. Long requests stream
//! answers (`AdminResponse::is_stream`) before the final one; they are handed to the
//! caller as they arrive (several may come in one read, so they are queued).
//!
//! The socket: `--socket`, `$SALTPETER_SOCKET`, `$RUNTIME_DIRECTORY`, the packaged
//! `/run/saltpeter/admin.sock`; when none of these is set or exists, a daemon run by this
//! user (`scripts/quickstart`) in `$XDG_RUNTIME_DIR/saltpeter`, a directory only this
//! user can enter, so nobody else can stand in for the daemon there.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::exit::EXIT_USAGE;
use crate::ipc::Role;
use crate::ipc::{Channel, ChannelError};
use crate::paths;
use crate::wire::admin::{AdminRequest, AdminResponse};

pub(super) type CtlError = (i32, String);

pub(super) struct Client {
    path: PathBuf,
    link: Channel<UnixStream, AdminRequest, AdminResponse>,
    queue: VecDeque<AdminResponse>,
}

impl Client {
    pub(super) fn connect(socket: Option<PathBuf>) -> Result<Client, CtlError> {
        let path = socket_path(
            socket.as_deref(),
            std::env::var_os("SALTPETER_SOCKET"),
            std::env::var_os("RUNTIME_DIRECTORY"),
            std::env::var_os("XDG_RUNTIME_DIR"),
            |p| p.exists(),
        );
        let stream = UnixStream::connect(&path).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    "only root and the admin group (saltpeter_config.admin_group, else \
                     `saltpeter`) may use it"
                }
                _ => {
                    "is saltpeter.service running? --socket or $SALTPETER_SOCKET choose \
                     another socket (scripts/quickstart prints the line to use)"
                }
            };
            (
                EXIT_USAGE,
                format!(
                    "cannot reach the daemon at {}: {e} ({hint})",
                    path.display()
                ),
            )
        })?;
        let link = Channel::new(stream, Role::Ctl, Role::Hub)
            .map_err(|e| (EXIT_USAGE, format!("{}: {e}", path.display())))?;
        Ok(Client {
            path,
            link,
            queue: VecDeque::new(),
        })
    }

    fn lost(&self, e: ChannelError) -> CtlError {
        (
            EXIT_USAGE,
            format!("daemon at {}: {e}", self.path.display()),
        )
    }

    fn next(&mut self) -> Result<AdminResponse, CtlError> {
        loop {
            if let Some(resp) = self.queue.pop_front() {
                return Ok(resp);
            }
            let msgs = self.link.recv_all_blocking().map_err(|e| self.lost(e))?;
            self.queue.extend(msgs);
        }
    }

    /// One request; progress lines go to stderr, the final answer is returned.
    pub(super) fn request(&mut self, req: &AdminRequest) -> Result<AdminResponse, CtlError> {
        self.call(req, |resp| {
            if let AdminResponse::Progress(line) = resp {
                eprintln!("{line}");
            }
            Ok(())
        })
    }

    /// One request whose streamed answers go to `on_stream`; the final one is returned.
    pub(super) fn call(
        &mut self,
        req: &AdminRequest,
        mut on_stream: impl FnMut(AdminResponse) -> Result<(), CtlError>,
    ) -> Result<AdminResponse, CtlError> {
        if let Err(e) = self.link.send_blocking(req) {
            // A refused peer may find its refusal waiting instead of a reader.
            return match self.next() {
                Ok(resp) if !resp.is_stream() => Ok(resp),
                _ => Err(self.lost(e)),
            };
        }
        loop {
            let resp = self.next()?;
            if resp.is_stream() {
                on_stream(resp)?;
            } else {
                return Ok(resp);
            }
        }
    }
}

fn set(v: &Option<OsString>) -> bool {
    v.as_ref().is_some_and(|v| !v.is_empty())
}

/// The admin socket to use. The user's runtime directory is a fallback only: an explicit
/// choice or the system daemon's socket always wins, so `saltpeterctl` on a server never
/// talks to a private test daemon by surprise.
fn socket_path(
    cli: Option<&Path>,
    env_socket: Option<OsString>,
    env_runtime: Option<OsString>,
    xdg_runtime: Option<OsString>,
    exists: impl Fn(&Path) -> bool,
) -> PathBuf {
    if cli.is_some() || set(&env_socket) || set(&env_runtime) {
        return paths::admin_socket_for_ctl(cli);
    }
    let system = Path::new(paths::DEFAULT_RUNTIME_DIR).join(paths::ADMIN_SOCKET);
    if !exists(&system)
        && let Some(xdg) = xdg_runtime.filter(|v| !v.is_empty())
    {
        let user = PathBuf::from(xdg)
            .join("saltpeter")
            .join(paths::ADMIN_SOCKET);
        if exists(&user) {
            return user;
        }
    }
    system
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn user_runtime_dir_is_a_fallback_only() {
        let user = PathBuf::from("/run/user/1000/saltpeter/admin.sock");
        let system = PathBuf::from("/run/saltpeter/admin.sock");
        let only_user = |p: &Path| p == user;
        let both = |p: &Path| p == user || p == system;
        let xdg = || os("/run/user/1000");
        assert_eq!(socket_path(None, None, None, xdg(), only_user), user);
        assert_eq!(socket_path(None, None, None, xdg(), both), system);
        assert_eq!(socket_path(None, None, None, xdg(), |_| false), system);
        assert_eq!(socket_path(None, None, None, None, only_user), system);
        assert_eq!(socket_path(None, None, None, os(""), only_user), system);
        let cli = PathBuf::from("/x/admin.sock");
        assert_eq!(socket_path(Some(&cli), None, None, xdg(), only_user), cli);
    }
}
