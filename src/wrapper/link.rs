//! The WebSocket connection to the hub, driven by readiness events of the wrapper's one
//! mio loop: non-blocking TCP connect, tungstenite client handshake resumed on each event
//! (`HandshakeError::Interrupted`), then reads until `WouldBlock` and writes through
//! tungstenite's bounded write buffer (a full buffer refuses the message instead of
//! growing, so the caller keeps it and retries on the next WRITABLE event).
//!
//! With a `wss://` URL the socket speaks TLS (`crate::tls::Stream`) under the WebSocket,
//! and the hub's certificate must match the fingerprint pinned in the URL's fragment
//! (`crate::tls::verify`): a wrong certificate fails the handshake like a lost hub.
//!
//! The link knows nothing about runs or jobs: it yields [`LinkEvent`]s and takes
//! messages. Any failure closes it and is reported once as `LinkEvent::Closed`.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::sync::Arc;
use tungstenite::handshake::client::ClientHandshake;
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use crate::tls::Stream;
use crate::wire::wrapper::{ServerMsg, WrapperMsg};

/// Bound on the time from `connect()` to an open WebSocket.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message accepted from the hub (control messages are small).
const MAX_INBOUND: usize = 1024 * 1024;
/// Outbound buffer beyond which `write` refuses messages (backpressure).
const MAX_WRITE_BUFFER: usize = 2 * 1024 * 1024;

/// Why a connection to the hub could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum LinkError {
    #[error("could not connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("could not register the hub socket: {0}")]
    Register(std::io::Error),
    #[error("cannot set up TLS to the hub: {0}")]
    TlsConfig(crate::tls::verify::CaError),
    #[error("{host:?} is not a TLS server name: {source}")]
    ServerName {
        host: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("cannot start TLS to the hub: {0}")]
    StartTls(rustls::Error),
}

pub(super) enum LinkEvent {
    /// The WebSocket is open; the caller sends `hello`.
    Open,
    Message(ServerMsg),
    /// The link is down (the reason is for the log).
    Closed(String),
}

enum State {
    Down,
    Connecting {
        stream: TcpStream,
        since: Instant,
    },
    Handshaking {
        mid: Box<MidHandshake<ClientHandshake<Stream>>>,
        since: Instant,
    },
    Open {
        ws: Box<WebSocket<Stream>>,
    },
}

pub(super) struct Link {
    state: State,
    token: Token,
    /// The TLS client configuration, built on the first `wss://` connect and kept.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// When the hub last sent anything (any frame, pongs included): the hub is there.
    pub last_rx: Instant,
    /// When the hub last sent a message (text or binary, not a ping or pong): only a
    /// message shows that the server behind the hub still serves the run.
    pub last_msg: Instant,
}

impl Link {
    pub(super) fn new(token: Token, now: Instant) -> Link {
        Link {
            state: State::Down,
            token,
            tls: None,
            last_rx: now,
            last_msg: now,
        }
    }

    pub(super) fn is_down(&self) -> bool {
        matches!(self.state, State::Down)
    }

    pub(super) fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Deadline of the connect + handshake phase, if in it.
    pub(super) fn setup_deadline(&self) -> Option<Instant> {
        match &self.state {
            State::Connecting { since, .. } | State::Handshaking { since, .. } => {
                Some(*since + CONNECT_TIMEOUT)
            }
            _ => None,
        }
    }

    pub(super) fn connect(
        &mut self,
        registry: &Registry,
        addr: SocketAddr,
        now: Instant,
    ) -> Result<(), LinkError> {
        self.close();
        let mut stream =
            TcpStream::connect(addr).map_err(|source| LinkError::Connect { addr, source })?;
        registry
            .register(
                &mut stream,
                self.token,
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(LinkError::Register)?;
        self.state = State::Connecting { stream, since: now };
        Ok(())
    }

    /// Tests: an open link over `stream` (already connected), without a handshake.
    #[cfg(test)]
    pub(super) fn open_for_test(&mut self, stream: TcpStream, now: Instant) {
        let ws = WebSocket::from_raw_socket(
            Stream::Plain(stream),
            tungstenite::protocol::Role::Client,
            None,
        );
        self.state = State::Open { ws: Box::new(ws) };
        self.last_rx = now;
        self.last_msg = now;
    }

    pub(super) fn close(&mut self) {
        if let State::Open { ws } = &mut self.state {
            // Best effort: tell the hub, without waiting for its answer.
            let _ = ws.close(None);
            let _ = ws.flush();
        }
        self.state = State::Down;
    }

    fn fail(&mut self, events: &mut Vec<LinkEvent>, reason: String) {
        self.close();
        events.push(LinkEvent::Closed(reason));
    }

    /// Progresses the connection after a readiness event (spurious ones are harmless).
    pub(super) fn on_ready(&mut self, url: &str, now: Instant, events: &mut Vec<LinkEvent>) {
        if let State::Connecting { stream, .. } = &self.state {
            if let Ok(Some(err)) | Err(err) = stream.take_error() {
                return self.fail(events, format!("could not connect to the hub: {err}"));
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(e) => return self.fail(events, format!("could not connect to the hub: {e}")),
            }
            let State::Connecting { stream, since } =
                std::mem::replace(&mut self.state, State::Down)
            else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let (url, stream) = match self.secure(url, stream) {
                Ok(secured) => secured,
                Err(reason) => return self.fail(events, reason.to_string()),
            };
            let config = WebSocketConfig::default()
                .max_message_size(Some(MAX_INBOUND))
                .max_frame_size(Some(MAX_INBOUND))
                .max_write_buffer_size(MAX_WRITE_BUFFER)
                .read_buffer_size(16 * 1024);
            let handshake = tungstenite::client::client_with_config(url, stream, Some(config));
            self.after_handshake_step(handshake, since, now, events);
        } else if let State::Handshaking { .. } = &self.state {
            let State::Handshaking { mid, since } = std::mem::replace(&mut self.state, State::Down)
            else {
                return;
            };
            self.after_handshake_step(mid.handshake(), since, now, events);
        }
        if self.is_open() {
            self.read_all(now, events);
            self.flush(events);
        }
    }

    /// The socket for `url`: TLS for `wss://` (pinned when the URL has `#sha256=`), and
    /// the URL without its fragment for the WebSocket request.
    fn secure<'u>(
        &mut self,
        url: &'u str,
        stream: TcpStream,
    ) -> Result<(&'u str, Stream), LinkError> {
        let (bare, pin) = match url.split_once('#') {
            Some((bare, pin)) => (bare, crate::tls::parse_pin(pin)),
            None => (url, None),
        };
        let Some(rest) = bare
            .get(..6)
            .filter(|s| s.eq_ignore_ascii_case("wss://"))
            .map(|_| &bare[6..])
        else {
            return Ok((bare, Stream::Plain(stream)));
        };
        let config = match &self.tls {
            Some(config) => config.clone(),
            None => {
                let config =
                    crate::tls::verify::client_config(pin).map_err(LinkError::TlsConfig)?;
                self.tls = Some(config.clone());
                config
            }
        };
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|source| {
            LinkError::ServerName {
                host: host.to_string(),
                source,
            }
        })?;
        let stream = Stream::connect_tls(stream, config, name).map_err(LinkError::StartTls)?;
        Ok((bare, stream))
    }

    fn after_handshake_step<R>(
        &mut self,
        step: Result<(WebSocket<Stream>, R), HandshakeError<ClientHandshake<Stream>>>,
        since: Instant,
        now: Instant,
        events: &mut Vec<LinkEvent>,
    ) {
        match step {
            Ok((ws, _)) => {
                self.state = State::Open { ws: Box::new(ws) };
                self.last_rx = now;
                self.last_msg = now;
                events.push(LinkEvent::Open);
            }
            Err(HandshakeError::Interrupted(mid)) => {
                self.state = State::Handshaking {
                    mid: Box::new(mid),
                    since,
                };
            }
            Err(HandshakeError::Failure(e)) => {
                self.fail(
                    events,
                    format!("websocket handshake with the hub failed: {e}"),
                );
            }
        }
    }

    fn read_all(&mut self, now: Instant, events: &mut Vec<LinkEvent>) {
        loop {
            let State::Open { ws } = &mut self.state else {
                return;
            };
            match ws.read() {
                Ok(msg) => {
                    self.last_rx = now;
                    match msg {
                        Message::Text(text) => match serde_json::from_str::<ServerMsg>(&text) {
                            Ok(m) => {
                                self.last_msg = now;
                                events.push(LinkEvent::Message(m));
                            }
                            Err(e) => log::warn!("ignoring a message from the hub: {e}: {text}"),
                        },
                        Message::Close(frame) => {
                            let why = frame.map(|f| format!("{} {}", f.code, f.reason));
                            let why = why.unwrap_or_default();
                            return self.fail(events, format!("the hub closed the link {why}"));
                        }
                        _ => {}
                    }
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => return self.fail(events, format!("lost the hub: {e}")),
            }
        }
    }

    /// Pushes buffered bytes to the socket; `WouldBlock` waits for the next event.
    pub(super) fn flush(&mut self, events: &mut Vec<LinkEvent>) {
        let State::Open { ws } = &mut self.state else {
            return;
        };
        match ws.flush() {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => self.fail(events, format!("could not write to the hub: {e}")),
        }
    }

    /// Queues a control message; `false` when the write buffer is full (retry later).
    pub(super) fn send_msg(&mut self, msg: &WrapperMsg, events: &mut Vec<LinkEvent>) -> bool {
        match serde_json::to_string(msg) {
            Ok(text) => self.send(Message::text(text), events),
            Err(e) => {
                log::error!("could not encode {msg:?}: {e}");
                true
            }
        }
    }

    /// Queues a binary frame; `false` when the write buffer is full (retry later).
    pub(super) fn send_binary(&mut self, bytes: Vec<u8>, events: &mut Vec<LinkEvent>) -> bool {
        self.send(Message::binary(bytes), events)
    }

    pub(super) fn send_ping(&mut self, events: &mut Vec<LinkEvent>) {
        self.send(Message::Ping(Vec::new().into()), events);
    }

    fn send(&mut self, message: Message, events: &mut Vec<LinkEvent>) -> bool {
        let State::Open { ws } = &mut self.state else {
            return false;
        };
        match ws.write(message) {
            Ok(()) => true,
            Err(tungstenite::Error::WriteBufferFull(_)) => false,
            Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => true,
            Err(e) => {
                self.fail(events, format!("could not write to the hub: {e}"));
                false
            }
        }
    }
}
