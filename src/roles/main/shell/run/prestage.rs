//! Pre-staged runs: launched ahead of their slot, started at the slot.
//!
//! Salt needs most of a second to start anything, so a scheduled salt run is launched by
//! its lead time (`Main::prestage_lead`) before the slot; its wrappers connect, fetch the
//! job and wait. At the slot main takes the decisions of any firing — kill requested,
//! global maintenance, overlap with a run still going — and sends `go` to every waiting
//! wrapper, or `cancel`. Until then the run is `queued` (waiting for its slot). Nothing runs before its slot: the wrapper starts the command only
//! on `go`, and wrappers that connect after the slot are welcomed without waiting.

use std::time::{Duration, Instant};

use chrono::Utc;

use crate::config::Overlap;
use crate::roles::main::run::rules::{self, AtSlot};
use crate::roles::main::shell::DbWait;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::run::effects::finish_target;
use crate::wire::db::{DbRequest, RunUpdate};
use crate::wire::records::{RunState, TargetReason};
use crate::wire::wrapper::ServerMsg;
use crate::workflow::{Step, Wake};

use super::env::{RunEnv, Sc, not_recorded};

/// Wait for the slot, then decide: `go` or `cancel`.
pub(crate) fn await_slot(env: &mut RunEnv, core: &mut Main, s: &mut Sc) -> Step {
    let Some((req, rec)) = env.recorded() else {
        return not_recorded(s);
    };
    let run = rec.id();
    if !req.prestaged || core.run(run).is_none_or(|r| r.go_sent()) {
        return Step::Next;
    }
    let Some(slot) = req.slot.and_then(chrono::DateTime::from_timestamp_millis) else {
        return Step::Next;
    };
    let until = slot - Utc::now();
    if until > chrono::Duration::zero() {
        let wait = until.to_std().unwrap_or(Duration::ZERO);
        return Step::Wait(Wake::At(Instant::now() + wait));
    }
    let job = req.job.clone();
    let refusal = match rules::at_slot(
        &job.name,
        core.run(run).is_some_and(|r| r.kill_requested()),
        core.global_maintenance(),
        job.overlap == Overlap::Forbid && core.job_busy_besides(&job.name, Some(run)),
    ) {
        AtSlot::Go => None,
        AtSlot::Refuse(state, reason) => Some((state, reason)),
    };
    let pickup = Duration::from_secs(core.config.saltpeter.pickup_timeout_s);
    let Some(active) = core.run_mut(run) else {
        return Step::Next;
    };
    match refusal {
        None => {
            active.go(crate::roles::main::shell::run::effects::now_ms());
            let conns: Vec<_> = active.targets().values().filter_map(|t| t.conn()).collect();
            core.views
                .metrics_mut()
                .observe_lateness((Utc::now() - slot).num_milliseconds());
            log::info!(
                "run {run}: slot reached, go to {} waiting wrapper(s) ({} ms after the slot)",
                conns.len(),
                (Utc::now() - slot).num_milliseconds()
            );
            core.links.tell_wrappers(conns, ServerMsg::Go {});
            rec.extend_pickup(Instant::now() + pickup);
            if !std::mem::replace(&mut rec.start_recorded, true) {
                core.db_call(
                    DbRequest::UpdateRun {
                        run,
                        update: RunUpdate {
                            state: Some(RunState::Running),
                            started: Some(crate::roles::main::shell::run::effects::now_ms()),
                            ..Default::default()
                        },
                    },
                    DbWait::write("a pre-staged run at its slot"),
                );
            }
        }
        Some((state, reason)) => {
            log::info!("run {run}: not started at its slot: {reason}");
            let mut unconnected = Vec::new();
            let mut conns = Vec::new();
            for (m, t) in active.targets() {
                if t.is_decided() {
                    continue;
                }
                match t.conn() {
                    Some(conn) => conns.push(conn),
                    None => unconnected.push(m.clone()),
                }
            }
            core.links.tell_wrappers(
                conns,
                ServerMsg::Cancel {
                    reason: reason.clone(),
                },
            );
            for m in unconnected {
                finish_target(core, run, &m, TargetReason::Canceled, None);
            }
            rec.unresolved = Some((state, reason));
        }
    }
    Step::Next
}
