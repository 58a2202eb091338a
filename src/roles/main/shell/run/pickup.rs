//! Targets whose wrapper never called back by the pick-up deadline.
//!
//! A local target fails at once (254). A salt target is not judged on Salt's silence
//! alone: the minions of every overdue target are pinged together (one `test.ping`, or
//! an executor plugin's `ping`), and only a machine that answers neither its wrapper's
//! call nor the ping is unreachable (255, with the executor's word); one that answers
//! had a wrapper that failed (254). A wrapper that calls back while the ping is out
//! keeps its target.

use super::env::RecordedRun;
use super::failed::{launch_failed, unreachable};
use crate::config::Executor;
use crate::roles::main::fleet::launcher;
use crate::roles::main::run::request::RunRequest;
use crate::roles::main::shell::Main;
use crate::wire::link::blocking_calls;
use crate::workflow::Wake;

/// Act on the `overdue` targets of the current batch; `Some(wake)` while a ping is out.
pub(super) fn overdue(
    req: &RunRequest,
    rec: &mut RecordedRun,
    core: &mut Main,
    overdue: Vec<String>,
) -> Option<Wake> {
    let run = rec.id();
    let job = req.job.name.clone();
    if let Some((id, _)) = &rec.pickup_probe {
        let id = *id;
        let Some(reply) = core
            .links
            .take_blocking_reply::<blocking_calls::Resolve>(id)
        else {
            return Some(Wake::Call(id));
        };
        let machines = rec.pickup_probe.take().map(|(_, m)| m).unwrap_or_default();
        if reply.is_err() && core.flight.is_stopping() {
            // Blocking went first in an ordered stop: the next start judges them.
            return None;
        }
        // An executor plugin's own words for what Salt calls a minion and test.ping.
        let (who, what, ping_name) = match req.job.executor.plugin() {
            Some(name) => (name.to_string(), "the machine", "its ping"),
            None => ("salt".to_string(), "the minion", "test.ping"),
        };
        for machine in machines {
            let launch = match rec.silent.remove(&machine) {
                Some(word) => format!("salt said at the launch: {word}"),
                None => "the launch was published".to_string(),
            };
            match &reply {
                Ok(res) if res.live.contains(&machine) => {
                    // Its wrapper may be gone from the minion (a launch published without
                    // waiting for returns does not see that): deploy again next time.
                    let path = launcher::wrapper_path(&core.config.saltpeter, &req.job);
                    match req.job.executor.plugin() {
                        Some(name) => core.fleet.plugin_builds().failed(name, &machine, &path),
                        None => {
                            let out = core.fleet.missing(&machine, &path);
                            core.perform(out);
                        }
                    }
                    let why = format!(
                        "its wrapper never called back before the pick-up deadline, though \
                         {what} answers {ping_name} ({launch})"
                    );
                    launch_failed(core, &job, run, &machine, why);
                }
                Ok(res) => {
                    let ping = res
                        .unreachable
                        .iter()
                        .find(|(m, _)| *m == machine)
                        .map_or("no answer", |(_, why)| why.as_str());
                    let why = format!(
                        "{who}: its wrapper never called back ({launch}) and {what} does \
                         not answer {ping_name}: {ping}"
                    );
                    unreachable(core, &job, run, &machine, why);
                }
                Err(e) => {
                    let why = format!(
                        "its wrapper never called back before the pick-up deadline ({launch}); \
                         the ping of its minion failed: {e}"
                    );
                    launch_failed(core, &job, run, &machine, why);
                }
            }
        }
    }
    let overdue: Vec<String> = overdue
        .into_iter()
        .filter(|m| core.target(run, m).is_some_and(|t| t.awaiting_pickup()))
        .collect();
    if overdue.is_empty() {
        return None;
    }
    if req.job.executor == Executor::Local {
        for machine in overdue {
            log::warn!("run {run}: the wrapper on {machine} never picked the run up");
            let why = "its wrapper never called back before the pick-up deadline".to_string();
            launch_failed(core, &job, run, &machine, why);
        }
        return None;
    }
    log::warn!(
        "run {run}: no wrapper called back from {} by the pick-up deadline; pinging",
        overdue.join(", ")
    );
    let ping = super::plugins::ping_request(&core.config.saltpeter, &req.job, overdue.clone());
    let id = match ping {
        Ok(request) => core.blocking_call(request),
        Err(why) => {
            for machine in overdue {
                let why =
                    format!("its wrapper never called back before the pick-up deadline; {why}");
                launch_failed(core, &job, run, &machine, why);
            }
            return None;
        }
    };
    rec.pickup_probe = Some((id, overdue));
    Some(Wake::Call(id))
}
