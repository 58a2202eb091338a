//! `saltpeterctl deliveries`: the outbox as db lists it, and what a reader of the list
//! sees of a webhook's or export's URL.
//!
//! A webhook URL's path often is its secret (Slack, Teams, Discord put the credential
//! there). Every reader (the admin socket and API identities of any role) sees the
//! scheme and host only (`config::notify::url_shown`), in the destination and wherever
//! the URL is repeated (the de-duplication key, the last error): the configuration
//! files are where the whole URL is kept.

use crate::config::notify::url_shown;
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

/// `saltpeterctl deliveries` (admin call `call`).
pub(crate) fn list(call: CallId, mut filter: DeliveryFilter) -> Out {
    filter.limit = Some(filter.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT));
    let mut out = Out::new();
    out.db(
        DbRequest::ListDeliveries(filter),
        Then::tell(move |result| Message::DeliveriesListed { call, result }),
    );
    out
}

/// db listed the outbox for admin call `call`: its answer, URLs cut to their host.
pub(crate) fn listed(call: CallId, result: DbResult) -> Out {
    let resp = match calls::ListDeliveries::take(result) {
        Ok(list) => AdminResponse::Deliveries(list.into_iter().map(redacted).collect()),
        Err(e) => AdminResponse::Failure(AdminFailure::Internal(e.to_string())),
    };
    let mut out = Out::new();
    out.answer(call, resp);
    out
}

/// The record as it is shown.
fn redacted(mut d: DeliveryRecord) -> DeliveryRecord {
    if !d.destination.contains("://") {
        return d;
    }
    let shown = url_shown(&d.destination);
    d.key = d.key.replace(&d.destination, &shown);
    d.last_error = d.last_error.map(|e| e.replace(&d.destination, &shown));
    d.destination = shown;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_list_is_bounded_and_answered_redacted_to_every_reader() {
        use crate::roles::main::messages::Cmd;
        use crate::wire::db::DbReply;
        let out = list(3, DeliveryFilter::default());
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
        let out = listed(3, Ok(DbReply::Deliveries(vec![record.clone()])));
        match out.cmds() {
            [Cmd::Answer(3, AdminResponse::Deliveries(list))] => {
                assert_eq!(list[0].destination, "https://hooks.example/…");
                assert!(!list[0].key.contains("secret-path"));
            }
            _ => panic!("not the answer"),
        }
    }
}
