//! Who may use the API (docs/api.md, docs/security.md).
//!
//! - `api_auth: token` (the default): `Authorization: Bearer <token>` of one of the
//!   configured identities (`api_tokens`, and `api_token` as the `admin` named
//!   `api_token`), or the session cookie that `POST /api/v1/login` sets for the dashboard
//!   and `/ws` (`sessions.rs`: random per login, expiring, revoked by logout; `HttpOnly`,
//!   `SameSite=Strict`, `Secure` under TLS). Failed credentials, however presented (login form, Bearer
//!   header, a cookie we did not sign, a `/ws` handshake), count against one throttle
//!   per client address (`sessions::Throttle`); past it every wrong credential gets 429.
//!   A right one is always accepted: it is checked like a wrong one (the same constant-
//!   time comparisons), so another local user's guesses cannot lock the dashboard, a
//!   script or a Prometheus scrape from the same address out.
//! - `api_auth: none`: no credentials (the supervisor refuses it unless the API is bound
//!   to a loopback address, behind an authenticating proxy); requests run as
//!   `anonymous` with the admin role, but every request must come with a loopback `Host`
//!   (a DNS-rebinding page names its own host), and a `/ws` handshake and every state
//!   change also, if the browser sends one, with an `Origin` equal to it, so a web page
//!   elsewhere can neither read nor drive the API through the operator's browser.
//!
//! Cookie-authenticated state changes must carry `X-Saltpeter-Csrf: 1` (a header a
//! cross-site page cannot send without a CORS preflight, which is never granted) and, if
//! the browser says where it comes from, an `Origin` equal to the `Host`; a `/ws`
//! handshake with the cookie must come from the same origin. Tokens are compared as
//! SHA-256 digests in constant time.

use std::net::IpAddr;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::parse::Request;
use crate::config::{ApiAuth, ApiIdentity, ApiRole, SaltpeterConfig};
pub(crate) use crate::roles::hub::state::http::Auth;
use crate::roles::hub::state::identity::{Identity, OPEN_NAME, Principal};
use crate::roles::hub::state::sessions::{SESSION_TTL, Sessions, Throttle};

pub(crate) const COOKIE: &str = "sp_session";
pub(crate) const CSRF_HEADER: &str = "x-saltpeter-csrf";

/// Why a request is refused: 401 (no or wrong credentials), 403 (cross-site or a role
/// short of the request), 429 (a wrong credential from an address past its throttle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    Unauthorized(String),
    Forbidden(String),
    TooMany(String),
}

impl Denied {
    pub(crate) fn status(&self) -> u16 {
        match self {
            Denied::Unauthorized(_) => 401,
            Denied::Forbidden(_) => 403,
            Denied::TooMany(_) => 429,
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            Denied::Unauthorized(m) | Denied::Forbidden(m) | Denied::TooMany(m) => m,
        }
    }
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

impl Auth {
    /// `sessions`: [`Sessions::open`] on the state directory in the hub.
    pub(crate) fn from_config(sp: &SaltpeterConfig, secure: bool, sessions: Sessions) -> Auth {
        let mut identities = sp.api_tokens.clone();
        if let Some(token) = &sp.api_token {
            identities.push(ApiIdentity {
                name: "api_token".into(),
                role: ApiRole::Admin,
                token_sha256: digest(&[token.expose().as_bytes()]),
            });
        }
        Auth {
            mode: sp.api_auth,
            identities,
            metrics_auth: sp.metrics_auth,
            secure,
            sessions,
            throttle: Throttle::default(),
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.mode == ApiAuth::None
    }

    pub(crate) fn has_identities(&self) -> bool {
        !self.identities.is_empty()
    }

    pub(crate) fn metrics_open(&self) -> bool {
        self.is_open() || !self.metrics_auth
    }

    /// The identity whose token this is; every identity is compared (constant time).
    fn identity_of(&self, presented: &str) -> Option<&ApiIdentity> {
        let d = digest(&[presented.as_bytes()]);
        let mut found = None;
        for identity in &self.identities {
            if same(&identity.token_sha256, &d) {
                found = Some(identity);
            }
        }
        found
    }

    /// The credentials of a request from `peer`. Every credential is checked, and a
    /// right one is accepted whatever the throttle says. A wrong token or a cookie we
    /// never signed counts against the address's throttle, and once it is spent gets 429
    /// instead of 401. A request without any, or with a session that merely expired or
    /// was logged out, is not a guess.
    pub(crate) fn check(
        &mut self,
        req: &Request,
        peer: IpAddr,
        now: Instant,
    ) -> Result<Identity, Denied> {
        if self.is_open() {
            return Ok(Identity {
                name: OPEN_NAME.into(),
                role: ApiRole::Admin,
                via: Principal::Open,
            });
        }
        if self.identities.is_empty() {
            return Err(Denied::Unauthorized(
                "no API token is configured: set saltpeter_config.api_tokens or api_token \
                 (or api_auth: none on a loopback address behind an authenticating proxy)"
                    .into(),
            ));
        }
        let bearer = req.header("authorization");
        let session = cookie(req, COOKIE);
        if bearer.is_none() && session.is_none() {
            return Err(Denied::Unauthorized(
                "authentication required: `Authorization: Bearer <token>` or log in".into(),
            ));
        }
        match self.credentials(bearer, session) {
            Ok(identity) => Ok(identity),
            Err(Guess::Counted(denied)) => Err(self.wrong(denied, peer, now)),
            Err(Guess::Stale(denied)) => Err(denied),
        }
    }

    /// A wrong credential from `peer`: counted while the throttle allows, 429 past it.
    ///
    /// Letting the right credential through a spent throttle does not help a guesser:
    /// a token is compared as a SHA-256 digest and a cookie as an HMAC, in constant time,
    /// so the only thing an answer tells is whether that guess was right, which a
    /// high-entropy token (`openssl rand -hex 32`) makes hopeless at any rate. What the
    /// throttle still does is answer wrong guesses 429 (so a guessing client is told to
    /// stop) and keep them from costing more than a counter.
    fn wrong(&mut self, denied: Denied, peer: IpAddr, now: Instant) -> Denied {
        if self.throttle.allows(peer, now) {
            self.throttle.failed(peer, now);
            denied
        } else {
            too_many()
        }
    }

    /// Who the credentials name.
    fn credentials(&self, bearer: Option<&str>, session: Option<&str>) -> Result<Identity, Guess> {
        if let Some(value) = bearer {
            let presented = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "));
            return match presented.map(|t| self.identity_of(t.trim())) {
                Some(Some(id)) => Ok(Identity {
                    name: id.name.clone(),
                    role: id.role,
                    via: Principal::Bearer,
                }),
                Some(None) => Err(Guess::Counted(Denied::Unauthorized("wrong token".into()))),
                None => Err(Guess::Counted(Denied::Unauthorized(
                    "the Authorization header must be `Bearer <token>`".into(),
                ))),
            };
        }
        let value = session.unwrap_or("");
        if !self.sessions.is_signed(value) {
            return Err(Guess::Counted(Denied::Unauthorized(
                "not a session of this server; log in again".into(),
            )));
        }
        self.session_identity(value).ok_or_else(|| {
            Guess::Stale(Denied::Unauthorized(
                "the session has expired; log in again".into(),
            ))
        })
    }

    /// Who a live session is now: the role is today's role of the name, so a changed or
    /// removed identity counts, and an expired or logged-out session is no one.
    fn session_identity(&self, value: &str) -> Option<Identity> {
        let s = self.sessions.find(value)?;
        let role = self.identities.iter().find(|i| i.name == s.name)?.role;
        Some(Identity {
            name: s.name,
            role,
            via: Principal::Cookie,
        })
    }

    /// A `/ws` opened with session `cookie` asks main for something: the session must
    /// still be live (not logged out or expired) and its identity's role is today's.
    /// Bearer and open connections keep what their handshake proved.
    pub(crate) fn recheck(&self, who: &Identity, cookie: Option<&str>) -> Result<Identity, Denied> {
        match who.via {
            Principal::Cookie => cookie
                .and_then(|value| self.session_identity(value))
                .ok_or_else(|| Denied::Unauthorized("the session has ended; log in again".into())),
            Principal::Bearer | Principal::Open => Ok(who.clone()),
        }
    }

    /// With `api_auth: none`, every request (reads, the dashboard's files and `/metrics`
    /// too) must name a loopback host: a page that rebinds its own DNS name to 127.0.0.1
    /// would otherwise read configurations and output through the operator's browser.
    pub(crate) fn check_host(&self, req: &Request) -> Result<(), Denied> {
        match self.is_open() {
            true => loopback_host(req),
            false => Ok(()),
        }
    }

    /// A state change (POST, PUT, DELETE) by a browser session must be same-origin; with
    /// `api_auth: none` it must also name a loopback host.
    pub(crate) fn check_state_change(&self, req: &Request, who: &Identity) -> Result<(), Denied> {
        match who.via {
            Principal::Bearer => Ok(()),
            Principal::Cookie => {
                if req.header(CSRF_HEADER) != Some("1") {
                    return Err(Denied::Forbidden(format!(
                        "a browser session must send `{CSRF_HEADER}: 1` with changes"
                    )));
                }
                same_origin(req)
            }
            Principal::Open => {
                loopback_host(req)?;
                same_origin(req)
            }
        }
    }

    /// A `/ws` handshake with the session cookie (or unauthenticated) must come from
    /// this origin.
    pub(crate) fn check_ws(&self, req: &Request, who: &Identity) -> Result<(), Denied> {
        match who.via {
            Principal::Cookie => same_origin(req),
            Principal::Open => {
                loopback_host(req)?;
                same_origin(req)
            }
            Principal::Bearer => Ok(()),
        }
    }

    /// `POST /api/v1/login` from `peer`: the `Set-Cookie` value for a good token.
    pub(crate) fn login(
        &mut self,
        presented: &str,
        peer: IpAddr,
        now: Instant,
    ) -> Result<String, Denied> {
        if self.is_open() {
            return Ok(format!("{COOKIE}=open; Path=/; HttpOnly; SameSite=Strict"));
        }
        let Some(id) = self.identity_of(presented).cloned() else {
            let denied = Denied::Unauthorized("wrong token".into());
            return Err(self.wrong(denied, peer, now));
        };
        let value = self.sessions.create(&id.name);
        let secure = if self.secure { "; Secure" } else { "" };
        Ok(format!(
            "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            SESSION_TTL.as_secs()
        ))
    }

    /// `POST /api/v1/logout`: forget the session (if any) and clear the cookie.
    pub(crate) fn logout(&mut self, req: &Request) -> String {
        if let Some(value) = cookie(req, COOKIE) {
            self.sessions.revoke(value);
        }
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
    }
}

/// A refused credential: a guess counts against the address; a session we signed that
/// expired or was logged out does not (the dashboard presents it once more, innocently).
enum Guess {
    Counted(Denied),
    Stale(Denied),
}

fn too_many() -> Denied {
    Denied::TooMany("too many wrong credentials from this address; wait a minute".into())
}

/// The session cookie a request carries.
pub(crate) fn session_cookie(req: &Request) -> Option<&str> {
    cookie(req, COOKIE)
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
            "cross-origin request from {} refused",
            crate::roles::hub::logsafe::clip(origin, 100)
        )))
    }
}

/// `api_auth: none`: the `Host` must be a loopback name, so a DNS name rebound to
/// 127.0.0.1 by a web page does not pass for this server.
fn loopback_host(req: &Request) -> Result<(), Denied> {
    let host = req.header("host").unwrap_or("");
    let bare = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    if crate::supervisor::startup::is_loopback(bare) {
        Ok(())
    } else {
        Err(Denied::Forbidden(format!(
            "api_auth is none: requests must name a loopback host, not {}",
            crate::roles::hub::logsafe::clip(host, 100)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
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
        let sp = SaltpeterConfig {
            api_auth: mode,
            api_token: token.map(Secret::new),
            api_tokens: vec![ApiIdentity {
                name: "viewer1".into(),
                role: ApiRole::Viewer,
                token_sha256: digest(&[b"v-token"]),
            }],
            ..SaltpeterConfig::default()
        };
        Auth::from_config(&sp, true, Sessions::ephemeral())
    }

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn bearer_names_the_identity_and_cookies_are_sessions() {
        let now = Instant::now();
        let mut a = auth(Some("s3cret"), ApiAuth::Token);
        let ok = req("GET / HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n");
        let who = a.check(&ok, PEER, Instant::now()).unwrap();
        assert_eq!((who.name.as_str(), who.role), ("api_token", ApiRole::Admin));
        let v = req("GET / HTTP/1.1\r\nAuthorization: Bearer v-token\r\n\r\n");
        assert_eq!(
            a.check(&v, PEER, Instant::now()).unwrap().role,
            ApiRole::Viewer
        );
        let bad = req("GET / HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n");
        assert_eq!(
            a.check(&bad, PEER, Instant::now()).unwrap_err().status(),
            401
        );
        let none = req("GET / HTTP/1.1\r\n\r\n");
        assert_eq!(
            a.check(&none, PEER, Instant::now()).unwrap_err().status(),
            401
        );

        let set = a.login("v-token", PEER, now).unwrap();
        assert!(!set.contains("v-token"), "the cookie never holds the token");
        for attr in ["HttpOnly", "SameSite=Strict", "Secure", "Max-Age="] {
            assert!(set.contains(attr), "{set}");
        }
        let value = set.split(';').next().unwrap();
        let with_cookie = req(&format!("GET / HTTP/1.1\r\nCookie: a=b; {value}\r\n\r\n"));
        let who = a.check(&with_cookie, PEER, Instant::now()).unwrap();
        assert_eq!((who.name.as_str(), who.via), ("viewer1", Principal::Cookie));
        let again = a.login("v-token", PEER, now).unwrap();
        assert_ne!(again, set, "a new session per login");
        a.logout(&with_cookie);
        assert!(
            a.check(&with_cookie, PEER, Instant::now()).is_err(),
            "logout revokes"
        );
        assert!(a.login("wrong", PEER, now).is_err());
    }

    #[test]
    fn failed_logins_are_throttled() {
        let now = Instant::now();
        let mut a = auth(Some("s3cret"), ApiAuth::Token);
        for _ in 0..crate::roles::hub::state::sessions::MAX_FAILURES {
            assert_eq!(a.login("wrong", PEER, now).unwrap_err().status(), 401);
        }
        assert_eq!(a.login("wrong", PEER, now).unwrap_err().status(), 429);
        // The right token is never held back.
        assert!(a.login("s3cret", PEER, now).is_ok());
        let other: IpAddr = "10.1.1.1".parse().unwrap();
        assert_eq!(a.login("wrong", other, now).unwrap_err().status(), 401);
    }

    #[test]
    fn bearer_and_cookie_guesses_count_with_logins() {
        let now = Instant::now();
        let mut a = auth(Some("s3cret"), ApiAuth::Token);
        let good = req("GET / HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n");
        let forged = req("GET / HTTP/1.1\r\nCookie: sp_session=v1:9:0:admin:00\r\n\r\n");
        let bad = req("GET / HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n");
        for _ in 0..2 {
            assert_eq!(a.check(&forged, PEER, now).unwrap_err().status(), 401);
        }
        assert_eq!(a.login("wrong", PEER, now).unwrap_err().status(), 401);
        for _ in 0..2 {
            assert_eq!(a.check(&bad, PEER, now).unwrap_err().status(), 401);
        }
        // Past the throttle every wrong credential waits, whatever the door...
        assert_eq!(a.check(&bad, PEER, now).unwrap_err().status(), 429);
        assert_eq!(a.check(&forged, PEER, now).unwrap_err().status(), 429);
        assert_eq!(a.login("wrong", PEER, now).unwrap_err().status(), 429);
        // ...and every right one passes: the token, a login, the session it made.
        assert!(a.check(&good, PEER, now).is_ok());
        let set = a.login("s3cret", PEER, now).unwrap();
        let value = set.split(';').next().unwrap().to_string();
        let session = req(&format!("GET / HTTP/1.1\r\nCookie: {value}\r\n\r\n"));
        assert_eq!(a.check(&session, PEER, now).unwrap().name, "api_token");
        let other: IpAddr = "10.1.1.1".parse().unwrap();
        assert_eq!(a.check(&bad, other, now).unwrap_err().status(), 401);
        let later = now + crate::roles::hub::state::sessions::WINDOW;
        assert_eq!(a.check(&bad, PEER, later).unwrap_err().status(), 401);
        // A session we signed that was logged out is not a guess.
        let set = a.login("s3cret", other, now).unwrap();
        let value = set.split(';').next().unwrap().to_string();
        let stale = req(&format!("GET / HTTP/1.1\r\nCookie: {value}\r\n\r\n"));
        a.logout(&stale);
        for _ in 0..10 {
            assert_eq!(a.check(&stale, other, now).unwrap_err().status(), 401);
        }
    }

    #[test]
    fn cookie_changes_need_the_csrf_header_and_the_same_origin() {
        let now = Instant::now();
        let mut a = auth(Some("t"), ApiAuth::Token);
        let set = a.login("t", PEER, now).unwrap();
        let value = set.split(';').next().unwrap().to_string();
        let who = a
            .check(
                &req(&format!("GET / HTTP/1.1\r\nCookie: {value}\r\n\r\n")),
                PEER,
                now,
            )
            .unwrap();
        let plain = req("POST / HTTP/1.1\r\nHost: h:1\r\n\r\n");
        assert_eq!(
            a.check_state_change(&plain, &who).unwrap_err().status(),
            403
        );
        let good = req(
            "POST / HTTP/1.1\r\nHost: h:1\r\nX-Saltpeter-Csrf: 1\r\nOrigin: http://h:1\r\n\r\n",
        );
        assert!(a.check_state_change(&good, &who).is_ok());
        let cross = req(
            "POST / HTTP/1.1\r\nHost: h:1\r\nX-Saltpeter-Csrf: 1\r\nOrigin: http://evil\r\n\r\n",
        );
        assert!(a.check_state_change(&cross, &who).is_err());
        assert!(a.check_ws(&cross, &who).is_err());
    }

    #[test]
    fn open_mode_still_checks_origin_and_host() {
        let mut open = auth(None, ApiAuth::None);
        let r = req("POST / HTTP/1.1\r\nHost: 127.0.0.1:8888\r\n\r\n");
        let who = open.check(&r, PEER, Instant::now()).unwrap();
        assert_eq!(who.via, Principal::Open);
        assert!(open.check_state_change(&r, &who).is_ok());
        let cross =
            req("POST / HTTP/1.1\r\nHost: 127.0.0.1:8888\r\nOrigin: http://evil.example\r\n\r\n");
        assert_eq!(
            open.check_state_change(&cross, &who).unwrap_err().status(),
            403
        );
        let rebound = req("POST / HTTP/1.1\r\nHost: evil.example:8888\r\n\r\n");
        assert!(open.check_state_change(&rebound, &who).is_err());
        assert!(open.check_ws(&rebound, &who).is_err());
        let v6 = req("GET /ws HTTP/1.1\r\nHost: [::1]:8888\r\nOrigin: http://[::1]:8888\r\n\r\n");
        assert!(open.check_ws(&v6, &who).is_ok());
        assert!(open.metrics_open());
    }

    #[test]
    fn no_token_configured_refuses() {
        let sp = SaltpeterConfig::default();
        let mut a = Auth::from_config(&sp, false, Sessions::ephemeral());
        let r = req("GET / HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\n");
        let err = a.check(&r, PEER, Instant::now()).unwrap_err();
        assert!(err.message().contains("api_tokens"), "{err:?}");
    }
}
