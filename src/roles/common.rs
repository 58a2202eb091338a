//! What every role's process shares: its start arguments and error, its typed links,
//! the control link to the supervisor and the handling of terminal signals. It names no
//! role.

use std::os::fd::OwnedFd;

use mio::event::Event;
use mio::{Interest, Token};

use crate::evloop::{Ctx, Flow, Forward};
use crate::ipc::Role;
use crate::ipc::{Channel, ChannelError};
use crate::paths::Dirs;
use crate::wire::link::{ControlDown, ControlUp};

#[derive(Debug, thiserror::Error)]
pub(crate) enum RoleError {
    #[error("missing inherited descriptor `{0}` (the supervisor starts roles, not people)")]
    MissingFd(String),
    #[error("could not set up the {what}: {source}")]
    Setup {
        what: String,
        source: std::io::Error,
    },
    #[error("link error: {0}")]
    Link(#[from] ChannelError),
    #[error("{0}")]
    Start(String),
    /// The configuration (or a file the operator keeps beside it, such as the server
    /// secret) cannot be used: restarting will not help until someone fixes it.
    #[error("{0}")]
    BadStart(String),
}

impl RoleError {
    pub(crate) fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RoleError {
        let what = what.into();
        move |source| RoleError::Setup { what, source }
    }
}

/// What a child process gets from the supervisor.
pub(crate) struct RoleArgs {
    pub role: Role,
    pub dirs: Dirs,
    pub fds: Vec<(String, OwnedFd)>,
}

impl RoleArgs {
    pub(crate) fn take_fd(&mut self, name: &str) -> Result<OwnedFd, RoleError> {
        let i = self
            .fds
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| RoleError::MissingFd(name.to_string()))?;
        Ok(self.fds.remove(i).1)
    }

    pub(crate) fn has_fd(&self, name: &str) -> bool {
        self.fds.iter().any(|(n, _)| n == name)
    }

    /// An inherited socketpair end as a non-blocking mio stream.
    pub(crate) fn take_stream(&mut self, name: &str) -> Result<mio::net::UnixStream, RoleError> {
        let std = std::os::unix::net::UnixStream::from(self.take_fd(name)?);
        std.set_nonblocking(true)
            .map_err(RoleError::setup(format!("{name} link")))?;
        Ok(mio::net::UnixStream::from_std(std))
    }
}

/// A typed link over a socketpair end.
pub(crate) type Link<Tx, Rx> = Channel<mio::net::UnixStream, Tx, Rx>;

/// Open a link: wrap the stream, register it for both readiness kinds (edge-triggered:
/// writes are attempted at once and resumed on WRITABLE), send our hello.
pub(crate) fn open_link<S: 'static, K: Copy + 'static, Tx, Rx>(
    ctx: &mut Ctx<S>,
    mut stream: mio::net::UnixStream,
    me: Role,
    peer: Role,
    key: K,
    handler: fn(&mut S, &mut Ctx<S>, K, &Event) -> Flow,
) -> Result<(Link<Tx, Rx>, Token), RoleError>
where
    Tx: serde::Serialize,
    Rx: serde::de::DeserializeOwned,
{
    let token = ctx
        .register(
            &mut stream,
            Interest::READABLE | Interest::WRITABLE,
            Forward::new(key, handler),
        )
        .map_err(RoleError::setup(format!("link to {peer}")))?;
    Ok((Channel::new(stream, me, peer)?, token))
}

/// The child's end of its control link.
pub(crate) type ControlLink = Link<ControlUp, ControlDown>;

/// A role state that obeys the supervisor.
pub(crate) trait Controlled: Sized + 'static {
    fn control(&mut self) -> &mut ControlLink;
    fn on_control(&mut self, ctx: &mut Ctx<Self>, msg: ControlDown);
}

/// Event handler of the control link: messages go to `on_control`; when the supervisor
/// is gone the process stops (children die with their supervisor).
pub(crate) fn control_event<S: Controlled>(
    state: &mut S,
    ctx: &mut Ctx<S>,
    _key: (),
    event: &Event,
) -> Flow {
    let role = state.control().peer_role();
    if event.is_writable()
        && let Err(e) = state.control().on_writable()
    {
        log::debug!("control link to {role}: {e}");
    }
    match state.control().receive() {
        Ok(msgs) => {
            for msg in msgs {
                match msg {
                    // Liveness is the loop's, not the role's: answered here for all four.
                    ControlDown::Ping(n) => {
                        if let Err(e) = state.control().send(&ControlUp::Pong(n)) {
                            log::warn!("could not answer the supervisor's ping: {e}");
                        }
                    }
                    other => state.on_control(ctx, other),
                }
            }
            Flow::Continue
        }
        Err(e) => {
            log::error!("control link: {e}; exiting");
            ctx.stop();
            Flow::Close
        }
    }
}

/// What a data link's error means. The peer closing is the supervisor's business (it
/// stops every process in order, and this one waits for its own `Shutdown`); anything
/// else is a protocol violation and fatal.
pub(crate) fn link_failed<S: 'static>(ctx: &mut Ctx<S>, e: &ChannelError) -> Flow {
    match e {
        ChannelError::PeerGone(role) => {
            log::info!("the {role} process closed its link; waiting for the supervisor");
        }
        other => {
            log::error!("{other}; exiting");
            ctx.stop();
        }
    }
    Flow::Close
}

/// Attach the control link and say `Ready`.
pub(crate) fn attach_control<S: Controlled>(
    ctx: &mut Ctx<S>,
    args: &mut RoleArgs,
) -> Result<ControlLink, RoleError> {
    let stream = args.take_stream("control")?;
    let (mut link, _) = open_link(
        ctx,
        stream,
        args.role,
        Role::Supervisor,
        (),
        control_event::<S>,
    )?;
    link.send(&ControlUp::Ready)?;
    Ok(link)
}

/// Only the supervisor handles SIGINT and SIGHUP; a Ctrl-C in a terminal reaches the
/// whole process group, and the children must wait for their orderly stop.
pub(crate) fn ignore_terminal_signals() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    for sig in [Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: installing SIG_IGN involves no handler code.
        if let Err(e) = unsafe { signal(sig, SigHandler::SigIgn) } {
            log::warn!("could not ignore {sig}: {e}");
        }
    }
}
