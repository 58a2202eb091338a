//! What a reader of the delivery list sees of a webhook's or export's URL.
//!
//! A webhook URL's path often is its secret (Slack, Teams, Discord put the credential
//! there). Admins (the admin socket, admin API identities) see it whole; anyone else
//! sees the scheme and host only, in the destination and wherever the URL is repeated
//! (the de-duplication key, the last error).

use crate::config::{ApiAuth, ApiRole};
use crate::roles::main::state::Main;
use crate::wire::notify::DeliveryRecord;

/// Whether the request being handled comes from an admin: the admin socket (root, the
/// daemon's user, `admin_group`), an `admin` API identity, or `api_auth: none` (loopback
/// only, everyone is admin there).
pub(crate) fn reader_is_admin(core: &Main) -> bool {
    let Some(who) = core.actor.name.as_deref() else {
        return true;
    };
    let sp = &core.config.saltpeter;
    let Some(name) = who.strip_prefix("api:") else {
        return false;
    };
    if sp.api_auth == ApiAuth::None {
        return true;
    }
    if name == "api_token" {
        return sp.api_token.is_some();
    }
    sp.api_tokens
        .iter()
        .any(|i| i.name == name && i.role == ApiRole::Admin)
}

/// `url` cut to its scheme and host (with port): `https://hooks.example.org/…`.
pub(crate) fn url_origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "…".to_string();
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    // A `user:password@` part is refused by the configuration; never shown anyway.
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host_end < rest.len() {
        format!("{scheme}://{host}/…")
    } else {
        format!("{scheme}://{host}")
    }
}

/// The record as a non-admin sees it.
pub(crate) fn redacted(mut d: DeliveryRecord) -> DeliveryRecord {
    if !d.destination.contains("://") {
        return d;
    }
    let shown = url_origin(&d.destination);
    d.key = d.key.replace(&d.destination, &shown);
    d.last_error = d.last_error.map(|e| e.replace(&d.destination, &shown));
    d.destination = shown;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_scheme_and_host_only() {
        assert_eq!(
            url_origin("https://hooks.slack.com/services/T0/B0/secret?x=1"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(url_origin("http://10.0.0.1:8080"), "http://10.0.0.1:8080");
        assert_eq!(url_origin("https://u:p@h.example/x"), "https://h.example/…");
        assert_eq!(url_origin("not a url"), "…");
    }

    #[test]
    fn a_record_hides_the_path_everywhere() {
        let url = "https://hooks.example/T/secret-path";
        let d = DeliveryRecord {
            id: 1,
            key: format!("run:7:webhook:{url}"),
            job: None,
            run: None,
            event: "failure".into(),
            channel: "webhook".into(),
            destination: url.into(),
            state: crate::wire::notify::DeliveryState::Failed,
            attempts: 1,
            created: 0,
            next_attempt: None,
            last_error: Some(format!("POST {url}: 500")),
            delivered: None,
        };
        let shown = redacted(d);
        let text = format!("{shown:?}");
        assert!(!text.contains("secret-path"), "{text}");
        assert_eq!(shown.destination, "https://hooks.example/…");
    }
}
