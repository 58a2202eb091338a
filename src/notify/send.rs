//! Sending one message: an HTTP(S) POST, one SMTP session (`smtp.rs`), or one `sendmail`
//! run.
//!
//! This is blocking I/O with a timeout on every step, and it only ever runs inside the
//! `--deliver` helper process (`roles/blocking/deliver.rs`), which `blocking` kills at its
//! deadline: a slow or silent receiver costs a helper, never a loop. The answer is what
//! the receiver said (`HTTP 200`, `250 ...`), or the cause of the failure in words.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub use super::conn::base64;
use super::conn::{Conn, connect, io_error};
use super::error::DeliveryError;
use crate::config::notify::split_authority;
use crate::wire::notify::{DeliverOrder, MailTransport, Outgoing};

/// Bytes of an HTTP answer read at most (the status line and enough of a bulk answer to
/// see its `errors` flag).
const ANSWER_LIMIT: u64 = 1 << 20;

/// Send `order`'s message; `Ok(what the receiver said)` or `Err(cause)`.
pub(crate) fn deliver(order: &DeliverOrder) -> Result<String, DeliveryError> {
    let timeout = Duration::from_secs(order.io_timeout_s.max(1));
    match &order.message {
        Outgoing::Webhook {
            url,
            body,
            signature,
            delivery_key,
        } => {
            let mut headers = vec![
                ("Content-Type", "application/json".to_string()),
                ("X-Saltpeter-Delivery", delivery_key.clone()),
            ];
            if let Some(sig) = signature {
                headers.push(("X-Saltpeter-Signature", sig.clone()));
            }
            post(url, &headers, body, timeout, order.ca_file.as_deref()).map(|(status, _)| status)
        }
        Outgoing::Bulk { url, body } => {
            let mut headers = vec![("Content-Type", "application/x-ndjson".to_string())];
            if let Some((user, password)) = &order.basic_auth {
                let token = base64(format!("{user}:{password}").as_bytes());
                headers.push(("Authorization", format!("Basic {token}")));
            }
            let (status, answer) = post(url, &headers, body, timeout, order.ca_file.as_deref())?;
            // The bulk API answers 200 even when items failed; the flag says so.
            if answer.contains("\"errors\":true") || answer.contains("\"errors\": true") {
                return Err(DeliveryError::BulkItems { status });
            }
            Ok(status)
        }
        Outgoing::Email { to, subject, body } => {
            let message = mail_text(&order.mail_from, to, subject, body);
            match &order.mail {
                MailTransport::Smtp { host, port, tls } => super::smtp::send(
                    &super::smtp::Server {
                        host,
                        port: *port,
                        tls: *tls,
                        auth: order.smtp_auth.as_ref(),
                        ca_file: order.ca_file.as_deref(),
                    },
                    &order.mail_from,
                    to,
                    &message,
                    timeout,
                ),
                MailTransport::Sendmail { path } => sendmail(path, &message),
            }
        }
    }
}

/// POST `body` to an `http://` or `https://` URL (the certificate checked against the
/// system's CAs and `ca_file`); `Ok((status line, answer))` for a 2xx answer.
pub(crate) fn post(
    url: &str,
    headers: &[(&str, String)],
    body: &str,
    timeout: Duration,
    ca_file: Option<&Path>,
) -> Result<(String, String), DeliveryError> {
    let (rest, tls) = match url.strip_prefix("https://") {
        Some(rest) => (rest, true),
        None => match url.strip_prefix("http://") {
            Some(rest) => (rest, false),
            None => {
                return Err(DeliveryError::NotHttp {
                    url: crate::config::notify::url_shown(url),
                });
            }
        },
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let (host, port) =
        split_authority(authority, if tls { 443 } else { 80 }).map_err(DeliveryError::Authority)?;
    let tcp = connect(&host, port, timeout)?;
    let mut stream = if tls {
        let config = super::tls::client_config(ca_file)?;
        Conn::Tls(Box::new(super::tls::connect(tcp, &host, config)?))
    } else {
        Conn::Plain(tcp)
    };
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: saltpeter/{}\r\nContent-Length: {}\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .and_then(|()| stream.flush())
        .map_err(io_error("sending the request", timeout))?;
    let mut answer = Vec::new();
    let read = stream
        .take(ANSWER_LIMIT)
        .read_to_end(&mut answer)
        .map_err(io_error("reading the answer", timeout));
    // A receiver that answers and then keeps the connection open past the timeout still
    // answered: judge by what arrived.
    if answer.is_empty() {
        read?;
        return Err(DeliveryError::NoAnswer);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status_line = text.lines().next().unwrap_or_default().trim().to_string();
    let Some(code) = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
    else {
        return Err(DeliveryError::NotHttpAnswer { status_line });
    };
    let status = status_line
        .split_once(' ')
        .map(|(_, s)| format!("HTTP {s}"))
        .unwrap_or_else(|| format!("HTTP {code}"));
    if (200..300).contains(&code) {
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    } else {
        Err(DeliveryError::Status { status })
    }
}

/// The mail as sent: headers and the body with CRLF line ends.
pub(crate) fn mail_text(from: &str, to: &[String], subject: &str, body: &str) -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string());
    let now = chrono::Utc::now();
    let subject: String = subject.chars().filter(|c| !c.is_control()).collect();
    let subject = if subject.is_ascii() {
        subject
    } else {
        format!("=?UTF-8?B?{}?=", base64(subject.as_bytes()))
    };
    let mut text = format!(
        "From: {from}\r\nTo: {}\r\nSubject: {subject}\r\nDate: {}\r\nMessage-ID: <{}.{}@{host}>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\nAuto-Submitted: auto-generated\r\n\r\n",
        to.join(", "),
        now.to_rfc2822(),
        now.timestamp_millis(),
        std::process::id(),
    );
    for line in body.lines() {
        text.push_str(line);
        text.push_str("\r\n");
    }
    text
}

/// `sendmail -t -i` with the message on its stdin.
pub(crate) fn sendmail(path: &str, message: &str) -> Result<String, DeliveryError> {
    let mut child = Command::new(path)
        .args(["-t", "-i"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| DeliveryError::SendmailStart {
            path: path.to_string(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(message.replace("\r\n", "\n").as_bytes())
            .map_err(|source| DeliveryError::SendmailWrite {
                path: path.to_string(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| DeliveryError::SendmailWait {
            path: path.to_string(),
            source,
        })?;
    if out.status.success() {
        Ok(format!("{path} accepted the mail"))
    } else {
        Err(DeliveryError::Sendmail {
            path: path.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    #[test]
    fn a_silent_receiver_is_a_timeout_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts (the backlog does) and never answers.
        let started = std::time::Instant::now();
        let err = post(
            &format!("http://127.0.0.1:{port}/x"),
            &[],
            "{}",
            Duration::from_secs(1),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, DeliveryError::Silent { secs: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("no answer within 1 s"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "hang detection"
        );
        drop(listener);
    }

    #[test]
    fn a_refused_connection_is_a_cause_not_a_panic() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = post(
            &format!("http://127.0.0.1:{port}/x"),
            &[],
            "{}",
            Duration::from_secs(2),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, DeliveryError::Connect { .. }), "{err}");
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }
}
