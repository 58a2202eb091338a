//! TLS to PostgreSQL: what `database_url` (its `sslmode` and `sslrootcert`),
//! `database_ca_file` and `database_plaintext_ok` ask for, as one [`DatabaseTls`]. Pure
//! logic, shared by the configuration (checked when it loads) and the `db` role (which
//! connects with it, `roles::db::pg::tls`).
//!
//! Outline of [`resolve`]:
//! 1. The URL's query is split: `sslmode` and `sslrootcert` are taken out (the
//!    `postgres` crate knows neither `verify-ca`, `verify-full` nor `sslrootcert`); the
//!    rest goes to the driver unchanged, with `sslmode=require` whenever TLS is wanted
//!    (and `disable` when every host is a Unix socket, where libpq asks for no TLS).
//! 2. The CA: `database_ca_file`, or `sslrootcert=PATH` (the same file when both are
//!    given), or `sslrootcert=system` (the system's bundle). `verify-ca` and
//!    `verify-full` need one; `require` with one checks the chain, as libpq does.
//! 3. The rule: a mode that may send plain text (`disable`, and `prefer`, the default,
//!    which an attacker can talk down) is refused towards a host that is not local
//!    (Unix socket, `localhost`, 127.0.0.0/8, ::1) unless `database_plaintext_ok` says so.
//!
//! Messages never hold the URL: it may carry a password.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `sslmode`, as libpq reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode `{other}` is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ));
            }
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether the connection may end up in plain text.
    pub(crate) fn may_be_plain(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Prefer)
    }
}

/// Which certificates the server's must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CaSource {
    /// A PEM bundle (`database_ca_file` or `sslrootcert=PATH`).
    File(PathBuf),
    /// The system's CA bundle (`sslrootcert=system`).
    System,
}

impl CaSource {
    /// For messages: the file, or "the system's CA bundle".
    pub(crate) fn describe(&self) -> String {
        match self {
            CaSource::File(path) => path.display().to_string(),
            CaSource::System => "the system's CA bundle".to_string(),
        }
    }
}

/// What the server's certificate is checked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing: encrypted, but anyone in the path can pose as the server.
    Nothing,
    /// The chain to a CA, not the name (`verify-ca`, or `require` with a CA).
    Chain(CaSource),
    /// The chain and that the certificate names the host (`verify-full`).
    ChainAndName(CaSource),
}

/// The database connection's TLS, resolved from the URL and the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DatabaseTls {
    pub mode: SslMode,
    pub verify: Verify,
    /// The URL for the `postgres` crate: `sslmode`/`sslrootcert` replaced by what it
    /// understands. Holds the password, if any.
    pub driver_url: String,
}

/// Resolves `url` with `database_ca_file` (`ca_file`); checks the URL's syntax, not the
/// CA file's content ([`check`] does).
pub(crate) fn resolve(url: &str, ca_file: Option<&Path>) -> Result<DatabaseTls, String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut mode = SslMode::Prefer;
    let mut rootcert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => mode = SslMode::parse(&percent_decode(value)?)?,
            "sslrootcert" => rootcert = Some(percent_decode(value)?),
            _ => kept.push(pair),
        }
    }
    let from_url = match rootcert.as_deref() {
        None => None,
        Some("system") => Some(CaSource::System),
        Some(path) if Path::new(path).is_absolute() => Some(CaSource::File(PathBuf::from(path))),
        Some(path) => {
            return Err(format!(
                "sslrootcert `{path}` is not an absolute path (or `system`)"
            ));
        }
    };
    let ca = match (ca_file, from_url) {
        (Some(file), Some(CaSource::File(other))) if other != file => {
            return Err(format!(
                "database_ca_file ({}) and the URL's sslrootcert ({}) differ: give one",
                file.display(),
                other.display()
            ));
        }
        (Some(_), Some(CaSource::System)) => {
            return Err(
                "database_ca_file and the URL's sslrootcert=system differ: give one".to_string(),
            );
        }
        (Some(file), _) => Some(CaSource::File(file.to_path_buf())),
        (None, from_url) => from_url,
    };
    let verify = match (mode, ca) {
        (SslMode::VerifyFull, Some(ca)) => Verify::ChainAndName(ca),
        (SslMode::VerifyCa | SslMode::Require, Some(ca)) => Verify::Chain(ca),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={} needs the CA that signed the server's certificate: set \
                 database_ca_file (or sslrootcert=system in the URL for the system's bundle)",
                mode.name()
            ));
        }
        _ => Verify::Nothing,
    };
    let with_mode = |sslmode: &str| {
        let mut pairs = kept.clone();
        pairs.push(sslmode);
        format!("{base}?{}", pairs.join("&"))
    };
    // Over a Unix socket PostgreSQL offers no TLS, and libpq does not ask: neither do we.
    let sockets_only = connect_targets(&with_mode("sslmode=disable"))
        .is_ok_and(|targets| !targets.is_empty() && targets.iter().all(|t| t.starts_with('/')));
    let driver_url = with_mode(match mode {
        _ if sockets_only => "sslmode=disable",
        SslMode::Disable => "sslmode=disable",
        SslMode::Prefer => "sslmode=prefer",
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "sslmode=require",
    });
    Ok(DatabaseTls {
        mode,
        verify,
        driver_url,
    })
}

/// The hosts the driver would connect to: each `hostaddr` when given, else each `host`
/// (a Unix socket directory as its path). Parses the URL in full.
pub(crate) fn connect_targets(driver_url: &str) -> Result<Vec<String>, String> {
    let config = postgres::Config::from_str(driver_url)
        .map_err(|e| format!("is not a valid PostgreSQL URL: {}", with_causes(&e)))?;
    if !config.get_hostaddrs().is_empty() {
        return Ok(config
            .get_hostaddrs()
            .iter()
            .map(IpAddr::to_string)
            .collect());
    }
    Ok(config
        .get_hosts()
        .iter()
        .map(|host| match host {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect())
}

/// Whether a connection to `host` stays on this machine: a Unix socket directory,
/// `localhost`, 127.0.0.0/8 or ::1.
pub(crate) fn is_local_host(host: &str) -> bool {
    if host.starts_with('/') {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// The whole check of the database settings at load: the URL resolves, a plain-text
/// mode goes only to local hosts unless `plaintext_ok`, and the CA file is a readable
/// PEM bundle. `Err` is the message, without the URL.
pub(crate) fn check(url: &str, ca_file: Option<&Path>, plaintext_ok: bool) -> Result<(), String> {
    let tls = resolve(url, ca_file)?;
    let targets = connect_targets(&tls.driver_url)?;
    if tls.mode.may_be_plain()
        && !plaintext_ok
        && let Some(host) = targets.iter().find(|host| !is_local_host(host))
    {
        let why = match tls.mode {
            SslMode::Disable => "sslmode=disable".to_string(),
            _ => "sslmode=prefer, the default when the URL has none, falls back to plain text \
                  when the server, or anyone in the path, says so"
                .to_string(),
        };
        return Err(format!(
            "would reach the database host {host} in plain text ({why}): add \
             sslmode=verify-full to the URL and set database_ca_file, or set \
             database_plaintext_ok: true to accept plain text on this network"
        ));
    }
    if let Verify::Chain(CaSource::File(path)) | Verify::ChainAndName(CaSource::File(path)) =
        &tls.verify
    {
        crate::tls::verify::read_ca_file(path).map_err(|e| format!("database_ca_file: {e}"))?;
    }
    Ok(())
}

/// `error: cause: cause…` (the driver's parse errors name the option in their cause;
/// none of them repeats a value).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(&format!(": {e}"));
        cause = e.source();
    }
    text
}

/// `%XX` escapes decoded (a URL's query value); anything else kept as it is.
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a `%` in the URL is not followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a URL parameter is not UTF-8".to_string())
}

#[cfg(test)]
#[path = "database_tests.rs"]
mod tests;
