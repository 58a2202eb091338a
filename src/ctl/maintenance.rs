//! `saltpeterctl maintenance on|off|add MACHINE|remove MACHINE|show`: the run-time
//! maintenance settings of the running daemon, and the effective maintenance with where each
//! entry comes from (`file`: `saltpeter_maintenance` in the configuration; `runtime`: set
//! here, persisted by the daemon).

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::Value;

use super::exit::{CtlResult, EXIT_OK};
use super::{client, render};
use crate::wire::admin::{
    AdminRequest, AdminResponse, MaintenanceChange, MaintenanceInfo, MaintenanceSource,
};

#[derive(Debug, Subcommand)]
pub(crate) enum MaintenanceAction {
    /// Global maintenance on: no new runs start anywhere; running ones finish.
    On,
    /// Global maintenance off (unless the configuration files turn it on).
    Off,
    /// Leave MACHINE out of every run (recorded as skipped_maintenance).
    Add { machine: String },
    /// Let MACHINE run jobs again (unless the configuration files list it).
    Remove { machine: String },
    /// The effective maintenance and where each entry comes from.
    Show,
    /// The next openings of the maintenance windows (`saltpeter_maintenance.windows`).
    Windows {
        /// How many openings to list.
        #[arg(long, default_value_t = 10)]
        count: u32,
    },
}

pub(super) fn run(socket: Option<PathBuf>, action: MaintenanceAction, json: bool) -> CtlResult {
    let change = match action {
        MaintenanceAction::On => MaintenanceChange::GlobalOn,
        MaintenanceAction::Off => MaintenanceChange::GlobalOff,
        MaintenanceAction::Add { machine } => MaintenanceChange::Add(machine),
        MaintenanceAction::Remove { machine } => MaintenanceChange::Remove(machine),
        MaintenanceAction::Show | MaintenanceAction::Windows { .. } => MaintenanceChange::Show,
    };
    let mut client = client::Client::connect(socket)?;
    match client.request(&AdminRequest::Maintenance(change))? {
        AdminResponse::Maintenance(info) => {
            print(&info, json);
            Ok(EXIT_OK)
        }
        other => render::response(other, json),
    }
}

fn sources(list: &[MaintenanceSource]) -> Vec<&'static str> {
    list.iter().map(|s| s.as_str()).collect()
}

/// The JSON shape of the effective maintenance (shared with the HTTP API).
pub(super) fn info_json(info: &MaintenanceInfo) -> Value {
    info.to_json()
}

fn print(info: &MaintenanceInfo, json: bool) {
    if json {
        let v = info_json(info);
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
        );
        return;
    }
    if let Some(note) = &info.note {
        outln!("{note}");
    }
    if info.global.is_empty() {
        outln!("global maintenance: off");
    } else {
        outln!(
            "global maintenance: on (from {})",
            sources(&info.global).join(", ")
        );
    }
    if info.machines.is_empty() {
        outln!("machines in maintenance: none");
    } else {
        outln!("machines in maintenance:");
        for (machine, from) in &info.machines {
            outln!("  {machine:<32} from {}", sources(from).join(", "));
        }
    }
}
