//! The live output of watched targets, fed by the wrapper frames the hub relays to main.
//!
//! For each target a watched job's details cover (docs/api.md, `/ws`):
//! 1. the stored output is read once through main (`LiveOutput`, which says up to which
//!    frame it goes); frames arriving meanwhile wait, and those the read already held are
//!    dropped, so every frame shows once and in order (by seq, which also drops a
//!    re-attached wrapper's resends after a daemon restart);
//! 2. later frames are appended as the hub relays them (`wrapper_output`); on a standby,
//!    main sends the output of the leader's runs read from the database instead
//!    (`MainToHub::UiStoredOutput`, its seq a byte position, as the first read's);
//! 3. each subscriber has its own position per target (characters of the decoded text,
//!    `live`), so a chunk holds exactly what that client has not seen; a new run of a
//!    target starts at 0; subscribers at the same position share one encoded message.
//!
//! The text is bounded (`live_cap`, the newest half kept); a finished target's text is
//! its stored output, so its `output_length` is what the store holds.

use super::conns::reap;
use super::ws_push::{CALL_TIMEOUT, push_details, push_output};
use crate::evloop::Ctx;
use crate::ipc::CallError;
use crate::roles::hub::state::http::{JobView, new_target};
use crate::roles::hub::state::{Hub, Waiting};
use crate::wire::admin::{AdminRequest, AdminResponse};
use crate::wire::link::HubRequest;
use crate::wire::records::RunId;
use crate::wire::ui::LiveTarget;

/// New details cover `live`: forget targets of older runs, mark finished ones, and say
/// which targets' stored output to read.
pub(super) fn follow_targets(
    view: &mut JobView,
    live: &[LiveTarget],
    cap: usize,
) -> Vec<(String, RunId)> {
    let newest = live.iter().map(|t| t.run).max();
    view.targets
        .retain(|m, t| live.iter().any(|l| &l.machine == m) || Some(t.text.run) == newest);
    let mut fetch = Vec::new();
    for lt in live {
        match view.targets.get_mut(&lt.machine) {
            Some(t) if t.text.run == lt.run => {
                if lt.finished && !t.finished {
                    t.finished = true;
                    if t.fetching.is_none() {
                        t.text.finish();
                    }
                }
            }
            _ => {
                view.targets.insert(
                    lt.machine.clone(),
                    new_target(lt.run, cap, lt.finished, None),
                );
                fetch.push((lt.machine.clone(), lt.run));
            }
        }
    }
    fetch
}

/// Read the stored output of a target for its view.
pub(super) fn start_fetch(hub: &mut Hub, job: &str, machine: &str, run: RunId) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let fid = http.ui.next_fetch;
    http.ui.next_fetch += 1;
    http.ui
        .fetches
        .insert(fid, (job.to_string(), machine.to_string(), run));
    hub.call_main(
        HubRequest::Admin(AdminRequest::LiveOutput {
            run,
            machine: machine.to_string(),
        }),
        CALL_TIMEOUT,
        Waiting::LiveFetch(fid),
    );
}

/// An output frame of `run` on `machine` (a target of `job`) passed through the hub: if
/// the job is watched, its subscribers get it.
pub(crate) fn wrapper_output(
    hub: &mut Hub,
    ctx: &mut Ctx<Hub>,
    job: &str,
    run: RunId,
    machine: &str,
    seq: u64,
    data: &[u8],
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let cap = http.ui.live_cap;
    let Some(view) = http.ui.jobs.get_mut(job) else {
        return;
    };
    match view.targets.get_mut(machine) {
        Some(t) if t.text.run == run => match &mut t.fetching {
            Some(queued) => queued.push((seq, data.to_vec())),
            None if seq > t.upto_seq => {
                t.text.push_bytes(data);
                t.upto_seq = seq;
            }
            None => return, // a resend of a frame already shown
        },
        Some(t) if t.text.run > run => return, // an older run still talking
        _ => {
            // A run the details have not announced yet: read what is stored first.
            view.targets.insert(
                machine.to_string(),
                new_target(run, cap, false, Some((seq, data.to_vec()))),
            );
            start_fetch(hub, job, machine, run);
            return;
        }
    }
    push_output(hub, job, None);
    reap(hub, ctx);
}

/// The live text of `runs`' targets was fed as stored output (a standby's mirror) and is
/// now to come from their wrappers' frames, counted in another seq: it is dropped, and
/// made again, from a new read of the stored output, by the next details or frame.
/// Subscribers keep their positions (the same run's text).
pub(crate) fn forget_runs(hub: &mut Hub, runs: &[RunId]) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    for view in http.ui.jobs.values_mut() {
        view.targets.retain(|_, t| !runs.contains(&t.text.run));
    }
    // A read still out counts in the old seq: its answer is not used.
    http.ui.fetches.retain(|_, (_, _, run)| !runs.contains(run));
}

/// main answered (or failed) a read of stored output.
pub(crate) fn live_base(
    hub: &mut Hub,
    ctx: Option<&mut Ctx<Hub>>,
    fid: u64,
    answer: Result<AdminResponse, CallError>,
) {
    let Some(http) = hub.http.as_mut() else {
        return;
    };
    let Some((job, machine, run)) = http.ui.fetches.remove(&fid) else {
        return;
    };
    let Some(t) = http
        .ui
        .jobs
        .get_mut(&job)
        .and_then(|v| v.targets.get_mut(&machine))
        .filter(|t| t.text.run == run)
    else {
        return;
    };
    let Some(queued) = t.fetching.take() else {
        return;
    };
    match answer {
        Ok(AdminResponse::LiveOutput(base)) => {
            t.text.skip(base.skipped_bytes);
            let at = base
                .omitted_at
                .unwrap_or(base.data.len())
                .min(base.data.len());
            t.text.push_bytes(&base.data[..at]);
            if base.omitted_at.is_some() && base.omitted_bytes > 0 {
                t.text
                    .push_str(&crate::json::elision_marker(base.omitted_bytes));
            }
            t.text.push_bytes(&base.data[at..]);
            t.upto_seq = base.upto_seq;
        }
        Ok(other) => log::debug!("no stored output of {machine} in run {run}: {other:?}"),
        Err(e) => log::debug!("no stored output of {machine} in run {run}: {e}"),
    }
    for (seq, data) in queued {
        if seq > t.upto_seq {
            t.text.push_bytes(&data);
            t.upto_seq = seq;
        }
    }
    if t.finished {
        t.text.finish();
    }
    // Details waited for the read (their `output_length`), the output too.
    push_details(hub, &job, None);
    push_output(hub, &job, None);
    if let Some(ctx) = ctx {
        reap(hub, ctx);
    }
}
