//! An operator's suspend or resume of a run in flight (every target, or one): each target
//! decides by its own rules (`run/target/suspend.rs`), the effects go out, and the request
//! is recorded in the audit trail (`suspend_requested` / `resume_requested`, with who
//! asked) whatever it reached.

use crate::roles::main::shell::Main;
use crate::roles::main::shell::run::effects::apply;
use crate::wire::admin::AdminFailure;
use crate::wire::records::RunId;

/// Suspend (`want`) or resume targets of `run`; `Ok` says how many were reached. A target
/// that cannot (not running, an older wrapper) is named in the answer; when no target
/// could, the request fails with those reasons.
pub(crate) fn suspend(
    core: &mut Main,
    run: RunId,
    machine: Option<&str>,
    want: bool,
) -> Result<String, AdminFailure> {
    let verb = if want { "suspend" } else { "resume" };
    let Some(active) = core.run_mut(run) else {
        return Err(AdminFailure::NotFound(format!(
            "run {run} is not in flight"
        )));
    };
    if let Some(m) = machine
        && !active.targets().contains_key(m)
    {
        return Err(AdminFailure::NotFound(format!(
            "{m} is not a target of run {run}"
        )));
    }
    let mut reached = Vec::new();
    let mut refused = Vec::new();
    for (m, t) in active.targets_mut() {
        if machine.is_some_and(|only| only != m) {
            continue;
        }
        match t.set_suspended(want) {
            Ok(effects) => reached.push((m.clone(), effects)),
            Err(why) => refused.push(format!("{m}: {why}")),
        }
    }
    let job = active.job().name.clone();
    let mut summary = format!("{verb} sent to {} target(s) of run {run}", reached.len());
    if !refused.is_empty() {
        summary.push_str(&format!("; not to {}", refused.join("; ")));
    }
    core.event(
        &format!("{verb}_requested"),
        Some(&job),
        Some(run),
        machine,
        format!("{verb} requested by an operator: {summary}"),
    );
    if reached.is_empty() && !refused.is_empty() {
        return Err(AdminFailure::Invalid(summary));
    }
    for (m, effects) in reached {
        apply(core, run, &m, effects);
    }
    log::info!("run {run}: {summary}");
    Ok(summary)
}
