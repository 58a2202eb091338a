//! A non-blocking TCP stream that is plain or TLS, behind `Read` and `Write`.
//!
//! The TLS side drives a `rustls::Connection` by hand, because a mio loop is edge
//! triggered and nothing may block: `read` first pushes any TLS bytes rustls wants to send
//! (handshake, alerts), then takes plaintext rustls already decrypted, else reads TLS
//! records from the socket until it would block. `write` hands plaintext to rustls,
//! whose outgoing buffer is bounded ([`TLS_BUFFER`]): past it `write` says `WouldBlock`,
//! exactly like a full socket, so callers keep their own bounded buffers and retry on
//! the next writable event. `flush` pushes what rustls holds. Any event on the socket
//! leads the owner to `read`, which also pushes, so pending TLS output never stalls.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

/// Bytes rustls may hold for sending (plaintext before the handshake ends, records
/// after) before `write` refuses more.
pub const TLS_BUFFER: usize = 64 * 1024;

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

pub struct TlsStream {
    conn: rustls::Connection,
    sock: TcpStream,
}

impl Stream {
    /// An accepted connection: TLS when the port has a server configuration.
    pub fn accept(
        sock: TcpStream,
        config: Option<&Arc<rustls::ServerConfig>>,
    ) -> Result<Stream, rustls::Error> {
        match config {
            None => Ok(Stream::Plain(sock)),
            Some(config) => {
                let mut conn = rustls::ServerConnection::new(config.clone())?;
                conn.set_buffer_limit(Some(TLS_BUFFER));
                Ok(Stream::Tls(Box::new(TlsStream {
                    conn: conn.into(),
                    sock,
                })))
            }
        }
    }

    /// A connected client socket speaking TLS to `server`.
    pub fn connect_tls(
        sock: TcpStream,
        config: Arc<rustls::ClientConfig>,
        server: rustls::pki_types::ServerName<'static>,
    ) -> Result<Stream, rustls::Error> {
        let mut conn = rustls::ClientConnection::new(config, server)?;
        conn.set_buffer_limit(Some(TLS_BUFFER));
        Ok(Stream::Tls(Box::new(TlsStream {
            conn: conn.into(),
            sock,
        })))
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.sock,
        }
    }

    fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.sock,
        }
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nodelay(on)
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// Bytes accepted by `write` but not yet on the socket (TLS only; a plain socket
    /// holds none here).
    pub fn pending(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t.conn.wants_write(),
        }
    }

    /// End the write side: TLS sends close_notify first. If the socket cannot take it
    /// now, TCP stays open so a later `flush` still delivers it.
    pub fn shutdown_write(&mut self) {
        match self {
            Stream::Plain(s) => {
                let _ = s.shutdown(Shutdown::Write);
            }
            Stream::Tls(t) => {
                t.conn.send_close_notify();
                if t.push().is_ok() && !t.conn.wants_write() {
                    let _ = t.sock.shutdown(Shutdown::Write);
                }
            }
        }
    }
}

impl TlsStream {
    /// Write what rustls wants to send until done or the socket is full.
    fn push(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                // Ok(0) is the peer's close_notify: a clean end.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // TCP closed without close_notify: an end all the same for our framed
                // protocols (HTTP lengths, WebSocket frames), which detect truncation.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            self.push()?;
            if !self.conn.wants_read() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => {
                    // EOF: rustls now reports it through `reader()`.
                    self.conn.process_new_packets().map_err(tls_error)?;
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Tell the peer why (the alert rustls queued), best effort.
                let _ = self.push();
                return Err(tls_error(e));
            }
        }
    }

    fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.push()?;
        let n = self.conn.writer().write(buf)?;
        // The buffer limit reached: like a full socket.
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.push()?;
        Ok(n)
    }

    fn flush_tls(&mut self) -> io::Result<()> {
        self.push()?;
        if self.conn.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read_plain(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write_plain(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush_tls(),
        }
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.tcp_mut().register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.tcp_mut().reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.tcp_mut().deregister(registry)
    }
}
