//! Executor plugins' operations (docs/executors.md), each a child process of this loop.
//!
//! Outline of one operation ([`run_op`]):
//! 1. The request line goes into a memfd that is the plugin's stdin (the launch tokens
//!    are in it: a file only this user can open, never an argv or an environment).
//! 2. The plugin runs in a process group of its own (`PluginSpec::command`; a pinned one
//!    through `--exec-pinned`), its stdout and stderr drained by the loop and bounded
//!    (`child::CAPTURE_LIMIT`, the protocol's [`MAX_STDOUT`]).
//! 3. At its deadline its whole group is killed; at its exit whatever it left in its
//!    group is killed too, so no plugin and no `ssh` it started outlives its operation.
//! 4. Its output is read by `executor::protocol` into what it said and the first breach
//!    of the protocol; its stderr and any foreign stdout lines are logged, escaped and
//!    clipped, with the plugin's name.
//!
//! The operations then answer main in the shapes of the built-in executors: `launch`
//! per target (`Launched`), `resolve` and `ping` as a [`Resolution`], `check_config` as
//! `Checked`. Nothing here decides anything about runs.

use std::path::Path;
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::state::Blocking;
use crate::evloop::{Ctx, child};
use crate::executor::protocol::{self, Op, PluginLine, RawOutput, Reading};
use crate::executor::spec::PluginSpec;
use crate::executor::{MAX_STDERR_LOGGED, MAX_STDOUT};
use crate::ipc::CallId;
use crate::ipc::rpc::RemoteError;
use crate::wire::link::{BlockingReply, PluginCall, Resolution};

/// What an operation's caller is told: what the plugin said, or why it could not run.
type OnRead = Box<dyn FnOnce(&mut Blocking, &mut Ctx<Blocking>, Result<Reading, String>)>;

/// The daemon binary, for a pinned plugin's `--exec-pinned` (this very build).
fn daemon_exe() -> &'static Path {
    Path::new("/proc/self/exe")
}

/// Run `op` of `spec` with `request` (one line) on its stdin, within `deadline`.
pub(super) fn run_op(
    ctx: &mut Ctx<Blocking>,
    spec: &PluginSpec,
    op: Op,
    request: String,
    deadline: Duration,
    on_read: OnRead,
) -> Result<(), (OnRead, String)> {
    let stdin = match crate::executor::runner::stdin_file(request.as_bytes()) {
        Ok(file) => Stdio::from(file),
        Err(e) => return Err((on_read, format!("cannot create the request file: {e}"))),
    };
    drop(request);
    let cmd = spec.command(daemon_exe());
    let name = spec.name.clone();
    let timed_out = Rc::new(std::cell::Cell::new(false));
    let seen = Rc::clone(&timed_out);
    let on_read = Rc::new(std::cell::Cell::new(Some(on_read)));
    let on_exit = Rc::clone(&on_read);
    let spawned =
        child::spawn_with_stdin(ctx, cmd, stdin, move |state: &mut Blocking, ctx, out| {
            // Whatever the plugin left in its group goes with it.
            crate::executor::runner::kill_group(out.pid);
            let stdout_dropped = if out.stdout.len() >= MAX_STDOUT.min(child::CAPTURE_LIMIT) {
                out.dropped.max(1)
            } else {
                0
            };
            let raw = RawOutput {
                stdout: out.stdout,
                dropped: stdout_dropped,
                stderr: out.stderr,
                code: out.status.code(),
                deadline: seen.get().then_some(deadline.as_secs()),
            };
            let refused = crate::executor::spec::pinned_refusal(raw.code, &raw.stderr);
            let reading = protocol::read_output(op, &raw);
            if let Some(why) = &refused {
                log::error!("executor {name} {op} not run: {why}");
            } else {
                log_chatter(&name, op, &raw, &reading);
            }
            if let Some(on_read) = on_exit.take() {
                on_read(state, ctx, refused.map_or(Ok(reading), Err));
            }
        });
    match spawned {
        Ok(id) => {
            let what = format!("executor {} {op}", spec.name);
            ctx.after(deadline, move |_: &mut Blocking, ctx| {
                if child::signal_group(ctx, id, Signal::SIGKILL) {
                    timed_out.set(true);
                    log::warn!("{what} passed its {deadline:?} deadline; killed it");
                }
            });
            Ok(())
        }
        Err(e) => {
            let on_read = on_read.take();
            let why = format!("cannot start {}: {e}", spec.path.display());
            match on_read {
                Some(on_read) => Err((on_read, why)),
                None => Ok(()),
            }
        }
    }
}

/// Run `op` and hand its reading (or why none) to `on_read`, in every case.
pub(super) fn start(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    spec: &PluginSpec,
    op: Op,
    request: String,
    deadline: Duration,
    on_read: OnRead,
) {
    if let Err((on_read, why)) = run_op(ctx, spec, op, request, deadline, on_read) {
        on_read(state, ctx, Err(why));
    }
}

/// The plugin's stderr and its foreign stdout lines, to the log (escaped, clipped).
fn log_chatter(name: &str, op: Op, raw: &RawOutput, reading: &Reading) {
    if !raw.stderr.is_empty() {
        let text = String::from_utf8_lossy(&raw.stderr[..raw.stderr.len().min(MAX_STDERR_LOGGED)]);
        log::info!(
            "executor {name} {op} said on stderr: {}",
            crate::logsafe::clip(&text, 4000)
        );
    }
    for line in &reading.foreign {
        log::info!(
            "executor {name} {op} wrote: {}",
            crate::logsafe::clip(line, 200)
        );
    }
    if let Some(breach) = &reading.breach {
        log::error!("executor {name} {op}: protocol breach {breach}");
    }
}

/// main's `Plugin` call: `check_config`, `resolve` (and `ping`), `ping`, `kill`.
pub(super) fn call(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: PluginSpec,
    call: PluginCall,
) {
    let config = spec.config_value();
    match call {
        PluginCall::Check { request } => {
            let deadline = spec.deadline(Op::CheckConfig, 0);
            start(
                state,
                ctx,
                &spec,
                Op::CheckConfig,
                request,
                deadline,
                Box::new(move |state: &mut Blocking, _, read| {
                    let answer = read.and_then(|r| {
                        let result = r.outcome()?;
                        result.errors.clone().ok_or_else(|| {
                            "protocol breach bad_result: a check_config result without `errors`"
                                .to_string()
                        })
                    });
                    state.reply(id, Ok(BlockingReply::Checked(answer)));
                }),
            );
        }
        PluginCall::Resolve {
            target,
            target_type,
            ping_timeout_s,
        } => {
            let args = serde_json::json!({"target": target, "target_type": target_type});
            let deadline = spec.deadline(Op::Resolve, 0);
            let request =
                protocol::request_within(Op::Resolve, &spec.name, &config, args, deadline);
            let spec2 = spec.clone();
            start(
                state,
                ctx,
                &spec,
                Op::Resolve,
                request,
                deadline,
                Box::new(move |state: &mut Blocking, ctx, read| {
                    let machines = match read.and_then(|r| resolved(&r)) {
                        Ok(machines) => machines,
                        Err(why) => {
                            return state.reply(
                                id,
                                Err(RemoteError::Failed(format!(
                                    "executor {}: {why}",
                                    spec2.name
                                ))),
                            );
                        }
                    };
                    match ping_timeout_s {
                        Some(timeout_s) if !machines.is_empty() => {
                            ping(state, ctx, id, &spec2, machines, timeout_s)
                        }
                        _ => state.reply(
                            id,
                            Ok(BlockingReply::Resolved(Resolution {
                                no_match: machines.is_empty(),
                                live: machines,
                                unreachable: Vec::new(),
                                from_cache: true,
                            })),
                        ),
                    }
                }),
            );
        }
        PluginCall::Ping {
            machines,
            timeout_s,
        } => ping(state, ctx, id, &spec, machines, timeout_s),
        // Answered per machine, as a launch (`plugin_launch.rs`, dispatched by `mod.rs`).
        PluginCall::Kill { .. } => state.reply(
            id,
            Err(RemoteError::Failed(
                "a plugin's kill goes to plugin_launch".into(),
            )),
        ),
    }
}

/// The machines a `resolve` found, each checked (1 to 255 bytes, no control
/// characters), without duplicates.
fn resolved(reading: &Reading) -> Result<Vec<String>, String> {
    let result = reading.outcome()?;
    let Some(machines) = &result.machines else {
        return Err("protocol breach bad_result: a resolve result without `machines`".to_string());
    };
    let mut out: Vec<String> = Vec::with_capacity(machines.len());
    for m in machines {
        if m.is_empty() || m.len() > 255 || m.chars().any(char::is_control) {
            return Err(format!(
                "protocol breach bad_result: `{}` is not a machine name (1 to 255 bytes, no control characters)",
                crate::logsafe::clip(m, 80)
            ));
        }
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    out.sort();
    Ok(out)
}

/// `ping` `machines`: answered as a [`Resolution`] (a machine the plugin said nothing
/// of is unreachable).
fn ping(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    spec: &PluginSpec,
    machines: Vec<String>,
    timeout_s: u64,
) {
    let args = serde_json::json!({"machines": machines, "timeout_s": timeout_s});
    let deadline = spec.deadline(Op::Ping, timeout_s);
    let request =
        protocol::request_within(Op::Ping, &spec.name, &spec.config_value(), args, deadline);
    let name = spec.name.clone();
    start(
        state,
        ctx,
        spec,
        Op::Ping,
        request,
        deadline,
        Box::new(move |state: &mut Blocking, _, read| {
            let reading = match read {
                Ok(reading) => reading,
                Err(why) => {
                    return state.reply(
                        id,
                        Err(RemoteError::Failed(format!("executor {name}: {why}"))),
                    );
                }
            };
            let failure = reading.outcome().err();
            let mut res = Resolution::default();
            for line in &reading.progress {
                match line {
                    PluginLine::Reachable { machine } if machines.contains(machine) => {
                        res.live.push(machine.clone())
                    }
                    PluginLine::Unreachable { machine, reason } if machines.contains(machine) => {
                        res.unreachable
                            .push((machine.clone(), crate::logsafe::clip(reason, 400)))
                    }
                    _ => {}
                }
            }
            for m in &machines {
                if !res.live.contains(m) && !res.unreachable.iter().any(|(u, _)| u == m) {
                    let why = match &failure {
                        Some(f) => format!("executor {name}: {f}"),
                        None => format!("executor {name} said nothing about it"),
                    };
                    res.unreachable.push((m.clone(), why));
                }
            }
            res.live.sort();
            state.reply(id, Ok(BlockingReply::Resolved(res)));
        }),
    );
}
