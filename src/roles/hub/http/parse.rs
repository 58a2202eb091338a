//! HTTP/1.1 requests in, responses out: pure functions over bytes (no sockets).
//!
//! A request is complete when its header section ended and `Content-Length` bytes of body
//! followed. Limits are checked before anything is buffered further: a header section
//! over `max_header` bytes is 431, a declared body over `max_body` is 413, a chunked body
//! is 501 (no client of this API needs one), anything httparse refuses is 400.

use std::fmt::Write;

pub(crate) use crate::roles::hub::state::http::ParseLimits;

/// Most header lines a request may have.
const MAX_HEADERS: usize = 64;

/// A parsed request. Header names are lower case; the path is still percent-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection stays open after the answer.
    pub(crate) fn keep_alive(&self) -> bool {
        let connection = self
            .header("connection")
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_default();
        let says = |word: &str| connection.split(',').any(|t| t.trim() == word);
        match self.minor_version {
            0 => says("keep-alive"),
            _ => !says("close"),
        }
    }

    /// Path segments, percent-decoded (`None` if a segment is not valid UTF-8).
    pub(crate) fn segments(&self) -> Option<Vec<String>> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s, false))
            .collect()
    }
}

/// A request that cannot be served, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl Rejection {
    pub(crate) fn new(status: u16, code: &'static str, message: impl Into<String>) -> Rejection {
        Rejection {
            status,
            code,
            message: message.into(),
        }
    }
}

/// What the bytes so far hold.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// A request and the number of bytes it used.
    Complete(Request, usize),
}

pub(crate) fn parse(buf: &[u8], limits: &ParseLimits) -> Result<Parsed, Rejection> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_header {
                return Err(header_too_large(limits));
            }
            return Ok(Parsed::Incomplete);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Rejection::new(
                431,
                "header_too_large",
                format!("more than {MAX_HEADERS} header lines"),
            ));
        }
        Err(e) => {
            return Err(Rejection::new(
                400,
                "bad_request",
                format!("malformed request: {e}"),
            ));
        }
    };
    if head_len > limits.max_header {
        return Err(header_too_large(limits));
    }
    let method = req.method.unwrap_or("").to_string();
    let target = req.path.unwrap_or("");
    let minor_version = req.version.unwrap_or(1);
    let mut out_headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).map_err(|_| {
            Rejection::new(
                400,
                "bad_request",
                format!("header {} is not UTF-8", h.name),
            )
        })?;
        out_headers.push((h.name.to_ascii_lowercase(), value.trim().to_string()));
    }
    // Two `Host`s would let one check read the first and another the second (the loopback
    // check of `api_auth: none`, the same-origin check): refused outright.
    if out_headers.iter().filter(|(n, _)| n == "host").count() > 1 {
        return Err(Rejection::new(
            400,
            "bad_request",
            "more than one Host header",
        ));
    }
    let request_head = |body: Vec<u8>| -> Result<Request, Rejection> {
        if !target.starts_with('/') {
            return Err(Rejection::new(
                400,
                "bad_request",
                "the request target must be a path",
            ));
        }
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, q),
            None => (target, ""),
        };
        Ok(Request {
            method: method.clone(),
            path: path.to_string(),
            query: parse_query(query),
            headers: out_headers.clone(),
            body,
            minor_version,
        })
    };
    let lookup = |name: &str| {
        out_headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    if !lookup("transfer-encoding").is_empty() {
        return Err(Rejection::new(
            501,
            "not_implemented",
            "chunked request bodies are not supported; send Content-Length",
        ));
    }
    let lengths = lookup("content-length");
    let body_len = match lengths.as_slice() {
        [] => 0,
        // Digits only: `+5`, ` 5`, `0x5` are not lengths (RFC 9110 section 8.6), and a
        // parser that accepts them disagrees with a proxy that does not.
        [one] if one.is_empty() || !one.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(Rejection::new(
                400,
                "bad_request",
                format!(
                    "bad Content-Length `{}`: digits only",
                    crate::roles::hub::logsafe::clip(one, 40)
                ),
            ));
        }
        [one] => one.parse::<usize>().map_err(|_| {
            Rejection::new(400, "bad_request", format!("bad Content-Length `{one}`"))
        })?,
        _ => {
            return Err(Rejection::new(
                400,
                "bad_request",
                "more than one Content-Length",
            ));
        }
    };
    if body_len > limits.max_body {
        return Err(Rejection::new(
            413,
            "payload_too_large",
            format!(
                "the body is {body_len} bytes; at most {} are accepted",
                limits.max_body
            ),
        ));
    }
    if buf.len() < head_len + body_len {
        return Ok(Parsed::Incomplete);
    }
    let body = buf[head_len..head_len + body_len].to_vec();
    Ok(Parsed::Complete(request_head(body)?, head_len + body_len))
}

fn header_too_large(limits: &ParseLimits) -> Rejection {
    Rejection::new(
        431,
        "header_too_large",
        format!(
            "the request header section is over {} bytes",
            limits.max_header
        ),
    )
}

/// `a=1&b=x%20y` into pairs (`+` is a space); undecodable pairs are dropped.
pub(crate) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

/// Percent-decoding (and `+` as space in query strings); `None` for invalid UTF-8 or a
/// broken escape.
pub(crate) fn percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A response to serialise.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn new(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
        body.push(b'\n');
        Response::new(status, "application/json", body)
    }

    /// The API's error shape: `{"error": {"code", "message"}}`.
    pub(crate) fn error(status: u16, code: &str, message: &str) -> Response {
        Response::json(
            status,
            &serde_json::json!({"error": {"code": code, "message": message}}),
        )
    }

    pub(crate) fn rejection(r: &Rejection) -> Response {
        Response::error(r.status, r.code, &r.message)
    }

    pub(crate) fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The bytes on the wire; `head_only` for HEAD (the length stays that of the body).
    pub(crate) fn to_bytes(&self, keep_alive: bool, head_only: bool) -> Vec<u8> {
        let mut head = String::with_capacity(256);
        let _ = write!(head, "HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        let _ = write!(
            head,
            "Content-Length: {}\r\nConnection: {}\r\nX-Content-Type-Options: nosniff\r\n\
             Referrer-Policy: no-referrer\r\n\r\n",
            self.body.len(),
            if keep_alive { "keep-alive" } else { "close" }
        );
        let mut out = head.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ParseLimits = ParseLimits {
        max_header: 1024,
        max_body: 16,
    };

    fn complete(bytes: &[u8]) -> (Request, usize) {
        match parse(bytes, &LIMITS) {
            Ok(Parsed::Complete(r, n)) => (r, n),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn request_with_query_body_and_pipelined_rest() {
        let raw = b"POST /api/v1/x%20y?a=1&b=c+d&e=%2F HTTP/1.1\r\nHost: h\r\n\
                    Content-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\n\r\n";
        let (r, n) = complete(raw);
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/v1/x%20y");
        assert_eq!(r.segments().unwrap(), ["api", "v1", "x y"]);
        assert_eq!(r.query("b"), Some("c d"));
        assert_eq!(r.query("e"), Some("/"));
        assert_eq!(r.header("host"), Some("h"));
        assert_eq!(r.body, b"body");
        assert!(r.keep_alive());
        let (next, _) = complete(&raw[n..]);
        assert_eq!(next.path, "/");
    }

    #[test]
    fn partial_requests_wait_for_more() {
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHo", &LIMITS),
            Ok(Parsed::Incomplete)
        ));
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", &LIMITS),
            Ok(Parsed::Incomplete)
        ));
    }

    #[test]
    fn limits_and_malformed_input_are_rejected() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(2000));
        assert_eq!(parse(big.as_bytes(), &LIMITS).unwrap_err().status, 431);
        let body = b"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n";
        assert_eq!(parse(body, &LIMITS).unwrap_err().status, 413);
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(chunked, &LIMITS).unwrap_err().status, 501);
        assert_eq!(
            parse(b"\x16\x03\x01garbage\r\n\r\n", &LIMITS)
                .unwrap_err()
                .status,
            400
        );
        let twice = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(parse(twice, &LIMITS).unwrap_err().status, 400);
        let absolute = b"GET http://x/ HTTP/1.1\r\n\r\n";
        assert_eq!(parse(absolute, &LIMITS).unwrap_err().status, 400);
    }

    #[test]
    fn keep_alive_rules() {
        let (r, _) = complete(b"GET / HTTP/1.0\r\n\r\n");
        assert!(!r.keep_alive());
        let (r, _) = complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(r.keep_alive());
        let (r, _) = complete(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(!r.keep_alive());
    }

    #[test]
    fn percent_decoding_refuses_broken_escapes() {
        assert_eq!(percent_decode("a%2", false), None);
        assert_eq!(percent_decode("%ff", false), None);
        assert_eq!(percent_decode("a+b", false).as_deref(), Some("a+b"));
    }

    #[test]
    fn responses_serialise_with_length() {
        let bytes = Response::error(404, "not_found", "no").to_bytes(true, false);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(text.contains("Connection: keep-alive\r\n"), "{text}");
        assert!(text.ends_with("{\"error\":{\"code\":\"not_found\",\"message\":\"no\"}}\n"));
        let head = Response::new(200, "text/plain", b"abc".to_vec()).to_bytes(false, true);
        let text = String::from_utf8(head).unwrap();
        assert!(text.contains("Content-Length: 3\r\n") && text.ends_with("\r\n\r\n"));
    }
}
