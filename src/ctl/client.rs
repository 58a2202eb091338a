//! The blocking admin client: connect, hello, request, answer. Long requests stream
//! answers (`AdminResponse::is_stream`) before the final one; they are handed to the
//! caller as they arrive (several may come in one read, so they are queued).

use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::EXIT_USAGE;
use crate::ipc::Role;
use crate::ipc::{Channel, ChannelError};
use crate::paths;
use crate::wire::admin::{AdminRequest, AdminResponse};

pub type CtlError = (i32, String);

pub struct Client {
    path: PathBuf,
    link: Channel<UnixStream, AdminRequest, AdminResponse>,
    queue: VecDeque<AdminResponse>,
}

impl Client {
    pub fn connect(socket: Option<PathBuf>) -> Result<Client, CtlError> {
        let path = paths::admin_socket_for_ctl(socket.as_deref());
        let stream = UnixStream::connect(&path).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    "only root and the admin group (saltpeter_config.admin_group, else \
                     `saltpeter`) may use it"
                }
                _ => {
                    "is saltpeter.service running? --socket or $SALTPETER_SOCKET choose \
                     another socket"
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
    pub fn request(&mut self, req: &AdminRequest) -> Result<AdminResponse, CtlError> {
        self.call(req, |resp| {
            if let AdminResponse::Progress(line) = resp {
                eprintln!("{line}");
            }
            Ok(())
        })
    }

    /// One request whose streamed answers go to `on_stream`; the final one is returned.
    pub fn call(
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
