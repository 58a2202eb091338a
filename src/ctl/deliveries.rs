//! `saltpeterctl deliveries`: the notification and export outbox, newest first — what was
//! sent, what waits for its next attempt and why the last one failed.

use std::path::PathBuf;

use serde_json::Value;

use super::exit::{CtlResult, EXIT_OK};
use super::table::{Style, Table, cell, when};
use super::{client, render};
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::notify::{DeliveryFilter, DeliveryRecord, DeliveryState};

pub(super) fn run(
    socket: Option<PathBuf>,
    job: Option<String>,
    run: Option<u64>,
    state: Option<String>,
    limit: u32,
    json: bool,
) -> CtlResult {
    let filter = DeliveryFilter {
        job,
        run,
        state: state.as_deref().and_then(DeliveryState::parse),
        limit: Some(limit as usize),
    };
    let mut client = client::Client::connect(socket)?;
    match client.request(&AdminRequest::Deliveries(filter))? {
        AdminResponse::Deliveries(list) => {
            print(&list, json);
            Ok(EXIT_OK)
        }
        other => render::response(other, json),
    }
}

fn print(list: &[DeliveryRecord], json: bool) {
    if json {
        let v: Vec<Value> = list.iter().map(DeliveryRecord::to_json).collect();
        println!("{}", Value::Array(v));
        return;
    }
    let mut t = Table::new(&[
        "ID",
        "CREATED",
        "JOB",
        "RUN",
        "EVENT",
        "TO",
        "STATE",
        "TRIES",
        "NEXT",
        "LAST ERROR",
    ]);
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for d in list {
        t.row(vec![
            cell(d.id.to_string()),
            cell(when(Some(d.created))),
            cell(dash(d.job.clone())),
            cell(dash(d.run.map(|r| r.to_string()))),
            cell(&d.event),
            cell(format!("{} {}", d.channel, d.destination)),
            cell(d.state.as_str()),
            cell(d.attempts.to_string()),
            cell(if d.next_attempt.is_some() {
                when(d.next_attempt)
            } else {
                "-".into()
            }),
            cell(dash(d.last_error.clone())),
        ]);
    }
    print!("{}", t.render(Style::stdout(), ""));
}
