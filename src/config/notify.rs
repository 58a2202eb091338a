//! The `notify` rules (per job and as `saltpeter_config.notify`, the same shape) and the
//! mail settings they use.
//!
//! ```yaml
//! notify:
//!   - on: [failure, recovery]
//!     webhook: http://hooks.example.com/saltpeter
//!     secret: 'shared-hmac-key'      # X-Saltpeter-Signature: sha256=<hex hmac of body>
//!     format: slack                  # only {"text": ...}; default: the full JSON
//!   - on: [failure, lost]
//!     email: [ops@example.com]
//! ```
//!
//! Every problem is reported at its own line, so a typo in a URL or an address is found
//! by `saltpeterctl config check`, not at 3 a.m. when the first notification is due.

use super::types::Secret;
use super::values;
use super::yaml::{Node, NodeKind, Pos};
use serde::{Deserialize, Serialize};

/// TLS with the SMTP server (`saltpeter_config.smtp_tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SmtpTls {
    /// STARTTLS when the server offers it; plain otherwise (then no password is sent).
    #[default]
    Auto,
    /// STARTTLS required: a server that does not offer it is a failed attempt.
    Starttls,
    /// TLS from the first byte (port 465, "SMTPS").
    Implicit,
    /// Never TLS (then no password is sent).
    None,
}

/// When a rule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotifyOn {
    /// The run ended failed or partial.
    Failure,
    /// The first success after a failed or partial run.
    Recovery,
    /// A slot was not run because the daemon reached it too late.
    Missed,
    /// A target's wrapper went silent (253).
    Lost,
    /// A slot or run was skipped (overlap, maintenance, no target).
    Skipped,
    /// Every run's end and every skip.
    Always,
}

impl NotifyOn {
    pub const ALL: [NotifyOn; 6] = [
        NotifyOn::Failure,
        NotifyOn::Recovery,
        NotifyOn::Missed,
        NotifyOn::Lost,
        NotifyOn::Skipped,
        NotifyOn::Always,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyOn::Failure => "failure",
            NotifyOn::Recovery => "recovery",
            NotifyOn::Missed => "missed",
            NotifyOn::Lost => "lost",
            NotifyOn::Skipped => "skipped",
            NotifyOn::Always => "always",
        }
    }

    pub fn parse(text: &str) -> Option<NotifyOn> {
        NotifyOn::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

/// Where a rule sends. `Debug` shows a webhook's URL as [`url_shown`] does.
#[derive(Clone, PartialEq, Eq)]
pub enum Channel {
    Webhook {
        url: String,
        /// The HMAC-SHA256 key of `X-Saltpeter-Signature`.
        secret: Option<Secret>,
        /// Send only `{"text": ...}` (Slack's incoming webhooks).
        slack: bool,
    },
    Email {
        to: Vec<String>,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channel::Webhook { url, secret, slack } => f
                .debug_struct("Webhook")
                .field("url", &url_shown(url))
                .field("secret", secret)
                .field("slack", slack)
                .finish(),
            Channel::Email { to } => f.debug_struct("Email").field("to", to).finish(),
        }
    }
}

/// One `notify` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyRule {
    pub on: Vec<NotifyOn>,
    pub channel: Channel,
    /// Line of the entry (shown with deliveries and in messages).
    pub line: usize,
}

impl NotifyRule {
    /// The rule for the API and UI: the secret is shown as `***`, the webhook as
    /// [`url_shown`] (its path is often a credential).
    pub fn redacted_json(&self) -> serde_json::Value {
        let on: Vec<&str> = self.on.iter().map(|o| o.as_str()).collect();
        match &self.channel {
            Channel::Webhook { url, secret, slack } => serde_json::json!({
                "on": on,
                "webhook": url_shown(url),
                "secret": secret.as_ref().map(|_| "***"),
                "format": if *slack { "slack" } else { "json" },
                "line": self.line,
            }),
            Channel::Email { to } => serde_json::json!({
                "on": on,
                "email": to,
                "line": self.line,
            }),
        }
    }
}

const RULE_KEYS: &[&str] = &["on", "webhook", "secret", "format", "email"];

/// Reads a `notify` list (or a single mapping); problems go to `errors` with their
/// position, and a rule with a problem is left out.
pub(crate) fn read_rules(node: &Node, errors: &mut Vec<(Pos, String)>) -> Vec<NotifyRule> {
    let items: Vec<&Node> = match &node.kind {
        NodeKind::Seq(items) => items.iter().collect(),
        NodeKind::Map(_) => vec![node],
        NodeKind::Scalar { .. } if node.is_null() => Vec::new(),
        NodeKind::Scalar { .. } => {
            errors.push((
                node.pos,
                format!(
                    "`notify` must be a list of rules (on, webhook or email), found {}",
                    node.describe()
                ),
            ));
            return Vec::new();
        }
    };
    items
        .into_iter()
        .filter_map(|item| read_rule(item, errors))
        .collect()
}

fn read_rule(node: &Node, errors: &mut Vec<(Pos, String)>) -> Option<NotifyRule> {
    let NodeKind::Map(pairs) = &node.kind else {
        errors.push((
            node.pos,
            format!(
                "a `notify` rule must be a mapping (on, webhook or email), found {}",
                node.describe()
            ),
        ));
        return None;
    };
    let before = errors.len();
    let mut on = vec![NotifyOn::Failure];
    let mut webhook: Option<(Pos, String)> = None;
    let mut email: Option<Vec<String>> = None;
    let mut secret = None;
    let mut slack = false;
    for (key, value) in pairs {
        let name = key.scalar().unwrap_or_default();
        let mut fail = |m: String| errors.push((value.pos, m));
        match name {
            "on" => match values::string_list(value) {
                Ok(words) if words.is_empty() => fail("`on` names no event".to_string()),
                Ok(words) => {
                    let mut parsed = Vec::new();
                    for w in words {
                        match NotifyOn::parse(&w) {
                            Some(o) => parsed.push(o),
                            None => fail(format!(
                                "`on`: `{w}` is not one of: failure, recovery, missed, lost, skipped, always"
                            )),
                        }
                    }
                    on = parsed;
                }
                Err(m) => fail(format!("`on`: {m}")),
            },
            "webhook" => match values::non_empty_string(value).and_then(|u| check_url(u.trim())) {
                Ok(url) => webhook = Some((value.pos, url)),
                Err(m) => fail(format!("`webhook`: {m}")),
            },
            "secret" => match values::string(value) {
                Ok(s) if !s.is_empty() => secret = Some(Secret::new(s)),
                Ok(_) => fail("`secret` is empty".to_string()),
                Err(m) => fail(format!("`secret`: {m}")),
            },
            "format" => match values::string(value).as_deref().map(str::trim) {
                Ok("json") => slack = false,
                Ok("slack") => slack = true,
                Ok(other) => fail(format!("`format`: `{other}` is not one of: json, slack")),
                Err(m) => fail(format!("`format`: {m}")),
            },
            "email" => match values::string_list(value) {
                Ok(list) if list.is_empty() => fail("`email` names no address".to_string()),
                Ok(list) => {
                    let bad: Vec<String> =
                        list.iter().filter_map(|a| check_address(a).err()).collect();
                    match bad.first() {
                        Some(m) => fail(format!("`email`: {m}")),
                        None => email = Some(list),
                    }
                }
                Err(m) => fail(format!("`email`: {m}")),
            },
            _ => errors.push((
                key.pos,
                values::unknown_key_message("notify key", name, RULE_KEYS),
            )),
        }
    }
    let channel = match (webhook, email) {
        (Some(_), Some(_)) => {
            errors.push((
                node.pos,
                "a `notify` rule has either `webhook` or `email`, not both; write two rules"
                    .to_string(),
            ));
            return None;
        }
        (Some((_, url)), None) => Channel::Webhook { url, secret, slack },
        (None, Some(to)) => {
            if secret.is_some() || slack {
                errors.push((
                    node.pos,
                    "`secret` and `format` belong to a `webhook` rule".to_string(),
                ));
            }
            Channel::Email { to }
        }
        (None, None) => {
            if errors.len() == before {
                errors.push((
                    node.pos,
                    "a `notify` rule needs `webhook: URL` or `email: ADDRESS`".to_string(),
                ));
            }
            return None;
        }
    };
    (errors.len() == before).then_some(NotifyRule {
        on,
        channel,
        line: node.pos.line,
    })
}

/// An `http://` or `https://` URL with a host, an optional port and no credentials. The
/// messages show it as [`url_shown`]: the path of a webhook is often its credential,
/// and they are logged and printed (the line says which one).
pub(crate) fn check_url(url: &str) -> Result<String, String> {
    let shown = url_shown(url);
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the URL `{shown}` contains a space or a control character"
        ));
    }
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!("`{shown}` is not an http:// or https:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!(
            "the URL `{shown}` carries credentials; use `secret` (signature) instead"
        ));
    }
    split_authority(authority, 80).map_err(|m| format!("`{shown}`: {m}"))?;
    Ok(url.to_string())
}

/// What the log, events, the API and terminals show of a webhook's or an export's URL:
/// its scheme, host and port, and `/…` for whatever followed (path, query, fragment),
/// which for Slack, Teams or Discord hooks is the credential; never a `user:password@`.
/// `https://hooks.slack.com/services/T0/B0/XYZ` is `https://hooks.slack.com/…`. The
/// result is escaped (`logsafe`), so it also holds no control character.
pub(crate) fn url_shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "…".to_string();
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let shown = if host_end < rest.len() {
        format!("{scheme}://{host}/…")
    } else {
        format!("{scheme}://{host}")
    };
    crate::logsafe::clip(&shown, 300)
}

/// `host[:port]` of a URL or a server address (`default_port` when absent).
pub(crate) fn split_authority(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, rest) = v6
            .split_once(']')
            .ok_or_else(|| "an IPv6 host needs its closing `]`".to_string())?;
        (host.to_string(), rest.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err("no host".to_string());
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("port `{p}` is not a number from 1 to 65535"))?,
        None => default_port,
    };
    Ok((host, port))
}

/// A plain `local@domain` address: no display name, spaces, brackets or line breaks (it
/// goes into an SMTP command and a header).
pub(crate) fn check_address(address: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("`{address}` is not a mail address ({why})"));
    if address
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "<>,;\"()[]\\".contains(c))
    {
        return bad("spaces, brackets, quotes and separators are not allowed");
    }
    match address.split_once('@') {
        Some((local, domain))
            if !local.is_empty()
                && !domain.is_empty()
                && !domain.contains('@')
                && !domain.starts_with('.')
                && !domain.ends_with('.') =>
        {
            Ok(())
        }
        _ => bad("expected local@domain"),
    }
}

/// `saltpeter_config.smtp`: `host[:port]`; without a port, 465 with `smtp_tls: tls`,
/// else 25 (decided when a mail is sent, see [`smtp_port`]).
pub(crate) fn read_smtp(node: &Node) -> Result<Option<(String, Option<u16>)>, String> {
    let Some(text) = values::optional_string(node)? else {
        return Ok(None);
    };
    let text = text.trim();
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{text}` contains a space or a control character"));
    }
    if text.contains("://") || text.contains('@') || text.contains('/') {
        return Err(format!(
            "`{text}`: give host or host:port (TLS is `smtp_tls`, the login `smtp_user` and `smtp_password`)"
        ));
    }
    let (host, port) = split_authority(text, 0)?;
    Ok(Some((host, (port != 0).then_some(port))))
}

/// The SMTP port: the one given, else 465 for implicit TLS, else 25.
pub(crate) fn smtp_port(given: Option<u16>, tls: SmtpTls) -> u16 {
    given.unwrap_or(if tls == SmtpTls::Implicit { 465 } else { 25 })
}

/// `saltpeter_config.smtp_tls`: `auto`, `starttls`, `tls` or `none`.
pub(crate) fn read_smtp_tls(node: &Node) -> Result<SmtpTls, String> {
    match values::string(node)?.trim() {
        "auto" => Ok(SmtpTls::Auto),
        "starttls" => Ok(SmtpTls::Starttls),
        "tls" => Ok(SmtpTls::Implicit),
        "none" => Ok(SmtpTls::None),
        other => Err(format!(
            "`{other}` is not one of: auto (STARTTLS when offered), starttls (required), tls (implicit, port 465), none"
        )),
    }
}

/// `saltpeter_config.notify_ca_file`: an absolute path to a readable PEM file holding at
/// least one certificate (read here, so a typo is an error at its line, not a failed
/// delivery at 3 a.m.).
pub(crate) fn read_ca_file(node: &Node) -> Result<Option<std::path::PathBuf>, String> {
    let Some(text) = values::optional_string(node)? else {
        return Ok(None);
    };
    let path = std::path::PathBuf::from(text.trim());
    if !path.is_absolute() {
        return Err(format!("`{}` is not an absolute path", path.display()));
    }
    crate::tls::verify::read_ca_file(&path)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml;

    fn rules(text: &str) -> (Vec<NotifyRule>, Vec<(Pos, String)>) {
        let node = yaml::parse(text).unwrap().unwrap();
        let mut errors = Vec::new();
        let rules = read_rules(&node, &mut errors);
        (rules, errors)
    }

    #[test]
    fn reads_the_documented_shape() {
        let (r, e) = rules(
            "- on: [failure, recovery]\n  webhook: http://hooks.example.com:8080/sp\n  secret: k\n- on: lost\n  email: ops@example.com\n",
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].on, vec![NotifyOn::Failure, NotifyOn::Recovery]);
        assert!(matches!(
            &r[0].channel,
            Channel::Webhook {
                secret: Some(_),
                slack: false,
                ..
            }
        ));
        assert_eq!(r[1].on, vec![NotifyOn::Lost]);
        assert_eq!(r[1].line, 4);
    }

    #[test]
    fn bad_input_is_reported_at_its_line() {
        let (r, e) = rules(
            "- on: [failure, sometimes]\n  webhook: ftp://x\n- email: 'not an address'\n- webhook: http://u:p@h/\n- on: failure\n- webhook: 'https://h:0/'\n- webhook: http://h:99999/\n",
        );
        assert!(r.is_empty());
        let lines: Vec<usize> = e.iter().map(|(p, _)| p.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 4, 5, 6, 7], "{e:?}");
        assert!(e[0].1.contains("sometimes"));
        assert!(e[5].1.contains("port"), "{e:?}");
        let (r, e) = rules("- webhook: https://hooks.slack.com/services/T0/B0/X\n");
        assert!(e.is_empty() && r.len() == 1, "{e:?}");
    }

    #[test]
    fn a_webhook_shows_its_scheme_and_host_only() {
        assert_eq!(
            url_shown("https://hooks.slack.com/services/T0/B0/secret?x=1"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(url_shown("http://10.0.0.1:8080"), "http://10.0.0.1:8080");
        assert_eq!(
            url_shown("http://[::1]:8080?token=x"),
            "http://[::1]:8080/…"
        );
        assert_eq!(url_shown("https://u:p@h.example/x"), "https://h.example/…");
        assert_eq!(url_shown("not a url"), "…");
        assert_eq!(
            url_shown("http://h\n1999 forged/x"),
            "http://h\\n1999 forged/…"
        );
        // Nor in the configuration's own errors, nor in `Debug`.
        let (_, e) = rules(
            "- webhook: 'https://hooks.slack.com/services/T0/B0/SECRET with space'\n\
             - webhook: 'ftp://h/SECRET'\n- webhook: 'https://user:SECRET@h/x'\n\
             - webhook: 'https://h:0/SECRET'\n",
        );
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e.iter().all(|(_, m)| !m.contains("SECRET")), "{e:?}");
        let (r, _) = rules("- webhook: https://h.example/T0/SECRET\n  secret: k\n");
        let shown = format!("{:?} {}", r[0], r[0].redacted_json());
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("https://h.example/…"), "{shown}");
    }

    #[test]
    fn addresses_and_smtp() {
        assert!(check_address("a@b.example").is_ok());
        for bad in ["a", "@b", "a@", "a b@c", "a@b@c", "<a@b>", "a@b\r\nRCPT"] {
            assert!(check_address(bad).is_err(), "{bad}");
        }
        let node = yaml::parse("mail.example:2525").unwrap().unwrap();
        assert_eq!(
            read_smtp(&node).unwrap(),
            Some(("mail.example".to_string(), Some(2525)))
        );
        let node = yaml::parse("mail.example").unwrap().unwrap();
        assert_eq!(
            read_smtp(&node).unwrap(),
            Some(("mail.example".to_string(), None))
        );
        assert_eq!(smtp_port(None, SmtpTls::Auto), 25);
        assert_eq!(smtp_port(None, SmtpTls::Implicit), 465);
        assert_eq!(smtp_port(Some(587), SmtpTls::Implicit), 587);
        for bad in [
            "smtp://mail.example",
            "u@mail.example",
            "mail.example:0",
            "mail:x",
        ] {
            let node = yaml::parse(&format!("'{bad}'")).unwrap().unwrap();
            assert!(read_smtp(&node).is_err(), "{bad}");
        }
        let node = yaml::parse("sometimes").unwrap().unwrap();
        assert!(read_smtp_tls(&node).unwrap_err().contains("starttls"));
    }
}
