//! The connection under a delivery: TCP with timeouts, TLS over it, the errors said
//! with what was being done, and base64 for the protocols that need it.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::error::DeliveryError;

/// TCP to the first address of `host` that answers (the error of the last one tried).
pub(super) fn connect(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, DeliveryError> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|source| DeliveryError::Resolve {
            host: host.to_string(),
            source,
        })?;
    let mut last = DeliveryError::NoAddress {
        host: host.to_string(),
    };
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(timeout))
                    .and_then(|()| stream.set_write_timeout(Some(timeout)))
                    .map_err(DeliveryError::Timeouts)?;
                return Ok(stream);
            }
            Err(source) => last = DeliveryError::Connect { addr, source },
        }
    }
    Err(last)
}

/// The failure of step `what`: a timeout said as such, any other error as it is.
pub(super) fn io_error(
    what: &'static str,
    timeout: Duration,
) -> impl Fn(std::io::Error) -> DeliveryError {
    move |source| match source.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => DeliveryError::Silent {
            what,
            secs: timeout.as_secs(),
        },
        _ => DeliveryError::Io { what, source },
    }
}

/// A connection to a receiver: plain TCP or TLS over it.
pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<super::tls::TlsStream>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Standard base64 with padding (Basic auth, encoded mail subjects).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
