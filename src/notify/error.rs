//! Why one delivery attempt failed: one variant per step that can fail (reaching the
//! receiver, TLS, the SMTP dialogue, the HTTP answer, `sendmail`), each with its cause.
//! The `--deliver` helper sends the message (`Display`) back as the attempt's cause,
//! which is recorded with the delivery and shown to operators.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub(crate) enum DeliveryError {
    #[error("cannot resolve {host}: {source}")]
    Resolve { host: String, source: io::Error },
    #[error("{host} has no address")]
    NoAddress { host: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("cannot set timeouts: {0}")]
    Timeouts(io::Error),
    /// A read or write of step `what` got no answer within the timeout.
    #[error("{what}: no answer within {secs} s")]
    Silent { what: &'static str, secs: u64 },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },

    /// `notify_ca_file` (read at each attempt).
    #[error("{0}")]
    CaFile(crate::tls::verify::CaError),
    #[error("{path}: none of its certificates is usable as a CA")]
    NoUsableCa { path: PathBuf },
    #[error("no CA certificates: no system CA bundle found and no notify_ca_file")]
    NoCa,
    #[error("TLS set-up failed: {0}")]
    TlsSetUp(rustls::Error),
    #[error("`{host}` is not a valid TLS server name: {source}")]
    ServerName {
        host: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("TLS handshake with {host}: no answer in time")]
    HandshakeSilent { host: String },
    #[error("TLS handshake with {host} failed: {source}")]
    Handshake { host: String, source: io::Error },

    /// The server answered step `what` with a code it does not accept.
    #[error("SMTP {what} refused: {code} {text}")]
    SmtpRefused {
        what: &'static str,
        code: u16,
        text: String,
    },
    #[error("the server sent data before the TLS handshake")]
    DataBeforeTls,
    #[error("STARTTLS on a connection already under TLS")]
    AlreadyTls,
    #[error(
        "the server offers no login this build speaks (PLAIN, LOGIN); it offers: {}",
        offered_text(offered)
    )]
    NoLogin { offered: Vec<String> },
    #[error("{host} does not offer STARTTLS (smtp_tls: starttls requires it)")]
    NoStartTls { host: String },
    #[error(
        "not sending the SMTP password to {host} without TLS (it offers no STARTTLS, or \
         smtp_tls is none)"
    )]
    PasswordWithoutTls { host: String },
    #[error("smtp_user is set but smtp_password is not")]
    NoPassword,

    /// `url` is as shown (`config::notify::url_shown`): the cause is recorded and shown.
    #[error("{url}: not an http:// or https:// URL")]
    NotHttp { url: String },
    /// The URL's host and port (`config::notify::split_authority`'s words).
    #[error("{0}")]
    Authority(String),
    #[error("the receiver closed the connection without an answer")]
    NoAnswer,
    #[error("not an HTTP answer: {status_line:.80}")]
    NotHttpAnswer { status_line: String },
    /// An answer outside 2xx: its status line (`HTTP 503 Service Unavailable`).
    #[error("{status}")]
    Status { status: String },
    #[error("{status}, but the bulk answer reports item errors")]
    BulkItems { status: String },

    #[error("cannot start {path}: {source}")]
    SendmailStart { path: String, source: io::Error },
    #[error("cannot write to {path}: {source}")]
    SendmailWrite { path: String, source: io::Error },
    #[error("{path} did not finish: {source}")]
    SendmailWait { path: String, source: io::Error },
    /// `sendmail` exited with a failure; `stderr` is what it said, trimmed.
    #[error("{path} failed ({status}): {stderr:.200}")]
    Sendmail {
        path: String,
        status: ExitStatus,
        stderr: String,
    },
}

fn offered_text(offered: &[String]) -> String {
    if offered.is_empty() {
        "none".to_string()
    } else {
        offered.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The messages are recorded with each attempt and read by operators: they stay as
    /// they were written when they were strings.
    #[test]
    fn messages_read_as_before() {
        let io = || io::Error::other("boom");
        let cases = [
            (
                DeliveryError::Resolve {
                    host: "h".into(),
                    source: io(),
                },
                "cannot resolve h: boom",
            ),
            (
                DeliveryError::Silent {
                    what: "reading the answer",
                    secs: 3,
                },
                "reading the answer: no answer within 3 s",
            ),
            (
                DeliveryError::Connect {
                    addr: "127.0.0.1:25".parse().unwrap(),
                    source: io(),
                },
                "cannot connect to 127.0.0.1:25: boom",
            ),
            (
                DeliveryError::SmtpRefused {
                    what: "RCPT",
                    code: 550,
                    text: "no".into(),
                },
                "SMTP RCPT refused: 550 no",
            ),
            (
                DeliveryError::NoLogin { offered: vec![] },
                "the server offers no login this build speaks (PLAIN, LOGIN); it offers: none",
            ),
            (
                DeliveryError::NoLogin {
                    offered: vec!["CRAM-MD5".into(), "XOAUTH2".into()],
                },
                "the server offers no login this build speaks (PLAIN, LOGIN); it offers: \
                 CRAM-MD5 XOAUTH2",
            ),
            (
                DeliveryError::PasswordWithoutTls { host: "mx".into() },
                "not sending the SMTP password to mx without TLS (it offers no STARTTLS, or \
                 smtp_tls is none)",
            ),
            (
                DeliveryError::NotHttpAnswer {
                    status_line: "x".repeat(100),
                },
                &format!("not an HTTP answer: {}", "x".repeat(80)),
            ),
            (
                DeliveryError::Sendmail {
                    path: "/usr/sbin/sendmail".into(),
                    status: ExitStatus::from_raw(256),
                    stderr: "y".repeat(300),
                },
                &format!(
                    "/usr/sbin/sendmail failed (exit status: 1): {}",
                    "y".repeat(200)
                ),
            ),
            (
                DeliveryError::BulkItems {
                    status: "HTTP 200 OK".into(),
                },
                "HTTP 200 OK, but the bulk answer reports item errors",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }
}
