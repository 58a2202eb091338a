//! `retry_unreachable`: a target whose minion did not answer (255) waits for it to come
//! back, and runs then as a new attempt of the same run.
//!
//! Outline:
//! 1. `record_run` puts each unreachable target of a job with a window into
//!    `WaitingUnreachable` (state `waiting_unreachable`, event `target_unreachable`)
//!    instead of recording 255 at once (a return keeps `unreachable 255` as the first
//!    attempt in the history).
//! 2. While targets wait, the run's collect steps (`collect_batch`, `collect_all`) call
//!    [`check`]: every [`probe_period`] one `Resolve` (a `test.ping` of exactly the waiting
//!    minions, as a list) goes through blocking's salt helper — the same path as any
//!    run's resolution, so whatever launches runs launches this too.
//! 3. A minion that answers: its target becomes pending as attempt N+1 (event
//!    `target_retry`), joins the batch going on (or a batch of its own after the last
//!    one) and is launched by the usual `deploy_wrappers` → `launch_batch` steps.
//! 4. When the window closes the target is finished as `gave_up` (255, event
//!    `target_given_up`); a kill cancels it (`canceled`, it never ran).
//!
//! The run's final state counts the last attempt. After a restart the window starts over
//! (the deadline is not stored). The local executor has no unreachable targets, so the
//! key has no effect there.

use std::time::{Duration, Instant};

use super::env::RecordedRun;
use crate::config::Job;
use crate::roles::main::shell::Main;
use crate::roles::main::shell::run::effects::{finish_target, transition};
use crate::wire::link::blocking_calls;
use crate::wire::records::{RunId, TargetReason};

/// How often the waiting minions are pinged: a tenth of the window, 2 s to 30 s.
pub(crate) fn probe_period(window: Duration) -> Duration {
    (window / 10).clamp(Duration::from_secs(2), Duration::from_secs(30))
}

/// The targets resolution found unreachable (minion, why), once the run is recorded:
/// 255 at once, or, with `retry_unreachable`, waiting for their minion.
pub(crate) fn record_unreachable(
    core: &mut Main,
    run: RunId,
    job: &Job,
    unreachable: Vec<(String, String)>,
) {
    let window = Duration::from_secs(job.retry_unreachable_s);
    for (m, why) in unreachable {
        if window.is_zero() {
            log::warn!("run {run}: {m} is unreachable: {why}");
            core.event(
                "target_unreachable",
                Some(&job.name),
                Some(run),
                Some(&m),
                why,
            );
            finish_target(core, run, &m, TargetReason::Unreachable, Some(255));
            continue;
        }
        log::warn!(
            "run {run}: {m} is unreachable ({why}); waiting up to {} s for it",
            window.as_secs()
        );
        let message = format!(
            "{why}; waiting up to {} s for it to come back (retry_unreachable)",
            window.as_secs()
        );
        core.event(
            "target_unreachable",
            Some(&job.name),
            Some(run),
            Some(&m),
            message,
        );
        let (now, at) = (
            Instant::now(),
            crate::roles::main::shell::run::effects::now_ms(),
        );
        transition(core, run, &m, |t| t.await_return(now, window, at));
    }
}

/// What the run's collect step does about waiting targets now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// None is waiting.
    Nothing,
    /// These came back and are pending: launch them.
    Relaunch(Vec<String>),
    /// Look again at this instant, or when this probe answers.
    Wait {
        at: Instant,
        probe: Option<crate::ipc::CallId>,
    },
}

pub(crate) fn check(rec: &mut RecordedRun, core: &mut Main, now: Instant) -> Plan {
    let run = rec.id();
    let Some(active) = core.run(run) else {
        return Plan::Nothing;
    };
    let window = Duration::from_secs(active.job().retry_unreachable_s);
    let job = active.job().name.clone();
    let waiting: Vec<(String, Instant)> = active
        .targets()
        .iter()
        .filter_map(|(m, t)| t.waiting_until().map(|u| (m.clone(), u)))
        .collect();
    // A probe's answer is taken even when nobody waits any more (killed meanwhile).
    let answer = match rec.probe {
        Some(id) => match core
            .links
            .take_blocking_reply::<blocking_calls::Resolve>(id)
        {
            Some(reply) => {
                rec.probe = None;
                rec.next_probe = Some(now + probe_period(window));
                Some(reply)
            }
            None => None,
        },
        None => None,
    };
    if waiting.is_empty() {
        return Plan::Nothing;
    }
    let now_ms = crate::roles::main::shell::run::effects::now_ms();
    for (machine, until) in &waiting {
        if *until <= now {
            log::warn!(
                "run {run}: {machine} did not come back within retry_unreachable ({} s); given up",
                window.as_secs()
            );
            core.event(
                "target_given_up",
                Some(&job),
                Some(run),
                Some(machine),
                format!(
                    "its minion did not come back within retry_unreachable ({} s)",
                    window.as_secs()
                ),
            );
            transition(core, run, machine, |t| t.give_up_waiting(now, now_ms));
        }
    }
    let still: Vec<String> = waiting
        .iter()
        .filter(|(_, u)| *u > now)
        .map(|(m, _)| m.clone())
        .collect();
    let mut back = Vec::new();
    match answer {
        Some(Ok(resolution)) => {
            for m in resolution.live.into_iter().filter(|m| still.contains(m)) {
                log::info!("run {run}: {m} answers again; running its target now");
                transition(core, run, &m, |t| t.came_back());
                back.push(m);
            }
        }
        Some(Err(e)) => log::warn!("run {run}: checking the unreachable minions failed: {e}"),
        None => {}
    }
    if !back.is_empty() {
        return Plan::Relaunch(back);
    }
    let Some(first_close) = waiting.iter().map(|(_, u)| *u).filter(|u| *u > now).min() else {
        return Plan::Nothing;
    };
    if rec.probe.is_none() && rec.next_probe.is_none_or(|at| at <= now) {
        let job = active_job(core, run);
        match job.map(|j| super::plugins::ping_request(&core.config.saltpeter, &j, still.clone())) {
            Some(Ok(request)) => rec.probe = Some(core.blocking_call(request)),
            Some(Err(why)) => {
                log::warn!("run {run}: cannot check the unreachable machines: {why}");
                rec.next_probe = Some(now + probe_period(window));
            }
            None => {}
        }
    }
    let at = match (rec.probe, rec.next_probe) {
        (None, Some(next)) => next.min(first_close),
        _ => first_close,
    };
    Plan::Wait {
        at,
        probe: rec.probe,
    }
}

/// The job of run `run` in flight.
fn active_job(core: &Main, run: RunId) -> Option<std::sync::Arc<Job>> {
    core.run(run).map(|r| std::sync::Arc::clone(r.job()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_follow_the_window() {
        assert_eq!(
            probe_period(Duration::from_secs(10)),
            Duration::from_secs(2)
        );
        assert_eq!(
            probe_period(Duration::from_secs(120)),
            Duration::from_secs(12)
        );
        assert_eq!(
            probe_period(Duration::from_secs(7200)),
            Duration::from_secs(30)
        );
    }
}
