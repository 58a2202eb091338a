//! One SMTP session: greeting, EHLO, STARTTLS (or TLS from the first byte), AUTH PLAIN or
//! LOGIN, MAIL, RCPT per address, DATA, QUIT.
//!
//! Runs only inside the `--deliver` helper, every read and write under the step timeout.
//! TLS follows `saltpeter_config.smtp_tls` (`auto`: STARTTLS when the server offers it).
//! A password is only ever sent over TLS: a login configured for a server that offers no
//! TLS is a failed attempt that says so, never a password in clear text.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use super::conn::{Conn, base64, connect, io_error};
use super::error::DeliveryError;
use crate::wire::notify::SmtpTls;

/// Where and how to send.
pub(crate) struct Server<'a> {
    pub host: &'a str,
    pub port: u16,
    pub tls: SmtpTls,
    /// User and password (`smtp_user`, `smtp_password`).
    pub auth: Option<&'a (String, String)>,
    pub ca_file: Option<&'a Path>,
}

/// An SMTP reply: its code and its lines' texts.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    code: u16,
    lines: Vec<String>,
}

impl Reply {
    fn last(&self) -> &str {
        self.lines.last().map(String::as_str).unwrap_or("")
    }

    /// An EHLO keyword (`STARTTLS`, `AUTH PLAIN LOGIN`) offered, with its parameters.
    fn extension(&self, name: &str) -> Option<Vec<String>> {
        self.lines.iter().skip(1).find_map(|l| {
            let mut words = l.split_whitespace();
            words
                .next()
                .filter(|w| w.eq_ignore_ascii_case(name))
                .map(|_| words.map(str::to_ascii_uppercase).collect())
        })
    }
}

struct Session<'a> {
    reader: BufReader<Conn>,
    timeout: Duration,
    server: &'a Server<'a>,
}

impl Session<'_> {
    /// Send `command` (none: read the greeting) and expect one of `want`; `what` names the
    /// step in a failure (never the command itself: it may hold the password).
    fn step(
        &mut self,
        command: Option<&str>,
        what: &'static str,
        want: &[u16],
    ) -> Result<Reply, DeliveryError> {
        if let Some(c) = command {
            let w = self.reader.get_mut();
            w.write_all(c.as_bytes())
                .and_then(|()| w.write_all(b"\r\n"))
                .and_then(|()| w.flush())
                .map_err(io_error(what, self.timeout))?;
        }
        let reply = read_reply(&mut self.reader).map_err(io_error(what, self.timeout))?;
        if want.contains(&reply.code) {
            Ok(reply)
        } else {
            Err(DeliveryError::SmtpRefused {
                what,
                code: reply.code,
                text: reply.last().to_string(),
            })
        }
    }

    fn ehlo(&mut self, me: &str) -> Result<Reply, DeliveryError> {
        match self.step(Some(&format!("EHLO {me}")), "EHLO", &[250]) {
            Ok(reply) => Ok(reply),
            Err(_) => self.step(Some(&format!("HELO {me}")), "HELO", &[250]),
        }
    }

    /// STARTTLS: the same connection, now under TLS.
    fn start_tls(self) -> Result<Self, DeliveryError> {
        let Session {
            reader,
            timeout,
            server,
        } = self;
        if !reader.buffer().is_empty() {
            return Err(DeliveryError::DataBeforeTls);
        }
        let Conn::Plain(tcp) = reader.into_inner() else {
            return Err(DeliveryError::AlreadyTls);
        };
        let config = super::tls::client_config(server.ca_file)?;
        let tls = super::tls::connect(tcp, server.host, config)?;
        Ok(Session {
            reader: BufReader::new(Conn::Tls(Box::new(tls))),
            timeout,
            server,
        })
    }

    fn login(
        &mut self,
        offered: &[String],
        user: &str,
        password: &str,
    ) -> Result<(), DeliveryError> {
        if offered.iter().any(|m| m == "PLAIN") {
            let token = base64(format!("\0{user}\0{password}").as_bytes());
            self.step(Some(&format!("AUTH PLAIN {token}")), "AUTH PLAIN", &[235])?;
        } else if offered.iter().any(|m| m == "LOGIN") {
            self.step(Some("AUTH LOGIN"), "AUTH LOGIN", &[334])?;
            self.step(Some(&base64(user.as_bytes())), "AUTH LOGIN (user)", &[334])?;
            self.step(
                Some(&base64(password.as_bytes())),
                "AUTH LOGIN (password)",
                &[235],
            )?;
        } else {
            return Err(DeliveryError::NoLogin {
                offered: offered.to_vec(),
            });
        }
        Ok(())
    }
}

/// Send one mail; `Ok(the server's acceptance)` or `Err(cause)`.
pub(crate) fn send(
    server: &Server<'_>,
    from: &str,
    to: &[String],
    message: &str,
    timeout: Duration,
) -> Result<String, DeliveryError> {
    let tcp = connect(server.host, server.port, timeout)?;
    let conn = if server.tls == SmtpTls::Implicit {
        let config = super::tls::client_config(server.ca_file)?;
        Conn::Tls(Box::new(super::tls::connect(tcp, server.host, config)?))
    } else {
        Conn::Plain(tcp)
    };
    let mut s = Session {
        reader: BufReader::new(conn),
        timeout,
        server,
    };
    let me = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string());
    s.step(None, "greeting", &[220])?;
    let mut ehlo = s.ehlo(&me)?;
    let mut secure = server.tls == SmtpTls::Implicit;
    if !secure && matches!(server.tls, SmtpTls::Auto | SmtpTls::Starttls) {
        if ehlo.extension("STARTTLS").is_some() {
            s.step(Some("STARTTLS"), "STARTTLS", &[220])?;
            s = s.start_tls()?;
            secure = true;
            // What the server offers may change under TLS (AUTH often appears only then).
            ehlo = s.ehlo(&me)?;
        } else if server.tls == SmtpTls::Starttls {
            return Err(DeliveryError::NoStartTls {
                host: server.host.to_string(),
            });
        }
    }
    if let Some((user, password)) = server.auth {
        if !secure {
            return Err(DeliveryError::PasswordWithoutTls {
                host: server.host.to_string(),
            });
        }
        if password.is_empty() {
            return Err(DeliveryError::NoPassword);
        }
        let offered = ehlo.extension("AUTH").unwrap_or_default();
        s.login(&offered, user, password)?;
    }
    s.step(Some(&format!("MAIL FROM:<{from}>")), "MAIL", &[250])?;
    for rcpt in to {
        s.step(Some(&format!("RCPT TO:<{rcpt}>")), "RCPT", &[250, 251])?;
    }
    s.step(Some("DATA"), "DATA", &[354])?;
    // Dot-stuffing: a line starting with "." gets another one.
    let mut data = String::with_capacity(message.len() + 16);
    for line in message.split_inclusive("\r\n") {
        if line.starts_with('.') {
            data.push('.');
        }
        data.push_str(line);
    }
    if !data.ends_with("\r\n") {
        data.push_str("\r\n");
    }
    data.push('.');
    let accepted = s.step(Some(&data), "end of DATA", &[250])?;
    let _ = s.step(Some("QUIT"), "QUIT", &[221]);
    Ok(format!("250 {}", accepted.last()))
}

/// One SMTP reply (possibly multi-line), at most 100 lines of 4 KiB.
fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.by_ref().take(4096).read_line(&mut line)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        let line = line.trim_end();
        let code = line.get(..3).and_then(|c| c.parse::<u16>().ok());
        let last = line.as_bytes().get(3) != Some(&b'-');
        let Some(code) = code else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an SMTP reply: {line:.80}"),
            ));
        };
        lines.push(line.get(4..).unwrap_or("").to_string());
        if last {
            return Ok(Reply { code, lines });
        }
        if lines.len() > 100 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "an SMTP reply of more than 100 lines",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn smtp_replies_are_read_across_lines() {
        let mut input: &[u8] = b"250-first\r\n250-STARTTLS\r\n250 AUTH LOGIN plain\r\n";
        let reply = read_reply(&mut input).unwrap();
        assert_eq!(reply.code, 250);
        assert_eq!(reply.last(), "AUTH LOGIN plain");
        assert_eq!(reply.extension("starttls"), Some(vec![]));
        assert_eq!(
            reply.extension("AUTH"),
            Some(vec!["LOGIN".to_string(), "PLAIN".to_string()])
        );
        assert_eq!(reply.extension("8BITMIME"), None);
        let mut bad: &[u8] = b"hello\r\n";
        assert!(read_reply(&mut bad).is_err());
    }

    /// A server that greets, answers EHLO with `ehlo` and then `answers` in turn.
    fn server(ehlo: &'static [u8], answers: &'static [&'static [u8]]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            s.write_all(b"220 hi\r\n").unwrap();
            let mut line = String::new();
            r.read_line(&mut line).unwrap(); // EHLO
            s.write_all(ehlo).unwrap();
            for a in answers {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                s.write_all(a).unwrap();
            }
        });
        port
    }

    fn send_to(
        port: u16,
        tls: SmtpTls,
        auth: Option<&(String, String)>,
    ) -> Result<String, DeliveryError> {
        send(
            &Server {
                host: "127.0.0.1",
                port,
                tls,
                auth,
                ca_file: None,
            },
            "a@b.example",
            &["c@d.example".to_string()],
            "Subject: x\r\n\r\nbody\r\n",
            Duration::from_secs(5),
        )
    }

    #[test]
    fn smtp_refusals_carry_the_server_answer() {
        let port = server(b"250 ok\r\n", &[b"550 5.7.1 relay denied\r\n"]);
        let err = send_to(port, SmtpTls::Auto, None).unwrap_err();
        assert!(
            matches!(
                err,
                DeliveryError::SmtpRefused {
                    what: "MAIL",
                    code: 550,
                    ..
                }
            ),
            "{err}"
        );
        let err = err.to_string();
        assert!(err.contains("550 5.7.1 relay denied"), "{err}");
        assert!(err.contains("MAIL"), "{err}");
    }

    #[test]
    fn no_password_without_tls() {
        let port = server(b"250-ok\r\n250 AUTH PLAIN\r\n", &[]);
        let auth = ("u".to_string(), "the-password".to_string());
        let err = send_to(port, SmtpTls::Auto, Some(&auth)).unwrap_err();
        assert!(
            matches!(err, DeliveryError::PasswordWithoutTls { .. }),
            "{err}"
        );
        let err = err.to_string();
        assert!(err.contains("without TLS"), "{err}");
        assert!(!err.contains("the-password"), "{err}");
        let port = server(b"250 ok\r\n", &[]);
        let err = send_to(port, SmtpTls::Starttls, None).unwrap_err();
        assert!(matches!(err, DeliveryError::NoStartTls { .. }), "{err}");
        assert!(err.to_string().contains("does not offer STARTTLS"), "{err}");
    }
}
