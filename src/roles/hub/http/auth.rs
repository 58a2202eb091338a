//! Who may use the API (PROTOCOLS.md section 2.3).
//!
//! - `api_auth: token` (the default): `Authorization: Bearer <api_token>`, or the session
//!   cookie that `POST /api/v1/login` sets (HttpOnly, SameSite=Strict) so the dashboard
//!   and `/ws` work from a browser. The cookie holds a digest of the token, not the token.
//! - `api_auth: none`: everything is open; the supervisor refuses it unless the API is
//!   bound to a loopback address (the original UI behind an authenticating proxy).
//!
//! Cookie-authenticated state changes must carry `X-Saltpeter-Csrf: 1` (a header a
//! cross-site page cannot send without a CORS preflight, which is never granted) and, if
//! the browser says where it comes from, an `Origin` equal to the `Host`; a `/ws`
//! handshake with the cookie must come from the same origin. Tokens are compared as
//! SHA-256 digests in constant time.

use sha2::{Digest, Sha256};

use super::parse::Request;
use crate::config::{ApiAuth, SaltpeterConfig, Secret};

pub const COOKIE: &str = "sp_session";
pub const CSRF_HEADER: &str = "x-saltpeter-csrf";
const COOKIE_CONTEXT: &[u8] = b"saltpeter-dashboard-session-v1\0";
/// How long the session cookie lives (30 days).
const COOKIE_MAX_AGE_S: u64 = 30 * 24 * 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    Bearer,
    Cookie,
    /// `api_auth: none`, or a route open to everyone.
    Open,
}

/// Why a request is refused: 401 (no or wrong credentials) or 403 (cross-site).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    Unauthorized(String),
    Forbidden(String),
}

impl Denied {
    pub fn status(&self) -> u16 {
        match self {
            Denied::Unauthorized(_) => 401,
            Denied::Forbidden(_) => 403,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Denied::Unauthorized(m) | Denied::Forbidden(m) => m,
        }
    }
}

pub struct Auth {
    mode: ApiAuth,
    token: Option<Secret>,
    metrics_auth: bool,
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Auth {
    pub fn from_config(sp: &SaltpeterConfig) -> Auth {
        Auth {
            mode: sp.api_auth,
            token: sp.api_token.clone(),
            metrics_auth: sp.metrics_auth,
        }
    }

    pub fn is_open(&self) -> bool {
        self.mode == ApiAuth::None
    }

    pub fn metrics_open(&self) -> bool {
        self.is_open() || !self.metrics_auth
    }

    fn session_value(&self) -> Option<String> {
        let token = self.token.as_ref()?;
        Some(hex(&digest(&[COOKIE_CONTEXT, token.expose().as_bytes()])))
    }

    fn token_matches(&self, presented: &str) -> bool {
        match &self.token {
            Some(token) => same(
                &digest(&[token.expose().as_bytes()]),
                &digest(&[presented.as_bytes()]),
            ),
            None => false,
        }
    }

    /// The credentials of a request.
    pub fn check(&self, req: &Request) -> Result<Principal, Denied> {
        if self.is_open() {
            return Ok(Principal::Open);
        }
        if self.token.is_none() {
            return Err(Denied::Unauthorized(
                "no api_token is configured: set saltpeter_config.api_token (or api_auth: none \
                 on a loopback address behind an authenticating proxy)"
                    .into(),
            ));
        }
        if let Some(value) = req.header("authorization") {
            let presented = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "));
            return match presented {
                Some(t) if self.token_matches(t.trim()) => Ok(Principal::Bearer),
                Some(_) => Err(Denied::Unauthorized("wrong token".into())),
                None => Err(Denied::Unauthorized(
                    "the Authorization header must be `Bearer <api_token>`".into(),
                )),
            };
        }
        if let (Some(cookie), Some(expected)) = (cookie(req, COOKIE), self.session_value()) {
            let a = digest(&[cookie.as_bytes()]);
            let b = digest(&[expected.as_bytes()]);
            return if same(&a, &b) {
                Ok(Principal::Cookie)
            } else {
                Err(Denied::Unauthorized(
                    "the session has expired; log in again".into(),
                ))
            };
        }
        Err(Denied::Unauthorized(
            "authentication required: `Authorization: Bearer <api_token>` or log in".into(),
        ))
    }

    /// A state change (POST, PUT, DELETE) by a browser session must be same-origin.
    pub fn check_state_change(&self, req: &Request, who: Principal) -> Result<(), Denied> {
        if who != Principal::Cookie {
            return Ok(());
        }
        if req.header(CSRF_HEADER) != Some("1") {
            return Err(Denied::Forbidden(format!(
                "a browser session must send `{CSRF_HEADER}: 1` with changes"
            )));
        }
        same_origin(req)
    }

    /// A `/ws` handshake with the session cookie must come from this origin.
    pub fn check_ws(&self, req: &Request, who: Principal) -> Result<(), Denied> {
        match who {
            Principal::Cookie => same_origin(req),
            _ => Ok(()),
        }
    }

    /// `POST /api/v1/login`: the `Set-Cookie` value for a good token.
    pub fn login(&self, presented: &str) -> Result<String, Denied> {
        if self.is_open() {
            return Ok(format!("{COOKIE}=open; Path=/; HttpOnly; SameSite=Strict"));
        }
        match self.session_value() {
            Some(value) if self.token_matches(presented) => Ok(format!(
                "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_MAX_AGE_S}"
            )),
            Some(_) => Err(Denied::Unauthorized("wrong token".into())),
            None => Err(Denied::Unauthorized("no api_token is configured".into())),
        }
    }

    pub fn logout_cookie() -> String {
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }
}

/// The value of cookie `name`, if the request carries it.
fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .filter(|(n, _)| n == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

fn same_origin(req: &Request) -> Result<(), Denied> {
    let Some(origin) = req.header("origin") else {
        return Ok(()); // not a browser's cross-site request
    };
    let host = req.header("host").unwrap_or("");
    let matches = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o.eq_ignore_ascii_case(host));
    if matches {
        Ok(())
    } else {
        Err(Denied::Forbidden(format!(
            "cross-origin request from {origin} refused"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::hub::http::parse::{ParseLimits, Parsed, parse};

    fn req(text: &str) -> Request {
        let limits = ParseLimits {
            max_header: 8192,
            max_body: 1024,
        };
        match parse(text.as_bytes(), &limits) {
            Ok(Parsed::Complete(r, _)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn auth(token: Option<&str>, mode: ApiAuth) -> Auth {
        Auth {
            mode,
            token: token.map(Secret::new),
            metrics_auth: true,
        }
    }

    #[test]
    fn bearer_and_cookie() {
        let a = auth(Some("s3cret"), ApiAuth::Token);
        let ok = req("GET / HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n");
        assert_eq!(a.check(&ok), Ok(Principal::Bearer));
        let bad = req("GET / HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n");
        assert_eq!(a.check(&bad).unwrap_err().status(), 401);
        let none = req("GET / HTTP/1.1\r\n\r\n");
        assert_eq!(a.check(&none).unwrap_err().status(), 401);
        let set = a.login("s3cret").unwrap();
        assert!(!set.contains("s3cret"), "the cookie never holds the token");
        let value = set.split(';').next().unwrap();
        let with_cookie = req(&format!("GET / HTTP/1.1\r\nCookie: a=b; {value}\r\n\r\n"));
        assert_eq!(a.check(&with_cookie), Ok(Principal::Cookie));
        assert!(a.login("wrong").is_err());
    }

    #[test]
    fn cookie_changes_need_the_csrf_header_and_the_same_origin() {
        let a = auth(Some("t"), ApiAuth::Token);
        let plain = req("POST / HTTP/1.1\r\nHost: h:1\r\n\r\n");
        assert_eq!(
            a.check_state_change(&plain, Principal::Cookie)
                .unwrap_err()
                .status(),
            403
        );
        let good = req(
            "POST / HTTP/1.1\r\nHost: h:1\r\nX-Saltpeter-Csrf: 1\r\nOrigin: http://h:1\r\n\r\n",
        );
        assert!(a.check_state_change(&good, Principal::Cookie).is_ok());
        let cross = req(
            "POST / HTTP/1.1\r\nHost: h:1\r\nX-Saltpeter-Csrf: 1\r\nOrigin: http://evil\r\n\r\n",
        );
        assert!(a.check_state_change(&cross, Principal::Cookie).is_err());
        assert!(a.check_state_change(&plain, Principal::Bearer).is_ok());
        assert!(a.check_ws(&cross, Principal::Cookie).is_err());
    }

    #[test]
    fn no_token_configured_refuses_and_none_opens() {
        let a = auth(None, ApiAuth::Token);
        let r = req("GET / HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\n");
        assert!(a.check(&r).unwrap_err().message().contains("api_token"));
        let open = auth(None, ApiAuth::None);
        assert_eq!(open.check(&r), Ok(Principal::Open));
        assert!(open.metrics_open());
    }
}
