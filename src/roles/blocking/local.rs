//! The `local` executor: wrappers started on this host, one per target name.
//!
//! A wrapper must outlive the daemon like a remote one does, so it is started outside
//! the daemon's process tree or session. Under systemd it gets a transient unit of its
//! own (`systemd-run`; the service's `KillMode=mixed` would otherwise kill it with the
//! service). Only root may create units in the system manager; the packaged service runs
//! as the `saltpeter` user, so it asks that user's own manager (`systemd-run --user`,
//! kept running by lingering, which the package enables). The launch command's pipes are
//! drained by the loop and its exit decides the target's launch outcome.
//!
//! Without a manager the wrapper is this process's child, started as
//! `saltpeter-wrapper --detach`: one process per target, no fork inside, and forked
//! without waiting for its exec (`evloop::fork_exec`), so 1,000 launches do not wait
//! 1,000 times in a row for a new process to be scheduled. It calls
//! `setsid` first thing (out of the daemon's process group and session, as
//! `--daemonize` would put it), and once its start-up checks passed prints one line and
//! closes its stdout and stderr: that is the launch's success; an exit before it is the
//! failure, with the wrapper's stderr as the error (`child::spawn_detached`). The loop
//! then keeps only its pidfd and reaps it when it exits; when the daemon stops first the
//! wrapper is inherited by init like a daemonized one. Each fork and exec counts when a
//! run starts 1,000 local targets: `--daemonize` forked twice more per target
//! (docs/benchmarks.md, fan-out).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::state::{Batch, Blocking, Launch};
use crate::evloop::Ctx;
use crate::evloop::child::{self, Start};
use crate::evloop::fork_exec::Exec;
use crate::ipc::rpc::CallId;
use crate::logsafe;
use crate::wire::link::{BlockingReply, LaunchTarget, MinionOutcome};
use crate::wire::records::RunId;
use crate::wire::wrapper::{ENV_MACHINE, ENV_RUN, ENV_TOKEN_FILE, ENV_URL};

/// A launch that has not returned within this is killed and reported as failed.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Launch commands running at once; the other targets wait their turn in [`Queue`]. Each
/// holds two pipes and a pidfd until it reports: 10,000 targets at once would be 30,000
/// descriptors and as many processes starting on a few cores.
const MAX_IN_FLIGHT: usize = 64;

/// Why a local wrapper was not started (told to main as the target's launch outcome).
#[derive(Debug, thiserror::Error)]
pub(super) enum LaunchError {
    #[error("could not create {dir}: {source}")]
    CreateTokenDir { dir: PathBuf, source: io::Error },
    #[error("could not restrict {dir}: {source}")]
    RestrictTokenDir { dir: PathBuf, source: io::Error },
    #[error("could not write a token file in {dir}: {source}")]
    TokenFile { dir: PathBuf, source: io::Error },
    #[error("could not start {wrapper}: {source}")]
    Start { wrapper: String, source: io::Error },
    /// The launch command, or the wrapper before it detached, exited with a failure;
    /// `stderr` is what it said, trimmed, escaped and clipped (`logsafe::clip`): it goes
    /// to the log twice (here and in main) and into an event.
    #[error("wrapper launch failed ({status}): {stderr}")]
    Failed { status: ExitStatus, stderr: String },
}

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

fn unit_name(run: RunId, machine: &str) -> String {
    let machine: String = machine
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("saltpeter-run-{run}-{machine}")
}

/// Starts a local wrapper in an environment of its own.
const ENV_PROGRAM: &str = "/usr/bin/env";

/// The variables a local wrapper starts with, and nothing else (it hands its own to the
/// command, which adds HOME/USER/LOGNAME of the job's `user` and the job's `env`): the
/// daemon's environment can hold anything its unit or its operator's shell had, and a
/// job of another user must not see it. `PATH`, `LANG`, the daemon user's HOME, USER and
/// LOGNAME (the job's when it names a `user`), `XDG_RUNTIME_DIR` (the wrapper's lock
/// directory when not root), the `SP_*` launch facts. Nothing secret: the token is in a
/// file.
fn wrapper_env(launch: &Launch, machine: &str, token_file: &Path) -> Vec<(String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut env = crate::executor::spec::base_env();
    if let Some(dir) = var("XDG_RUNTIME_DIR") {
        env.push(("XDG_RUNTIME_DIR".to_string(), dir));
    }
    env.extend([
        (ENV_URL.to_string(), launch.url.to_string()),
        (ENV_RUN.to_string(), launch.run.to_string()),
        (ENV_MACHINE.to_string(), machine.to_string()),
        (
            ENV_TOKEN_FILE.to_string(),
            token_file.to_string_lossy().into_owned(),
        ),
    ]);
    env
}

/// Create (or restrict) the directory `dir` of the wrapper logs: 0700, so the logs (the
/// wrapper creates them with its umask) are the daemon user's only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Create (or restrict) the private directory `dir` (0700) of the token files, once
/// per launch.
fn prepare_token_dir(dir: &Path) -> Result<(), LaunchError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| LaunchError::CreateTokenDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|source| {
        LaunchError::RestrictTokenDir {
            dir: dir.to_path_buf(),
            source,
        }
    })
}

/// Write the launch token of (run, machine) to a fresh 0600 file in the private
/// directory `dir` ([`prepare_token_dir`]); the wrapper reads and deletes it.
fn write_token_file(
    dir: &Path,
    run: RunId,
    machine: &str,
    token: &str,
) -> Result<PathBuf, LaunchError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |source| LaunchError::TokenFile {
        dir: dir.to_path_buf(),
        source,
    };
    let path = dir.join(format!("{}.token", unit_name(run, machine)));
    // A file left by an earlier launch of the same target is replaced, never reused.
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(fail)?;
    file.write_all(token.as_bytes()).map_err(fail)?;
    Ok(path)
}

/// How one wrapper is started: a launch command that exits (`systemd-run`), or the
/// wrapper itself as a detached child.
enum Starter {
    Exits(Command),
    Detached(Exec),
}

fn command_for(
    launch: &Launch,
    machine: &str,
    env: &[(String, String)],
    log_dir: &Path,
) -> Result<Starter, LaunchError> {
    let unit = unit_name(launch.run, machine);
    let log = log_dir.join(format!("{unit}.log"));
    if let Some(scope) = under_systemd().then(systemd_run_scope).flatten() {
        let mut cmd = Command::new("systemd-run");
        if let Some(runtime_dir) = scope {
            cmd.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
        }
        cmd.args(["--quiet", "--collect", "--no-block", "--unit"])
            .arg(unit);
        for (k, v) in env {
            cmd.arg(format!("--setenv={k}={v}"));
        }
        cmd.arg(&launch.wrapper).arg("--log").arg(log);
        Ok(Starter::Exits(cmd))
    } else {
        // `env -i`: `Exec` starts from this process's environment, which the wrapper (and
        // its command) must not inherit; `env` execs the wrapper in place (same pid).
        let mut args: Vec<std::ffi::OsString> = vec!["-i".into()];
        args.extend(env.iter().map(|(k, v)| format!("{k}={v}").into()));
        args.extend([
            launch.wrapper.clone().into(),
            "--detach".into(),
            "--log".into(),
            log.into_os_string(),
        ]);
        Exec::new(Path::new(ENV_PROGRAM), &args, &[])
            .map(Starter::Detached)
            .map_err(|source| LaunchError::Start {
                wrapper: launch.wrapper.clone(),
                source,
            })
    }
}

/// The launch outcome of a wrapper that exited (the launch command, or a detached
/// wrapper that never started): a failure removes the token nobody took.
fn exit_outcome(out: &child::ChildOutput, token_file: &Path) -> Result<(), LaunchError> {
    if out.status.success() {
        return Ok(());
    }
    // The wrapper did not take its token: do not leave it lying around.
    let _ = std::fs::remove_file(token_file);
    Err(LaunchError::Failed {
        status: out.status,
        stderr: logsafe::clip(
            String::from_utf8_lossy(&out.stderr).trim(),
            logsafe::REASON_MAX,
        ),
    })
}

pub(super) fn launch(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    launch: Launch,
    targets: Vec<LaunchTarget>,
) {
    if targets.is_empty() {
        state.reply(id, Ok(BlockingReply::Launched(Vec::new())));
        return;
    }
    if let Err(e) = private_dir(&state.wrapper_log_dir) {
        log::warn!("could not create {}: {e}", state.wrapper_log_dir.display());
    }
    state.batches.insert(
        id,
        Batch {
            remaining: targets.len(),
            run: launch.run,
            outcomes: Vec::new(),
        },
    );
    if let Err(e) = prepare_token_dir(&state.token_dir) {
        for target in targets {
            record(state, id, target.machine, Err(&e));
        }
        return;
    }
    let launch = Rc::new(launch);
    state.launches.waiting.extend(
        targets
            .into_iter()
            .map(|target| (id, Rc::clone(&launch), target)),
    );
    start_waiting(state, ctx);
}

/// Start waiting targets while fewer than [`MAX_IN_FLIGHT`] launches run.
fn start_waiting(state: &mut Blocking, ctx: &mut Ctx<Blocking>) {
    while state.launches.in_flight < MAX_IN_FLIGHT {
        let Some((id, launch, target)) = state.launches.waiting.pop_front() else {
            return;
        };
        start_one(state, ctx, id, &launch, target);
    }
}

/// A launch command ended or reported its wrapper started: its slot is free.
fn finished(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    machine: String,
    result: Result<(), LaunchError>,
) {
    state.launches.in_flight = state.launches.in_flight.saturating_sub(1);
    record(state, id, machine, result.as_ref().map(|_| ()));
    start_waiting(state, ctx);
}

fn start_one(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    id: CallId,
    launch: &Launch,
    target: LaunchTarget,
) {
    let machine = target.machine.clone();
    let token = target.token.map(|t| t.0).unwrap_or_default();
    let token_file = match write_token_file(&state.token_dir, launch.run, &machine, &token) {
        Ok(path) => path,
        Err(e) => {
            record(state, id, machine, Err(&e));
            return;
        }
    };
    let env = wrapper_env(launch, &machine, &token_file);
    let done_machine = machine.clone();
    let starter = match command_for(launch, &machine, &env, &state.wrapper_log_dir) {
        Ok(starter) => starter,
        Err(e) => {
            let _ = std::fs::remove_file(&token_file);
            record(state, id, machine, Err(&e));
            return;
        }
    };
    let spawned = match starter {
        Starter::Exits(cmd) => child::spawn(ctx, cmd, move |state: &mut Blocking, ctx, out| {
            let result = exit_outcome(&out, &token_file);
            finished(state, ctx, id, done_machine, result);
        }),
        Starter::Detached(exec) => {
            child::spawn_detached(ctx, &exec, move |state: &mut Blocking, ctx, start| {
                let result = match start {
                    Start::Running {
                        pid,
                        stdout,
                        stderr,
                    } => {
                        let name = logsafe::clip(&done_machine, logsafe::NAME_MAX);
                        log::debug!(
                            "the wrapper for {name} runs on its own (pid {pid}): {}",
                            logsafe::clip(String::from_utf8_lossy(&stdout).trim(), 400)
                        );
                        if !stderr.is_empty() {
                            log::warn!(
                                "the wrapper for {name} wrote before it detached: {}",
                                logsafe::clip(&String::from_utf8_lossy(&stderr), 400)
                            );
                        }
                        Ok(())
                    }
                    Start::Exited(out) => exit_outcome(&out, &token_file),
                };
                finished(state, ctx, id, done_machine, result);
            })
        }
    };
    match spawned {
        Ok(child_id) => {
            state.launches.in_flight += 1;
            ctx.after(LAUNCH_TIMEOUT, move |_: &mut Blocking, ctx| {
                if child::signal(ctx, child_id, Signal::SIGKILL) {
                    log::warn!("wrapper launch took over {LAUNCH_TIMEOUT:?}; killed it");
                }
            });
        }
        Err(source) => record(
            state,
            id,
            machine,
            Err(&LaunchError::Start {
                wrapper: launch.wrapper.clone(),
                source,
            }),
        ),
    }
}

/// One target's launch outcome; main gets a failure as its message.
pub(super) fn record(
    state: &mut Blocking,
    id: CallId,
    machine: String,
    result: Result<(), &LaunchError>,
) {
    if let Err(e) = &result {
        log::warn!(
            "launching the wrapper for {} failed: {e}",
            logsafe::clip(&machine, logsafe::NAME_MAX)
        );
    }
    let result = result.map_err(|e| e.to_string());
    let Some(batch) = state.batches.get_mut(&id) else {
        return;
    };
    batch.outcomes.push((
        batch.run,
        MinionOutcome {
            machine,
            result,
            silent: None,
            unreachable: None,
            server: None,
        },
    ));
    batch.remaining -= 1;
    if batch.remaining == 0
        && let Some(batch) = state.batches.remove(&id)
    {
        state.reply(id, Ok(BlockingReply::Launched(batch.outcomes)));
    }
}
