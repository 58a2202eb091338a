//! What the wrapper is started with, validated before anything forks: the four `SP_*`
//! variables (docs/protocols.md, Wrapper <-> hub) and the hub URL they name.
//!
//! Also the loop's tunables ([`Options`]). Pure functions over plain inputs, so the rules (which URLs are accepted, where the
//! path is appended, what a bad run id looks like) are tested without a process.

use std::path::PathBuf;
use std::time::Duration;

use crate::wire::wrapper::{ENV_MACHINE, ENV_RUN, ENV_TOKEN, ENV_URL, WRAPPER_PATH};

use super::build::Build;
use super::error::WrapperError;
use super::files;
use super::launch::parse_runs;
use super::outbuf::Limits;
use super::patience::MAX_STAGE_GRACE;

/// Where the hub listens, split so the loop can open the TCP connection itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubUrl {
    /// Host name or address, without brackets for IPv6.
    pub host: String,
    pub port: u16,
    /// The full `ws://host:port/path` used for the WebSocket request.
    pub url: String,
}

/// How the wrapper proves which machine it runs on.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// A single-use launch token (local executor), kept in memory only.
    Token(String),
    /// Sign the hub's challenge with this Salt minion key (salt executor).
    MinionKey(PathBuf),
}

/// The validated start-up environment. The token lives only here (in memory).
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// The server the wrapper talks to now.
    pub hub: HubUrl,
    /// The other servers of `SP_URL` (several servers sharing one database, docs/ha.md):
    /// after each lost or refused connection the wrapper tries the next one.
    pub other_hubs: Vec<HubUrl>,
    pub run: u64,
    pub machine: String,
    pub credential: Credential,
    /// With no server contact at all for this long, kill the command and exit.
    pub give_up: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token must never reach a log line.
        f.debug_struct("Settings")
            .field("hub", &self.hub)
            .field("run", &self.run)
            .field("machine", &self.machine)
            .field("give_up", &self.give_up)
            .finish_non_exhaustive()
    }
}

/// Default give-up period: a day without hearing from the hub.
pub(crate) const DEFAULT_GIVE_UP: Duration = Duration::from_secs(24 * 3600);

/// A wrapper started through Salt: its minion id and key file, rendered by the minion
/// (`--minion-id`, `--minion-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minion {
    pub id: String,
    pub key: PathBuf,
}

/// Builds the [`Launch`] from a variable lookup (the process environment in production):
/// `SP_URL` and `SP_RUN` (one run or a list, `launch::parse_runs`), then either the
/// minion (Salt) or `SP_MACHINE` and the token.
pub(crate) fn settings_from_env(
    lookup: impl Fn(&str) -> Option<String>,
    give_up: Duration,
    minion: Option<Minion>,
) -> Result<Launch, WrapperError> {
    let get = |name: &'static str| match lookup(name) {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(WrapperError::MissingEnv(name)),
    };
    // Several servers: their URLs separated by commas, the launching one first.
    let mut hubs = get(ENV_URL)?
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(parse_hub_url)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter();
    let hub = hubs.next().ok_or(WrapperError::MissingEnv(ENV_URL))?;
    let other_hubs = hubs.collect();
    let runs = parse_runs(&get(ENV_RUN)?)?;
    let (machine, credential) = match minion {
        Some(Minion { id, key }) => (id, Credential::MinionKey(key)),
        None => (get(ENV_MACHINE)?, Credential::Token(get(ENV_TOKEN)?)),
    };
    if machine.is_empty() || machine.len() > 255 || machine.chars().any(char::is_control) {
        return Err(WrapperError::InvalidEnv {
            var: ENV_MACHINE,
            reason: "machine id is empty, longer than 255 bytes or holds control characters".into(),
        });
    }
    let first = runs
        .first()
        .copied()
        .ok_or(WrapperError::MissingEnv(ENV_RUN))?;
    let settings = Settings {
        hub,
        other_hubs,
        run: first,
        machine,
        credential,
        give_up,
    };
    Ok(Launch { settings, runs })
}

/// A validated launch command: the runs of `SP_RUN` (at least one, no duplicates) and the
/// settings they share; `settings.run` is the first.
#[derive(Debug)]
pub struct Launch {
    pub settings: Settings,
    pub runs: Vec<u64>,
}

impl Launch {
    /// The settings of one of its runs.
    pub fn for_run(&self, run: u64) -> Settings {
        Settings {
            run,
            ..self.settings.clone()
        }
    }
}

/// The launch token from the first line of `input` (`--token-stdin`), at most 4 KiB.
pub(crate) fn read_token(input: impl std::io::BufRead) -> Result<String, WrapperError> {
    use std::io::BufRead;
    let mut line = String::new();
    input
        .take(4096)
        .read_line(&mut line)
        .map_err(|e| WrapperError::InvalidEnv {
            var: "--token-stdin",
            reason: format!("cannot read the token from stdin: {e}"),
        })?;
    let token = line.trim().to_string();
    if token.is_empty() || token.chars().any(char::is_control) {
        return Err(WrapperError::InvalidEnv {
            var: "--token-stdin",
            reason: "no token on the first line of stdin".into(),
        });
    }
    Ok(token)
}

/// The launch token from its 0600 file (`SP_TOKEN_FILE`), which is deleted once read: the
/// token is then in this process's memory only.
pub(crate) fn take_token_file(path: &std::path::Path) -> Result<String, WrapperError> {
    use std::io::Read;
    let bad = |reason: String| WrapperError::InvalidEnv {
        var: crate::wire::wrapper::ENV_TOKEN_FILE,
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if let Err(e) = std::fs::remove_file(path) {
        log::warn!("could not delete token file {}: {e}", path.display());
    }
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(bad(format!("{} is empty", path.display())));
    }
    Ok(token)
}

/// Environment variable that sets the stage grace when `--stage-grace` is not given
/// (inherited from the daemon by local wrappers; tests use it to wait seconds, not
/// minutes).
pub(crate) const ENV_STAGE_GRACE: &str = "SP_STAGE_GRACE_S";

/// The stage grace from `--stage-grace` or else `SP_STAGE_GRACE_S`: whole seconds from 1
/// to 120 (the grace is at most two minutes), 120 when neither is given.
pub(crate) fn stage_grace(
    flag: Option<u64>,
    env: Option<String>,
) -> Result<Duration, WrapperError> {
    let max = MAX_STAGE_GRACE.as_secs();
    let secs = match (flag, env) {
        // clap has checked the flag's range already.
        (Some(secs), _) => secs.clamp(1, max),
        (None, Some(text)) => {
            let bad = |reason: String| WrapperError::InvalidEnv {
                var: ENV_STAGE_GRACE,
                reason,
            };
            let secs = text
                .trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("{text:?} is not a number of seconds")))?;
            if !(1..=max).contains(&secs) {
                return Err(bad(format!("{secs} s is outside 1 to {max} s")));
            }
            secs
        }
        (None, None) => max,
    };
    Ok(Duration::from_secs(secs))
}

/// Accepts `ws://host[:port][/path]` and `wss://host[:port][/path][#sha256=HEX]`; with
/// no path (or `/`) the wrapper path is appended. The fragment is the hub certificate's
/// fingerprint to pin (`crate::tls::verify`); it stays in `url` and is never sent.
pub fn parse_hub_url(text: &str) -> Result<HubUrl, WrapperError> {
    let bad = |reason: &str| WrapperError::InvalidEnv {
        var: ENV_URL,
        reason: format!("{text:?}: {reason}"),
    };
    let (text, pin) = match text.trim().split_once('#') {
        Some((url, pin)) => (url, Some(pin)),
        None => (text.trim(), None),
    };
    let (scheme, rest) = if let Some(rest) = strip_prefix_ci(text, "ws://") {
        ("ws", rest)
    } else if let Some(rest) = strip_prefix_ci(text, "wss://") {
        ("wss", rest)
    } else {
        return Err(bad("expected a ws:// or wss:// URL"));
    };
    let fragment = match pin {
        None => String::new(),
        Some(_) if scheme == "ws" => {
            return Err(bad("a certificate pin (#sha256=...) needs a wss:// URL"));
        }
        Some(pin) => match crate::tls::parse_pin(pin) {
            Some(digest) => format!("#sha256={}", crate::tls::hex(&digest)),
            None => return Err(bad("the fragment must be sha256= and 64 hex digits")),
        },
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(bad("user information in the URL is not supported"));
    }
    let (host, port_text) = if let Some(after) = authority.strip_prefix('[') {
        let end = after.find(']').ok_or_else(|| bad("unclosed '[' in host"))?;
        let port = after[end + 1..].strip_prefix(':');
        if port.is_none() && !after[end + 1..].is_empty() {
            return Err(bad("junk after ']' in host"));
        }
        (&after[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let port = match port_text {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("port is not a number from 1 to 65535"))?,
        None if scheme == "wss" => 443,
        None => 80,
    };
    let path = if path.is_empty() || path == "/" {
        WRAPPER_PATH.to_string()
    } else if path.starts_with('?') {
        format!("{WRAPPER_PATH}{path}")
    } else {
        path.to_string()
    };
    let host_part = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Ok(HubUrl {
        host: host.to_string(),
        port,
        url: format!("{scheme}://{host_part}:{port}{path}{fragment}"),
    })
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Reconnect delays: exponential from `base` to `max`, each scaled by a random factor in
/// [0.5, 1.5) so a fleet of wrappers does not reconnect in step after a hub restart.
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    base: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(super) fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            current: base,
        }
    }

    /// The next delay; `unit` is a random number in [0, 1).
    pub(super) fn next_delay(&mut self, unit: f64) -> Duration {
        let factor = 0.5 + unit.clamp(0.0, 1.0);
        let delay = self.current.mul_f64(factor);
        self.current = (self.current * 2).min(self.max);
        delay
    }

    /// The first delay (before jitter).
    pub(super) fn base(&self) -> Duration {
        self.base
    }

    /// After a successful `welcome` the next loss starts from the base delay again.
    pub(super) fn reset(&mut self) {
        self.current = self.base;
    }
}

/// Tunables; the defaults are the production values.
#[derive(Debug, Clone)]
pub struct Options {
    pub limits: Limits,
    /// Spool directory (default [`files::spool_dir`]); `None` inside means no spool.
    pub spool_dir: Option<PathBuf>,
    pub lock_dir: PathBuf,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long to wait for `welcome` after `hello`.
    pub hello_timeout: Duration,
    /// After the command exits, how long to keep reading pipes a background process
    /// still holds open.
    pub drain_grace: Duration,
    /// How long past its slot a wrapper that has not started its command waits for a
    /// lost server (`patience`; at most two minutes).
    pub stage_grace: Duration,
    /// What `hello` reports of this build (nothing unless `main` worked it out).
    pub build: Build,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            limits: Limits::default(),
            spool_dir: Some(files::spool_dir()),
            lock_dir: files::lock_dir(),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(30),
            drain_grace: Duration::from_secs(2),
            stage_grace: MAX_STAGE_GRACE,
            build: Build::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn url_gets_wrapper_path_when_it_has_none() {
        let u = parse_hub_url("ws://hub.example:8889").unwrap();
        assert_eq!(u.url, "ws://hub.example:8889/wrapper/v1");
        assert_eq!((u.host.as_str(), u.port), ("hub.example", 8889));
        assert_eq!(
            parse_hub_url("WS://h:1/").unwrap().url,
            "ws://h:1/wrapper/v1"
        );
        assert_eq!(
            parse_hub_url("ws://h:1/custom/path").unwrap().url,
            "ws://h:1/custom/path"
        );
        assert_eq!(parse_hub_url("ws://h").unwrap().port, 80);
        let v6 = parse_hub_url("ws://[::1]:9").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.url.as_str()),
            ("::1", "ws://[::1]:9/wrapper/v1")
        );
    }

    #[test]
    fn bad_urls_are_refused_with_a_reason() {
        for bad in [
            "http://h:1",
            "h:1",
            "ws://:1",
            "ws://h:0",
            "ws://h:x",
            "ws://u@h:1",
        ] {
            assert!(parse_hub_url(bad).is_err(), "{bad} accepted");
        }
        let err = parse_hub_url("ws://h:1#sha256=00").unwrap_err().to_string();
        assert!(err.contains("wss://"), "{err}");
        let err = parse_hub_url("wss://h:1#sha256=00")
            .unwrap_err()
            .to_string();
        assert!(err.contains("64 hex"), "{err}");
    }

    #[test]
    fn tls_urls_keep_their_pin() {
        let pin = "AB".repeat(32);
        let u = parse_hub_url(&format!("wss://h:9#sha256:{pin}")).unwrap();
        assert_eq!(
            u.url,
            format!("wss://h:9/wrapper/v1#sha256={}", pin.to_lowercase())
        );
        assert_eq!(parse_hub_url("wss://h").unwrap().port, 443);
    }

    #[test]
    fn env_is_validated_and_token_kept_out_of_debug() {
        let ok = env(&[
            ("SP_URL", "ws://127.0.0.1:8889"),
            ("SP_RUN", "42"),
            ("SP_MACHINE", "web1"),
            ("SP_TOKEN", "sekrit"),
        ]);
        let s = settings_from_env(ok, DEFAULT_GIVE_UP, None)
            .unwrap()
            .settings;
        assert_eq!((s.run, s.machine.as_str()), (42, "web1"));
        assert!(!format!("{s:?}").contains("sekrit"));

        let missing = env(&[("SP_URL", "ws://h:1"), ("SP_RUN", "1"), ("SP_MACHINE", "m")]);
        let err = settings_from_env(missing, DEFAULT_GIVE_UP, None).unwrap_err();
        assert!(err.to_string().contains("SP_TOKEN"), "{err}");

        let bad_run = env(&[
            ("SP_URL", "ws://h:1"),
            ("SP_RUN", "-3"),
            ("SP_MACHINE", "m"),
            ("SP_TOKEN", "t"),
        ]);
        let err = settings_from_env(bad_run, DEFAULT_GIVE_UP, None).unwrap_err();
        assert!(err.to_string().contains("SP_RUN"), "{err}");

        // Started through Salt: the minion id and key come from the command line, and
        // neither SP_MACHINE nor a token is needed.
        let salt = env(&[("SP_URL", "ws://h:1"), ("SP_RUN", "7")]);
        let minion = Minion {
            id: "minion-01".into(),
            key: "/etc/salt/pki/minion/minion.pem".into(),
        };
        let s = settings_from_env(salt, DEFAULT_GIVE_UP, Some(minion.clone()))
            .unwrap()
            .settings;
        assert_eq!(s.machine, "minion-01");
        assert!(matches!(s.credential, Credential::MinionKey(_)));

        // Several runs: the same settings for each.
        let several = env(&[("SP_URL", "ws://h:1"), ("SP_RUN", "7,9,7")]);
        let launch = settings_from_env(several, DEFAULT_GIVE_UP, Some(minion)).unwrap();
        assert_eq!(launch.runs, [7, 9]);
        let nine = launch.for_run(9);
        assert_eq!((nine.run, nine.machine.as_str()), (9, "minion-01"));
    }

    #[test]
    fn a_token_is_read_from_the_first_line_of_stdin() {
        assert_eq!(read_token(&b"abc123\nrest"[..]).unwrap(), "abc123");
        assert!(read_token(&b"\n"[..]).is_err(), "an empty line is no token");
        assert!(read_token(&b""[..]).is_err(), "nothing is no token");
        let long = vec![b'x'; 10_000];
        let t = read_token(&long[..]).unwrap();
        assert_eq!(t.len(), 4096, "read at most 4 KiB");
    }

    #[test]
    fn a_token_file_is_read_once_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.token");
        std::fs::write(&path, "abc123\n").unwrap();
        assert_eq!(take_token_file(&path).unwrap(), "abc123");
        assert!(!path.exists(), "the token file is deleted once read");
        let err = take_token_file(&path).unwrap_err();
        assert!(err.to_string().contains("SP_TOKEN_FILE"), "{err}");
        std::fs::write(&path, "").unwrap();
        assert!(take_token_file(&path).is_err(), "an empty file is no token");
    }

    #[test]
    fn sp_url_may_list_every_server() {
        let several = env(&[
            ("SP_URL", "ws://a:1, ws://b:2/,ws://c:3"),
            ("SP_RUN", "1"),
            ("SP_MACHINE", "m"),
            ("SP_TOKEN", "t"),
        ]);
        let s = settings_from_env(several, DEFAULT_GIVE_UP, None)
            .unwrap()
            .settings;
        assert_eq!(s.hub.url, "ws://a:1/wrapper/v1");
        let others: Vec<&str> = s.other_hubs.iter().map(|h| h.url.as_str()).collect();
        assert_eq!(others, ["ws://b:2/wrapper/v1", "ws://c:3/wrapper/v1"]);
        let bad = env(&[
            ("SP_URL", "ws://a:1,http://b"),
            ("SP_RUN", "1"),
            ("SP_MACHINE", "m"),
            ("SP_TOKEN", "t"),
        ]);
        assert!(settings_from_env(bad, DEFAULT_GIVE_UP, None).is_err());
    }

    #[test]
    fn stage_grace_comes_from_the_flag_then_the_environment_within_two_minutes() {
        assert_eq!(stage_grace(None, None).unwrap(), MAX_STAGE_GRACE);
        assert_eq!(stage_grace(Some(5), Some("9".into())).unwrap().as_secs(), 5);
        assert_eq!(stage_grace(None, Some(" 9 ".into())).unwrap().as_secs(), 9);
        assert_eq!(stage_grace(Some(500), None).unwrap(), MAX_STAGE_GRACE);
        let err = stage_grace(None, Some("x".into())).unwrap_err().to_string();
        assert!(
            err.contains("SP_STAGE_GRACE_S") && err.contains("\"x\""),
            "{err}"
        );
        let err = stage_grace(None, Some("600".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SP_STAGE_GRACE_S") && err.contains("120"),
            "{err}"
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(b.next_delay(0.5), Duration::from_millis(500));
        assert_eq!(b.next_delay(0.0), Duration::from_millis(500));
        assert_eq!(b.next_delay(0.999_999).as_millis(), 2999);
        for _ in 0..20 {
            b.next_delay(0.5);
        }
        assert_eq!(b.next_delay(0.5), Duration::from_secs(30));
        b.reset();
        assert_eq!(b.next_delay(0.5), Duration::from_millis(500));
    }
}
