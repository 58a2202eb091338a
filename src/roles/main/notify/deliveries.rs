//! `saltpeterctl deliveries`: the outbox as db lists it, and what a reader of the list
//! sees of a webhook's or export's URL.
//!
//! A webhook URL's path often is its secret (Slack, Teams, Discord put the credential
//! there). Admins (the admin socket, admin API identities) see it whole; anyone else
//! sees the scheme and host only, in the destination and wherever the URL is repeated
//! (the de-duplication key, the last error).

use crate::config::{ApiAuth, ApiRole, SaltpeterConfig};
use crate::ipc::CallId;
use crate::ipc::rpc::Call;
use crate::roles::main::messages::{DbResult, Message, Out, Then};
use crate::wire::admin::{AdminFailure, AdminResponse};
use crate::wire::db::{DbRequest, calls};
use crate::wire::notify::{DeliveryFilter, DeliveryRecord};

/// Messages listed when the request names no limit.
const DEFAULT_LIMIT: usize = 50;
/// Most messages listed at once.
const MAX_LIMIT: usize = 10_000;

/// `saltpeterctl deliveries` (admin call `call`), by a reader who is `admin` or not
/// ([`reader_is_admin`]).
pub(crate) fn list(call: CallId, mut filter: DeliveryFilter, admin: bool) -> Out {
    filter.limit = Some(filter.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT));
    let mut out = Out::new();
    out.db(
        DbRequest::ListDeliveries(filter),
        Then::tell(move |result| Message::DeliveriesListed {
            call,
            admin,
            result,
        }),
    );
    out
}

/// db listed the outbox for admin call `call`: its answer, URLs cut for a reader who is
/// not `admin`.
pub(crate) fn listed(call: CallId, admin: bool, result: DbResult) -> Out {
    let resp = match calls::ListDeliveries::take(result) {
        Ok(list) if admin => AdminResponse::Deliveries(list),
        Ok(list) => AdminResponse::Deliveries(list.into_iter().map(redacted).collect()),
        Err(e) => AdminResponse::Failure(AdminFailure::Internal(e.to_string())),
    };
    let mut out = Out::new();
    out.answer(call, resp);
    out
}

/// Whether the request being handled, by `actor` (the API identity as `api:<name>`, or
/// `None` for the admin socket), comes from an admin: the admin socket (root, the
/// daemon's user, `admin_group`), an `admin` API identity, or `api_auth: none`
/// (loopback only, everyone is admin there).
pub(crate) fn reader_is_admin(actor: Option<&str>, sp: &SaltpeterConfig) -> bool {
    let Some(who) = actor else {
        return true;
    };
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
fn url_origin(url: &str) -> String {
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
fn redacted(mut d: DeliveryRecord) -> DeliveryRecord {
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

    #[test]
    fn the_admin_socket_and_admin_identities_read_urls_whole() {
        use crate::config::ApiIdentity;
        let id = |name: &str, role| ApiIdentity {
            name: name.into(),
            role,
            token_sha256: [0; 32],
        };
        let sp = SaltpeterConfig {
            api_tokens: vec![id("alice", ApiRole::Admin), id("grafana", ApiRole::Viewer)],
            ..Default::default()
        };
        assert!(reader_is_admin(None, &sp), "the admin socket");
        assert!(reader_is_admin(Some("api:alice"), &sp));
        assert!(!reader_is_admin(Some("api:grafana"), &sp));
        assert!(
            !reader_is_admin(Some("api:api_token"), &sp),
            "no api_token set"
        );
        assert!(!reader_is_admin(Some("ui:alice"), &sp));
        let open = SaltpeterConfig {
            api_auth: ApiAuth::None,
            ..Default::default()
        };
        assert!(reader_is_admin(Some("api:anyone"), &open));
    }

    #[test]
    fn a_list_is_bounded_and_answered_redacted_to_a_reader_not_admin() {
        use crate::roles::main::messages::Cmd;
        use crate::wire::db::DbReply;
        let out = list(3, DeliveryFilter::default(), false);
        assert!(matches!(
            out.cmds(),
            [Cmd::Db { req: DbRequest::ListDeliveries(f), then: Then::Tell(_), .. }]
                if f.limit == Some(DEFAULT_LIMIT)
        ));
        let out = list(
            3,
            DeliveryFilter {
                limit: Some(1_000_000),
                ..Default::default()
            },
            true,
        );
        assert!(matches!(
            out.cmds(),
            [Cmd::Db { req: DbRequest::ListDeliveries(f), .. }] if f.limit == Some(MAX_LIMIT)
        ));
        let url = "https://hooks.example/T/secret-path";
        let record = DeliveryRecord {
            id: 1,
            key: format!("run:7:webhook:{url}"),
            job: None,
            run: None,
            event: "failure".into(),
            channel: "webhook".into(),
            destination: url.into(),
            state: crate::wire::notify::DeliveryState::Pending,
            attempts: 0,
            created: 0,
            next_attempt: None,
            last_error: None,
            delivered: None,
        };
        for (admin, shown) in [(true, url), (false, "https://hooks.example/…")] {
            let out = listed(3, admin, Ok(DbReply::Deliveries(vec![record.clone()])));
            match out.cmds() {
                [Cmd::Answer(3, AdminResponse::Deliveries(list))] => {
                    assert_eq!(list[0].destination, shown)
                }
                _ => panic!("not the answer"),
            }
        }
    }
}
