//! The blocking admin client: connect, hello, request, answer (skipping progress lines).

use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::EXIT_USAGE;
use crate::ipc::{Channel, ChannelError};
use crate::paths;
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::link::Role;

pub struct Client {
    path: PathBuf,
    link: Channel<UnixStream, AdminRequest, AdminResponse>,
}

impl Client {
    pub fn connect(socket: Option<PathBuf>) -> Result<Client, (i32, String)> {
        let path = paths::admin_socket_for_ctl(socket.as_deref());
        let stream = UnixStream::connect(&path).map_err(|e| {
            (
                EXIT_USAGE,
                format!(
                    "cannot reach the daemon at {}: {e} (is saltpeter-daemon running? \
                     --socket or $SALTPETER_SOCKET choose another socket)",
                    path.display()
                ),
            )
        })?;
        let link = Channel::new(stream, Role::Ctl, Role::Hub)
            .map_err(|e| (EXIT_USAGE, format!("{}: {e}", path.display())))?;
        Ok(Client { path, link })
    }

    pub fn request(&mut self, req: &AdminRequest) -> Result<AdminResponse, (i32, String)> {
        let lost = |e: ChannelError| {
            (
                EXIT_USAGE,
                format!("daemon at {}: {e}", self.path.display()),
            )
        };
        let mut resp = self.link.call_blocking(req).map_err(lost)?;
        loop {
            match resp {
                AdminResponse::Progress(line) => {
                    eprintln!("{line}");
                    resp = self.link.recv_blocking().map_err(|e| {
                        (
                            EXIT_USAGE,
                            format!("daemon at {}: {e}", self.path.display()),
                        )
                    })?;
                }
                other => return Ok(other),
            }
        }
    }
}
