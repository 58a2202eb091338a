//! Writing to a simulated wrapper's WebSocket without blocking, and the server's address.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use saltpeter::tls::stream::Stream;
use saltpeter::wire::wrapper::WrapperMsg;
use tungstenite::{Message, WebSocket};

pub(super) fn send(ws: &mut WebSocket<Stream>, msg: Message) -> Result<(), String> {
    // A full socket keeps the message in tungstenite's buffer; the next event flushes it.
    match ws.send(msg) {
        Ok(()) => Ok(()),
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(format!("write: {e}")),
    }
}

pub(super) fn send_json(ws: &mut WebSocket<Stream>, msg: &WrapperMsg) -> Result<(), String> {
    let text = serde_json::to_string(msg).map_err(|e| e.to_string())?;
    send(ws, Message::text(text))
}

/// `host:port` of a `ws://` or `wss://` URL, resolved.
pub(super) fn server_addr(url: &str) -> Result<SocketAddr, String> {
    let bare = url.split('#').next().unwrap_or(url);
    let rest = bare
        .strip_prefix("wss://")
        .or_else(|| bare.strip_prefix("ws://"))
        .ok_or_else(|| format!("{url}: not a ws:// or wss:// URL"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))
}
