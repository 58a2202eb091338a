//! A typed channel over a stream socket: `Channel<Tx, Rx>` sends `Tx` and receives `Rx`.
//!
//! The first frame each way is a `Hello { role, proto_version, pid }`; the channel checks
//! the peer's role and protocol version before any other message is accepted, so two
//! builds that do not speak the same protocol fail at once with a clear message. Sending
//! queues the encoded frame and writes as much as the socket takes; the owner calls
//! `on_writable` when the loop reports writability. Nothing here blocks unless the socket
//! itself is blocking (as in `saltpeterctl`).

use std::io::{self, Read, Write};
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{self, CodecError};
#[cfg(test)]
use super::frame::encode_frame;
use super::frame::{FrameError, FrameReader, HEADER_ROOM, MAX_FRAME, WriteQueue, seal_frame};
use super::hello::{Hello, PROTO_VERSION, Role};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ChannelError {
    #[error("the {0} process closed the link")]
    PeerGone(Role),
    #[error("i/o error on the link to {role}: {source}")]
    Io { role: Role, source: io::Error },
    #[error("bad frame from {role}: {source}")]
    Frame { role: Role, source: FrameError },
    #[error("bad message from {role}: {source}")]
    Codec { role: Role, source: CodecError },
    #[error("expected hello from {expected}, got one from {got}")]
    WrongPeer { expected: Role, got: Role },
    #[error(
        "{role} speaks link protocol version {got}, this build speaks {ours}: \
         all Saltpeter binaries must come from the same build"
    )]
    Version { role: Role, got: u32, ours: u32 },
}

/// Bytes posted in one turn after which they are written without waiting for its end.
pub(crate) const POST_FLUSH_BYTES: usize = 1 << 20;

/// One end of a link.
pub(crate) struct Channel<S, Tx, Rx> {
    stream: S,
    peer_role: Role,
    peer: Option<Hello>,
    reader: FrameReader,
    writes: WriteQueue,
    _types: PhantomData<fn(Tx) -> Rx>,
}

impl<S: Read + Write, Tx: Serialize, Rx: DeserializeOwned> Channel<S, Tx, Rx> {
    /// Wrap a connected stream; our hello is queued at once.
    pub(crate) fn new(stream: S, me: Role, peer_role: Role) -> Result<Self, ChannelError> {
        let mut channel = Channel {
            stream,
            peer_role,
            peer: None,
            reader: FrameReader::new(MAX_FRAME),
            writes: WriteQueue::default(),
            _types: PhantomData,
        };
        let hello = Hello {
            role: me,
            proto_version: PROTO_VERSION,
            pid: std::process::id(),
        };
        channel.queue(&hello)?;
        channel.on_writable()?;
        Ok(channel)
    }

    pub(crate) fn peer_role(&self) -> Role {
        self.peer_role
    }

    #[cfg(test)]
    /// The peer's hello, once it has arrived.
    pub(crate) fn peer(&self) -> Option<&Hello> {
        self.peer.as_ref()
    }

    pub(crate) fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    fn queue<T: Serialize>(&mut self, msg: &T) -> Result<(), ChannelError> {
        let framed = codec::encode_after(msg, MAX_FRAME, HEADER_ROOM).map_err(|source| {
            ChannelError::Codec {
                role: self.peer_role,
                source,
            }
        })?;
        self.writes.push(seal_frame(framed));
        Ok(())
    }

    /// Queue a message and write what the socket takes now.
    pub(crate) fn send(&mut self, msg: &Tx) -> Result<(), ChannelError> {
        self.queue(msg)?;
        self.on_writable()
    }

    /// Queue a message for the end of the loop turn ([`Channel::on_writable`] then writes
    /// every message of the turn in one go: one write and one wake-up of the peer instead
    /// of one per message). Past [`POST_FLUSH_BYTES`] queued it writes at once.
    pub(crate) fn post(&mut self, msg: &Tx) -> Result<(), ChannelError> {
        self.queue(msg)?;
        if self.writes.queued_bytes() >= POST_FLUSH_BYTES {
            self.on_writable()?;
        }
        Ok(())
    }

    /// Flush queued frames; call on every writable event and at the end of a turn.
    pub(crate) fn on_writable(&mut self) -> Result<(), ChannelError> {
        let role = self.peer_role;
        self.writes
            .flush_to(&mut self.stream)
            .map_err(|source| match source.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                    ChannelError::PeerGone(role)
                }
                _ => ChannelError::Io { role, source },
            })
    }

    /// Bytes still waiting for the socket.
    pub(crate) fn pending_write_bytes(&self) -> usize {
        self.writes.queued_bytes()
    }

    /// Read everything available and decode it. Messages received before the peer closed
    /// are returned first; the next call then reports `PeerGone`.
    pub(crate) fn receive(&mut self) -> Result<Vec<Rx>, ChannelError> {
        let role = self.peer_role;
        let open = match self.reader.fill_from(&mut self.stream) {
            Ok(open) => open,
            Err(source) if source.kind() == io::ErrorKind::ConnectionReset => false,
            Err(source) => return Err(ChannelError::Io { role, source }),
        };
        let msgs = self.decode_buffered()?;
        if !open && msgs.is_empty() {
            return Err(ChannelError::PeerGone(role));
        }
        Ok(msgs)
    }

    fn decode_buffered(&mut self) -> Result<Vec<Rx>, ChannelError> {
        /// A payload decoded where it lies in the read buffer (no copy of it is made).
        enum Decoded<Rx> {
            Hello(Hello),
            Msg(Rx),
        }
        let role = self.peer_role;
        let mut msgs = Vec::new();
        loop {
            let expecting_hello = self.peer.is_none();
            let decoded = self
                .reader
                .next_frame_with(|payload| match expecting_hello {
                    true => codec::decode(payload, MAX_FRAME).map(Decoded::Hello),
                    false => codec::decode(payload, MAX_FRAME).map(Decoded::Msg),
                })
                .map_err(|source| ChannelError::Frame { role, source })?;
            let Some(decoded) = decoded else {
                break;
            };
            match decoded.map_err(|source| ChannelError::Codec { role, source })? {
                Decoded::Hello(hello) => {
                    check_hello(role, &hello)?;
                    self.peer = Some(hello);
                }
                Decoded::Msg(msg) => msgs.push(msg),
            }
        }
        Ok(msgs)
    }

    #[cfg(test)]
    /// For blocking streams: wait for the next message.
    pub(crate) fn recv_blocking(&mut self) -> Result<Rx, ChannelError> {
        let role = self.peer_role;
        let mut msgs = self.recv_all_blocking()?;
        // Callers of this form are strictly request/response, so more than one message at
        // once is a protocol error.
        match (msgs.pop(), msgs.is_empty()) {
            (Some(msg), true) => Ok(msg),
            _ => Err(ChannelError::Io {
                role,
                source: io::Error::other("unexpected extra message from peer"),
            }),
        }
    }
}

impl<S: Read + Write, Tx: Serialize, Rx: DeserializeOwned> Channel<S, Tx, Rx> {
    /// For blocking streams that receive a stream of messages (`saltpeterctl` following
    /// output): wait until at least one message is there and return all decoded ones.
    pub(crate) fn recv_all_blocking(&mut self) -> Result<Vec<Rx>, ChannelError> {
        let role = self.peer_role;
        loop {
            let msgs = self.decode_buffered()?;
            if !msgs.is_empty() {
                return Ok(msgs);
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => 0,
                Err(source) => return Err(ChannelError::Io { role, source }),
            };
            if n == 0 {
                return Err(ChannelError::PeerGone(role));
            }
            self.reader.push(&chunk[..n]);
        }
    }

    /// For blocking streams: send one message and wait until it is written.
    pub(crate) fn send_blocking(&mut self, msg: &Tx) -> Result<(), ChannelError> {
        self.send(msg)?;
        while !self.writes.is_empty() {
            self.on_writable()?;
        }
        Ok(())
    }
}

fn check_hello(expected: Role, hello: &Hello) -> Result<(), ChannelError> {
    if hello.proto_version != PROTO_VERSION {
        return Err(ChannelError::Version {
            role: hello.role,
            got: hello.proto_version,
            ours: PROTO_VERSION,
        });
    }
    if hello.role != expected {
        return Err(ChannelError::WrongPeer {
            expected,
            got: hello.role,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    type Ends = (
        Channel<UnixStream, String, u32>,
        Channel<UnixStream, u32, String>,
    );

    fn pair() -> Ends {
        let (a, b) = UnixStream::pair().unwrap();
        let main = Channel::new(a, Role::Main, Role::Db).unwrap();
        let db = Channel::new(b, Role::Db, Role::Main).unwrap();
        (main, db)
    }

    #[test]
    fn typed_messages_after_hello() {
        let (mut main, mut db) = pair();
        main.send(&"hi".to_string()).unwrap();
        assert_eq!(db.recv_blocking().unwrap(), "hi");
        db.send(&7).unwrap();
        assert_eq!(main.recv_blocking().unwrap(), 7);
        assert_eq!(main.peer().map(|h| h.role), Some(Role::Db));
        assert_eq!(db.peer().map(|h| h.pid), Some(std::process::id()));
    }

    #[test]
    fn wrong_role_is_fatal() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut main: Channel<_, String, u32> = Channel::new(a, Role::Main, Role::Db).unwrap();
        let _hub: Channel<_, u32, String> = Channel::new(b, Role::Hub, Role::Main).unwrap();
        let err = main.recv_blocking().unwrap_err();
        assert!(
            matches!(
                err,
                ChannelError::WrongPeer {
                    expected: Role::Db,
                    got: Role::Hub
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn peer_close_is_peer_gone() {
        let (mut main, db) = pair();
        drop(db);
        let err = main.recv_blocking().unwrap_err();
        assert!(matches!(err, ChannelError::PeerGone(Role::Db)), "{err}");
    }

    #[test]
    fn version_mismatch_is_fatal() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut main: Channel<_, String, u32> = Channel::new(a, Role::Main, Role::Db).unwrap();
        let bad = Hello {
            role: Role::Db,
            proto_version: PROTO_VERSION + 1,
            pid: 1,
        };
        let payload = codec::encode(&bad, MAX_FRAME).unwrap();
        b.write_all(&encode_frame(&payload)).unwrap();
        let err = main.recv_blocking().unwrap_err();
        assert!(matches!(err, ChannelError::Version { .. }), "{err}");
    }
}
