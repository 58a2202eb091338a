//! A tiny blocking HTTP/1.1 client for the API tests and for chromedriver's WebDriver API.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text()))
    }

    /// The `error.code` of an API error.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One request on a fresh connection.
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut c = Conn::open(port);
    c.send(method, path, headers, body)
}

/// A keep-alive connection.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(port: u16) -> Conn {
        Conn::from_stream(TcpStream::connect(("127.0.0.1", port)).expect("connect"))
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        self.stream
            .write_all(&request_bytes(method, path, headers, body))
            .expect("send request");
        self.read_response(method == "HEAD")
            .unwrap_or_else(|| panic!("no answer to {method} {path}"))
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next response; `None` if the connection closed first.
    pub fn read_response(&mut self, head_only: bool) -> Option<Resp> {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if !self.fill() {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end);
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let body = if head_only || status == 204 || status == 101 {
            Vec::new()
        } else if let Some(len) = get("content-length").and_then(|l| l.parse::<usize>().ok()) {
            while self.buf.len() < len {
                if !self.fill() {
                    return None;
                }
            }
            self.buf.drain(..len).collect()
        } else if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    if !self.fill() {
                        return None;
                    }
                };
                let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
                self.buf.drain(..line_end + 2);
                while self.buf.len() < size + 2 {
                    if !self.fill() {
                        return None;
                    }
                }
                body.extend(self.buf.drain(..size));
                self.buf.drain(..2);
                if size == 0 {
                    break body;
                }
            }
        } else {
            while self.fill() {}
            std::mem::take(&mut self.buf)
        };
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// Whether the server closed the connection (reads end) within `wait`.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        let _ = self.stream.set_read_timeout(Some(wait));
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Standard base64 (for WebDriver screenshots).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let Some(v) = value(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(base64_decode("aGVsbG8gd29ybGQ="), b"hello world");
    assert_eq!(base64_decode("YQ=="), b"a");
}
