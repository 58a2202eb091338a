//! The jobs `/ws` clients watch, and the periodic refresh: what the hub keeps so that many
//! clients are served without asking main each time.
//!
//! 1. main sends typed views (`crate::wire::ui`): the configuration, the status, and the
//!    details of each job some client subscribed to (the first subscriber makes the hub
//!    tell main, `UiWatch`; when the last one leaves, the view goes and main stops). The
//!    hub renders their JSON (`crate::json::ui`) once per change and shares the text.
//! 2. The live output of a watched job's targets comes from the wrapper frames the hub
//!    relays itself (`feed`), and the hub notes when each target's wrapper last spoke.
//! 3. Every 2 s, while any client is connected, each client gets the status again and
//!    each subscriber the details of its jobs (with the heartbeats seen since), as the
//!    original did: its UI restores stale rows from a cache unless told again. Nothing is
//!    rendered for a job nobody watches, and with no client the timer is not armed.

use std::time::Duration;

use tungstenite::Utf8Bytes;

use super::conns::reap;
use super::feed;
use super::ws_push::{push_details, send};
use crate::evloop::Ctx;
use crate::json::ui::status_message;
use crate::json::ui::{config_message, maintenance_json};
use crate::roles::hub::state::Hub;
use crate::roles::hub::state::http::{ConnId, Http};
use crate::wire::records::RunId;
use crate::wire::ui::{ConfigView, DetailsView, StatusView};

/// How often `status` and `details` are sent again (the original's broadcast period).
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

fn broadcast(http: &mut Http, text: &Utf8Bytes) {
    for id in http.ws_ids() {
        send(http, id, text);
    }
}

pub(crate) fn on_config(hub: &mut Hub, ctx: &mut Ctx<Hub>, view: ConfigView) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    http.ui.maintenance = Some(maintenance_json(&view));
    let text = Utf8Bytes::from(config_message(&view).to_string());
    http.ui.config = Some(text.clone());
    broadcast(http, &text);
    reap(hub, ctx);
}

pub(crate) fn on_status(hub: &mut Hub, ctx: &mut Ctx<Hub>, view: StatusView) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let text = Utf8Bytes::from(status_message(&view).to_string());
    http.ui.status = Some(text.clone());
    broadcast(http, &text);
    reap(hub, ctx);
}

pub(crate) fn on_details(hub: &mut Hub, ctx: &mut Ctx<Hub>, details: DetailsView) {
    let job = details.job.clone();
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let cap = http.ui.live_cap;
    let Some(view) = http.ui.jobs.get_mut(&job) else {
        return; // nobody watches it any more
    };
    let live: Vec<_> = details.live_targets().collect();
    view.details = Some(details);
    let fetch = feed::follow_targets(view, &live, cap);
    for (machine, run) in fetch {
        feed::start_fetch(hub, &job, &machine, run);
    }
    push_details(hub, &job, None);
    super::ws_push::push_output(hub, &job, None);
    reap(hub, ctx);
}

/// Some `/ws` client watches `job`.
pub(crate) fn is_watched(hub: &Hub, job: &str) -> bool {
    hub.http
        .as_ref()
        .is_some_and(|h| h.ui.jobs.contains_key(job))
}

/// A wrapper of `run` on `machine` (a target of `job`) spoke: if the job is watched, its
/// details show it as the last heartbeat.
pub(crate) fn wrapper_alive(hub: &mut Hub, job: &str, run: RunId, machine: &str) {
    let Some(view) = hub.http.as_mut().and_then(|h| h.ui.jobs.get_mut(job)) else {
        return;
    };
    let now = crate::wire::records::now_ms();
    match view.heartbeats.get_mut(machine) {
        Some(entry) => *entry = (run, now),
        None => {
            view.heartbeats.insert(machine.to_string(), (run, now));
        }
    }
}

/// Keep the refresh timer going while any `/ws` client is connected.
pub(crate) fn arm_refresh(hub: &mut Hub, ctx: &mut Ctx<Hub>) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    if http.ui.refresh_armed || http.ws_ids().is_empty() {
        return;
    }
    http.ui.refresh_armed = true;
    ctx.after(REFRESH, |hub: &mut Hub, ctx| {
        if let Some(http) = hub.http.as_mut() {
            http.ui.refresh_armed = false;
        }
        refresh(hub);
        reap(hub, ctx);
        arm_refresh(hub, ctx);
    });
}

/// The status to every client, each watched job's details to its subscribers.
fn refresh(hub: &mut Hub) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    if let Some(status) = http.ui.status.clone() {
        broadcast(http, &status);
    }
    let rendered: Vec<(Utf8Bytes, Vec<ConnId>)> = http
        .ui
        .jobs
        .values()
        .filter(|v| !v.subscribers.is_empty())
        .filter_map(|v| Some((v.render_details()?, v.subscribers.iter().copied().collect())))
        .collect();
    for (text, subscribers) in rendered {
        for id in subscribers {
            send(http, id, &text);
        }
    }
}

/// The hub's own lines of `/metrics`.
pub(crate) fn hub_metrics(http: &Http, out: &mut String) {
    use crate::metrics::header;
    use std::fmt::Write;
    let (plain, ws) = http.connection_counts();
    header(
        out,
        "saltpeter_http_requests_total",
        "counter",
        "HTTP requests parsed.",
    );
    let _ = writeln!(out, "saltpeter_http_requests_total {}", http.stats.requests);
    header(
        out,
        "saltpeter_http_rejected_total",
        "counter",
        "HTTP requests or connections refused as malformed, oversized or over the limit.",
    );
    let _ = writeln!(out, "saltpeter_http_rejected_total {}", http.stats.rejected);
    header(
        out,
        "saltpeter_http_connections",
        "gauge",
        "Open HTTP connections (not /ws).",
    );
    let _ = writeln!(out, "saltpeter_http_connections {plain}");
    header(
        out,
        "saltpeter_http_buffered_bytes",
        "gauge",
        "Request buffers and unsent answers the API holds for its clients.",
    );
    let _ = writeln!(
        out,
        "saltpeter_http_buffered_bytes {}",
        http.budget.buffered()
    );
    header(
        out,
        "saltpeter_ws_clients",
        "gauge",
        "Open /ws connections.",
    );
    let _ = writeln!(out, "saltpeter_ws_clients {ws}");
    header(
        out,
        "saltpeter_ws_watched_jobs",
        "gauge",
        "Jobs some /ws client is subscribed to.",
    );
    let _ = writeln!(out, "saltpeter_ws_watched_jobs {}", http.ui.jobs.len());
    header(
        out,
        "saltpeter_ws_messages_sent_total",
        "counter",
        "Messages sent to /ws clients.",
    );
    let _ = writeln!(
        out,
        "saltpeter_ws_messages_sent_total {}",
        http.stats.ws_messages_sent
    );
}
