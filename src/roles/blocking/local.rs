//! The `local` executor: wrappers started on this host, one per target name.
//!
//! A wrapper must outlive the daemon like a remote one does, so it is started outside
//! the daemon's process tree: under systemd in a transient unit of its own (`systemd-run`;
//! the service's `KillMode=mixed` would otherwise kill it with the service), elsewhere as
//! `saltpeter-wrapper --daemonize`, which double-forks into its own session and returns at
//! once. Only root may create units in the system manager; the packaged service runs as
//! the `saltpeter` user, so it asks that user's own manager (`systemd-run --user`, kept
//! running by lingering, which the package enables), and daemonizes when there is none. The launch command's pipes are drained by the loop and its exit decides the
//! target's launch outcome.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::Blocking;
use crate::evloop::{Ctx, child};
use crate::ipc::rpc::CallId;
use crate::wire::link::{BlockingReply, LaunchOutcome, LaunchTarget};

/// A launch that has not returned within this is killed and reported as failed.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Outcomes of one `Launch` call, collected until every target has one.
#[derive(Default)]
pub struct Batch {
    remaining: usize,
    outcomes: Vec<LaunchOutcome>,
}

impl Batch {
    pub fn new(targets: usize) -> Batch {
        Batch {
            remaining: targets,
            outcomes: Vec::new(),
        }
    }
}

pub type Batches = HashMap<CallId, Batch>;

fn under_systemd() -> bool {
    std::env::var_os("INVOCATION_ID").is_some() && Path::new("/run/systemd/system").exists()
}

/// How `systemd-run` reaches a manager: the system one as root, else this user's own
/// (`XDG_RUNTIME_DIR` of the user's manager, when its bus exists); `None`: no manager.
fn systemd_run_scope() -> Option<Option<String>> {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return Some(None);
    }
    let dir = format!("/run/user/{uid}");
    Path::new(&dir).join("bus").exists().then_some(Some(dir))
}

fn unit_name(target: &LaunchTarget) -> String {
    let run = target
        .env
        .iter()
        .find(|(k, _)| k == crate::wire::wrapper::ENV_RUN)
        .map(|(_, v)| v.as_str())
        .unwrap_or("0");
    let machine: String = target
        .machine
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("saltpeter-run-{run}-{machine}")
}

fn command_for(wrapper: &str, target: &LaunchTarget, log_dir: &Path) -> Command {
    let log = log_dir.join(format!("{}.log", unit_name(target)));
    if let Some(scope) = under_systemd().then(systemd_run_scope).flatten() {
        let mut cmd = Command::new("systemd-run");
        if let Some(runtime_dir) = scope {
            cmd.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
        }
        cmd.args(["--quiet", "--collect", "--no-block", "--unit"])
            .arg(unit_name(target));
        for (k, v) in &target.env {
            cmd.arg(format!("--setenv={k}={v}"));
        }
        cmd.arg(wrapper).arg("--log").arg(log);
        cmd
    } else {
        let mut cmd = Command::new(wrapper);
        cmd.arg("--daemonize").arg("--log").arg(log);
        cmd.envs(target.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

pub fn launch(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    wrapper: &str,
    targets: Vec<LaunchTarget>,
) {
    if targets.is_empty() {
        state.reply(id, Ok(BlockingReply::Launched(Vec::new())));
        return;
    }
    let log_dir = state.wrapper_log_dir.clone();
    if let Err(e) = std::fs::create_dir_all(&log_dir) {
        log::warn!("could not create {}: {e}", log_dir.display());
    }
    state.batches.insert(
        id,
        Batch {
            remaining: targets.len(),
            outcomes: Vec::new(),
        },
    );
    for target in targets {
        let machine = target.machine.clone();
        let cmd = command_for(wrapper, &target, &log_dir);
        let done_machine = machine.clone();
        let spawned = child::spawn(ctx, cmd, move |state: &mut Blocking, _ctx, out| {
            let result = if out.status.success() {
                Ok(())
            } else {
                let stderr = String::from_utf8_lossy(&out.stderr);
                Err(format!(
                    "wrapper launch failed ({}): {}",
                    out.status,
                    stderr.trim()
                ))
            };
            record(state, id, done_machine, result);
        });
        match spawned {
            Ok(child_id) => {
                ctx.after(LAUNCH_TIMEOUT, move |_: &mut Blocking, ctx| {
                    if child::signal(ctx, child_id, Signal::SIGKILL) {
                        log::warn!("wrapper launch took over {LAUNCH_TIMEOUT:?}; killed it");
                    }
                });
            }
            Err(e) => record(
                state,
                id,
                machine,
                Err(format!("could not start {wrapper}: {e}")),
            ),
        }
    }
}

pub fn record(state: &mut Blocking, id: CallId, machine: String, result: Result<(), String>) {
    if let Err(e) = &result {
        log::warn!("launching the wrapper for {machine} failed: {e}");
    }
    let Some(batch) = state.batches.get_mut(&id) else {
        return;
    };
    batch.outcomes.push(LaunchOutcome { machine, result });
    batch.remaining -= 1;
    if batch.remaining == 0
        && let Some(batch) = state.batches.remove(&id)
    {
        state.reply(id, Ok(BlockingReply::Launched(batch.outcomes)));
    }
}
