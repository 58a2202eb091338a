//! Whether a failed connection to PostgreSQL is worth waiting for: the server cannot be
//! reached now (waiting helps), or it answers and refuses us (the operator must act).

use postgres::error::SqlState;

use crate::roles::db::store::StoreError;

/// True when `e` says the server cannot be reached now rather than that it refuses us:
/// the connection refused, timed out or cut (an I/O error of those kinds, not a TLS
/// handshake that failed), a connection exception (class 08), the server starting up,
/// shutting down or out of connection slots.
fn is_unreachable(e: &postgres::Error) -> bool {
    use std::io::ErrorKind::*;
    match e.code() {
        None => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(c) = cause {
                if let Some(io) = c.downcast_ref::<std::io::Error>() {
                    return matches!(
                        io.kind(),
                        ConnectionRefused
                            | NotFound
                            | ConnectionReset
                            | ConnectionAborted
                            | TimedOut
                            | UnexpectedEof
                            | BrokenPipe
                            | AddrNotAvailable
                            | HostUnreachable
                            | NetworkUnreachable
                            | NotConnected
                    );
                }
                cause = c.source();
            }
            // No I/O cause: closed by the server. (No answer within `connect_timeout` is
            // an I/O error of kind `TimedOut`, above.)
            e.is_closed()
        }
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::TOO_MANY_CONNECTIONS,
                ]
                .contains(code)
        }
    }
}

/// `message` as the error of a connection or schema check that failed with `e`:
/// [`StoreError::Unreachable`] when waiting helps, else [`StoreError::Unusable`].
pub(super) fn failure(message: String, e: &postgres::Error) -> StoreError {
    if is_unreachable(e) {
        StoreError::Unreachable(message)
    } else {
        StoreError::Unusable(message)
    }
}
