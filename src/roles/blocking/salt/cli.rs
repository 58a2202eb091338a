//! The salt command line: salt calls as `salt` processes, at most `concurrency` at once,
//! the rest waiting their turn in the queue (`SaltQueue`). Both the executor and the
//! bridge (whose requests fall back to it) hand their calls here.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::super::state::{Blocking, Invocation, Outcome};
use crate::evloop::{Ctx, child};

/// Beyond salt's own `-t`, how long an invocation may take before it is killed.
pub(crate) const DEADLINE_SLACK: Duration = Duration::from_secs(15);

/// Run invocations the salt bridge could not (it never became ready): nothing of theirs
/// was published, so the command line does them now.
pub(crate) fn run_on_cli(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    invocations: Vec<Invocation>,
) {
    state.salt.waiting.extend(invocations);
    start_waiting(state, ctx);
}

/// Queue one invocation behind the others.
pub(crate) fn run(state: &mut Blocking, ctx: &mut Ctx<Blocking>, invocation: Invocation) {
    state.salt.waiting.push_back(invocation);
    start_waiting(state, ctx);
}

fn start_waiting(state: &mut Blocking, ctx: &mut Ctx<Blocking>) {
    while let Some(next) = state.salt.waiting.front() {
        if state.salt.running >= next.settings.concurrency.max(1) as usize {
            return;
        }
        let Some(inv) = state.salt.waiting.pop_front() else {
            return;
        };
        let mut cmd = Command::new(&inv.settings.salt_bin);
        cmd.args(&inv.argv);
        let deadline = Duration::from_secs(inv.settings.timeout_s) + DEADLINE_SLACK;
        let bin = inv.settings.salt_bin.clone();
        // Shared by the exit callback and the spawn-error path; only one ever runs.
        let on_done = std::rc::Rc::new(std::cell::Cell::new(Some(inv.on_done)));
        let on_exit = std::rc::Rc::clone(&on_done);
        log::debug!("salt {}", crate::logsafe::escape(&inv.argv.join(" ")));
        match child::spawn(ctx, cmd, move |state: &mut Blocking, ctx, out| {
            state.salt.running -= 1;
            let outcome = Outcome::Finished {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                bridge: false,
            };
            let outcome = match out.status.code() {
                Some(_) => outcome,
                None => Outcome::Failed(format!(
                    "salt was killed ({}) after {deadline:?} without finishing",
                    out.status
                )),
            };
            if let Some(on_done) = on_exit.take() {
                on_done(state, ctx, outcome);
            }
            start_waiting(state, ctx);
        }) {
            Ok(id) => {
                state.salt.running += 1;
                ctx.after(deadline, move |_: &mut Blocking, ctx| {
                    if child::signal(ctx, id, Signal::SIGKILL) {
                        log::warn!("salt invocation exceeded {deadline:?}; killed it");
                    }
                });
            }
            Err(e) => {
                if let Some(on_done) = on_done.take() {
                    on_done(
                        state,
                        ctx,
                        Outcome::Failed(format!("could not run salt_bin {bin}: {e}")),
                    );
                }
            }
        }
    }
}
