//! The salt bridge: one long-lived Python process (`bridge.py`, run with the
//! interpreter of `salt_bin`) that publishes with Salt's own `LocalClient`.
//!
//! A `salt` command line costs about half a CPU-second before it publishes anything
//! (Python starts and imports Salt); the bridge pays that once, and a firing then costs a
//! publish: milliseconds. Requests go out as JSON lines on its stdin, answers come back
//! on its stdout as they arrive (`{"id", "line"}` per minion, `{"id", "done"}`), and the
//! lines of one request are handed to the same parsing as the CLI's output, so both paths
//! mean the same thing. Both pipes are non-blocking and registered in blocking's loop:
//! nothing here waits. Every request has a deadline. If the bridge cannot start (no
//! Python interpreter behind `salt_bin`, Salt not importable) or dies right after
//! starting, the salt command line is used instead for a while, with a warning: the
//! bridge makes salt cheap, it is never what makes salt work.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mio::Interest;
use mio::event::Event;
use mio::unix::pipe::{Receiver, Sender};

use super::super::state::{
    Blocking, Bridge, BridgeKey, BridgeState as State, Invocation, Outcome, Pending,
};
use super::cli;
use crate::evloop::timers::TimerId;
use crate::evloop::{Ctx, Flow, Forward};
use crate::logsafe;

/// The script, embedded in the binary and written next to the daemon's state.
const SCRIPT: &str = include_str!("bridge.py");
/// How long the bridge may take to import Salt and say it is ready.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// After the bridge failed, how long the command line is used instead.
const FALLBACK_PERIOD: Duration = Duration::from_secs(300);
/// Longest answer line taken from the bridge (one minion's return).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Why the bridge could not start (the command line is then used for a while).
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("{salt_bin} is not a Python script")]
    NotPython { salt_bin: String },
    #[error("could not write {path}: {source}")]
    Script { path: PathBuf, source: io::Error },
    #[error("could not open {path}: {source}")]
    Log { path: PathBuf, source: io::Error },
    #[error("could not run {command}: {source}")]
    Run { command: String, source: io::Error },
    #[error("no pipes to the salt bridge")]
    NoPipes,
    #[error("could not watch the salt bridge's pipes: {0}")]
    Watch(io::Error),
}

/// The ready line of a simulated fleet's stand-in bridge, without the environment that
/// allows it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "it is a simulated fleet's stand-in bridge, which reaches no real minion; refused (set \
     {SIMULATED_FLEET_ENV}=1 only to benchmark or test the daemon)"
)]
struct SimulatedRefused;

/// The Python interpreter of a `salt` script: its `#!` line (`/path/python3`, or
/// `/usr/bin/env python3`). `None`: not a Python script (the command line is used).
pub(crate) fn interpreter_of(salt_bin: &Path) -> Option<Vec<String>> {
    let path = if salt_bin.components().count() > 1 {
        salt_bin.to_path_buf()
    } else {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|dir| dir.join(salt_bin))
            .find(|p| p.is_file())?
    };
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let first = std::str::from_utf8(&head[..n]).ok()?.lines().next()?;
    let words: Vec<String> = first
        .strip_prefix("#!")?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let python = |w: &String| {
        Path::new(w)
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with("python"))
    };
    match words.as_slice() {
        [interp, ..] if python(interp) => Some(vec![interp.clone()]),
        [env, interp, ..] if env.ends_with("/env") && python(interp) => {
            Some(vec![env.clone(), interp.clone()])
        }
        _ => None,
    }
}

/// Send `request` (its `id` is set here) through the bridge for `key`, starting it if
/// needed. `Err` hands the invocation back: run it on the command line.
pub(crate) fn submit(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    key: &BridgeKey,
    workers: u32,
    mut request: serde_json::Value,
    deadline: Duration,
    on_done: Invocation,
) -> Result<(), Invocation> {
    match &state.salt.bridge {
        State::Running(b) if b.key == *key => {}
        State::Fallback { key: k, until } if k == key && Instant::now() < *until => {
            return Err(on_done);
        }
        _ => {
            stop(state, ctx, "its salt settings changed");
            match start(state, ctx, key, workers) {
                Ok(bridge) => state.salt.bridge = State::Running(Box::new(bridge)),
                Err(why) => {
                    log::warn!(
                        "the salt bridge could not start ({why}); using the salt command \
                         line for {} min",
                        FALLBACK_PERIOD.as_secs() / 60
                    );
                    state.salt.bridge = State::Fallback {
                        key: key.clone(),
                        until: Instant::now() + FALLBACK_PERIOD,
                    };
                    return Err(on_done);
                }
            }
        }
    }
    let State::Running(bridge) = &mut state.salt.bridge else {
        return Err(on_done);
    };
    let id = bridge.next_id;
    bridge.next_id += 1;
    request["id"] = serde_json::json!(id);
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    bridge.to_write.extend_from_slice(&line);
    let timer = ctx.after(deadline, move |state: &mut Blocking, ctx| {
        finish(
            state,
            ctx,
            id,
            Outcome::Failed(format!(
                "salt did not answer within {deadline:?} (through the salt bridge)"
            )),
        );
    });
    bridge.pending.insert(
        id,
        Pending {
            lines: String::new(),
            fallback: on_done,
            deadline: timer,
        },
    );
    flush(state, ctx);
    Ok(())
}

fn start(
    state: &mut Blocking,
    ctx: &mut Ctx<Blocking>,
    key: &BridgeKey,
    workers: u32,
) -> Result<Bridge, StartError> {
    let (salt_bin, config_dir) = key;
    let interp = interpreter_of(Path::new(salt_bin)).ok_or_else(|| StartError::NotPython {
        salt_bin: salt_bin.clone(),
    })?;
    let script = state.state_dir.join("salt-bridge.py");
    if let Err(source) = write_if_changed(&script, SCRIPT) {
        return Err(StartError::Script {
            path: script,
            source,
        });
    }
    let master = crate::salt_master::file(config_dir.as_deref());
    let log_path = state.state_dir.join("salt-bridge.log");
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
    {
        Ok(log) => log,
        Err(source) => {
            return Err(StartError::Log {
                path: log_path,
                source,
            });
        }
    };
    let mut cmd = Command::new(&interp[0]);
    cmd.args(&interp[1..])
        .arg(&script)
        .arg(&master)
        .arg(workers.max(1).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGTERM) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| StartError::Run {
        command: interp.join(" "),
        source,
    })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(StartError::NoPipes);
    };
    let mut stdin = Sender::from(stdin);
    let mut stdout = Receiver::from(stdout);
    let registered = stdin
        .set_nonblocking(true)
        .and_then(|()| stdout.set_nonblocking(true))
        .and_then(|()| {
            let w = ctx.register(&mut stdin, Interest::WRITABLE, Forward::new((), on_stdin))?;
            let r = ctx.register(&mut stdout, Interest::READABLE, Forward::new((), on_stdout))?;
            Ok((w, r))
        });
    let (stdin_token, stdout_token) = match registered {
        Ok(tokens) => tokens,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError::Watch(e));
        }
    };
    log::info!(
        "salt bridge started (pid {}, {} workers, {}); its log: {}",
        child.id(),
        workers.max(1),
        master.display(),
        log_path.display()
    );
    // A bridge that never becomes ready is stopped; its requests fail and the command
    // line takes over.
    let pid = child.id();
    ctx.after(READY_DEADLINE, move |state: &mut Blocking, ctx| {
        if let State::Running(b) = &state.salt.bridge
            && b.child.id() == pid
            && !b.saw_ready
        {
            died(state, ctx, "it did not become ready in time");
        }
    });
    Ok(Bridge {
        key: key.clone(),
        child,
        saw_ready: false,
        stdin,
        stdout,
        stdin_token,
        stdout_token,
        to_write: Vec::new(),
        read_buf: Vec::new(),
        pending: HashMap::new(),
        next_id: 1,
    })
}

fn write_if_changed(path: &Path, text: &str) -> io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let tmp = path.with_extension("py.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn on_stdin(state: &mut Blocking, ctx: &mut Ctx<Blocking>, _: (), _event: &Event) -> Flow {
    flush(state, ctx);
    Flow::Continue
}

/// Write what is queued for the bridge, as far as its pipe takes it.
fn flush(state: &mut Blocking, ctx: &mut Ctx<Blocking>) {
    let State::Running(b) = &mut state.salt.bridge else {
        return;
    };
    // Nothing goes to a bridge before its ready line is accepted: one refused (a
    // simulated fleet) or dead before it then has nothing of the requests, which go to
    // the command line instead, once.
    if !b.saw_ready {
        return;
    }
    while !b.to_write.is_empty() {
        match b.stdin.write(&b.to_write) {
            Ok(0) => break,
            Ok(n) => {
                b.to_write.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let why = format!("writing to it failed: {e}");
                died(state, ctx, &why);
                return;
            }
        }
    }
}

fn on_stdout(state: &mut Blocking, ctx: &mut Ctx<Blocking>, _: (), _event: &Event) -> Flow {
    let mut lines = Vec::new();
    let mut ended = None;
    {
        let State::Running(b) = &mut state.salt.bridge else {
            return Flow::Continue;
        };
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match b.stdout.read(&mut chunk) {
                Ok(0) => {
                    ended = Some("it exited".to_string());
                    break;
                }
                Ok(n) => b.read_buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    ended = Some(format!("reading from it failed: {e}"));
                    break;
                }
            }
        }
        let mut start = 0;
        while let Some(end) = b.read_buf[start..].iter().position(|c| *c == b'\n') {
            lines.push(b.read_buf[start..start + end].to_vec());
            start += end + 1;
        }
        b.read_buf.drain(..start);
        if b.read_buf.len() > MAX_LINE {
            ended = Some(format!("it sent a line over {MAX_LINE} bytes"));
        }
    }
    for line in lines {
        answer(state, ctx, &line);
    }
    if let Some(why) = ended {
        died(state, ctx, &why);
    }
    Flow::Continue
}

/// One answer line from the bridge.
fn answer(state: &mut Blocking, ctx: &mut Ctx<Blocking>, line: &[u8]) {
    let Ok(msg) = serde_json::from_slice::<serde_json::Value>(line) else {
        log::warn!(
            "the salt bridge sent a line that is not JSON: {}",
            logsafe::clip(&String::from_utf8_lossy(&line[..line.len().min(800)]), 200)
        );
        return;
    };
    if msg.get("ready").is_some() {
        let simulated_allowed = std::env::var_os(SIMULATED_FLEET_ENV).is_some_and(|v| v == "1");
        if let Err(why) = accept_ready(&msg, simulated_allowed) {
            died(state, ctx, &why.to_string());
            return;
        }
        let State::Running(b) = &mut state.salt.bridge else {
            return;
        };
        b.saw_ready = true;
        log::info!(
            "salt bridge ready (salt {})",
            msg["salt"].as_str().unwrap_or("?")
        );
        flush(state, ctx);
        return;
    }
    let State::Running(b) = &mut state.salt.bridge else {
        return;
    };
    if let Some(fatal) = msg.get("fatal") {
        log::error!(
            "the salt bridge failed: {}",
            logsafe::clip(&fatal.to_string(), logsafe::REASON_MAX)
        );
        return;
    }
    let Some(id) = msg.get("id").and_then(serde_json::Value::as_u64) else {
        log::warn!(
            "the salt bridge answered without a request id: {}",
            logsafe::clip(&msg.to_string(), logsafe::REASON_MAX)
        );
        return;
    };
    if let Some(value) = msg.get("line") {
        if let Some(p) = b.pending.get_mut(&id) {
            // As the command line prints it: a minion's value as a JSON object, a
            // message ("No minions matched the target.") as plain text.
            match value {
                serde_json::Value::String(text) => p.lines.push_str(text),
                other => p.lines.push_str(&other.to_string()),
            }
            p.lines.push('\n');
        }
    } else if msg.get("done").is_some() {
        let stdout = b
            .pending
            .get_mut(&id)
            .map(|p| std::mem::take(&mut p.lines))
            .unwrap_or_default();
        finish(
            state,
            ctx,
            id,
            Outcome::Finished {
                code: Some(0),
                stdout,
                stderr: String::new(),
                bridge: true,
            },
        );
    } else if let Some(error) = msg.get("error") {
        let why = format!(
            "salt (through the salt bridge) failed: {}",
            logsafe::clip(&error.to_string(), logsafe::REASON_MAX)
        );
        finish(state, ctx, id, Outcome::Failed(why));
    }
}

/// The environment variable that lets the daemon use a simulated fleet's stand-in bridge
/// (the benchmarks' and tests' `simfleet`): `1`, and nothing else.
pub(crate) const SIMULATED_FLEET_ENV: &str = "SALTPETER_SIMULATED_FLEET";

/// The bridge's ready line. A bridge that says it is simulated reaches no real minion:
/// it is refused (as a bridge that failed to start: the command line takes over) unless
/// the daemon was started with `SALTPETER_SIMULATED_FLEET=1`, and then only with a warning.
fn accept_ready(
    ready: &serde_json::Value,
    simulated_allowed: bool,
) -> Result<(), SimulatedRefused> {
    if ready.get("simulated").and_then(serde_json::Value::as_bool) != Some(true) {
        return Ok(());
    }
    if !simulated_allowed {
        return Err(SimulatedRefused);
    }
    log::warn!(
        "the salt bridge is a SIMULATED fleet ({SIMULATED_FLEET_ENV}=1): no real minion is \
         reached"
    );
    Ok(())
}

/// Request `id` is answered (or failed): its callback runs once.
fn finish(state: &mut Blocking, ctx: &mut Ctx<Blocking>, id: u64, outcome: Outcome) {
    let State::Running(b) = &mut state.salt.bridge else {
        return;
    };
    let Some(p) = b.pending.remove(&id) else {
        return; // answered after its deadline: already failed
    };
    ctx.cancel(p.deadline);
    (p.fallback.on_done)(state, ctx, outcome);
}

/// The bridge is gone. If it never became ready nothing of its requests was published:
/// they go to the command line, which is used for a while. Otherwise they fail (a
/// launch may have been published: it is not repeated), and the next call starts a new
/// bridge.
fn died(state: &mut Blocking, ctx: &mut Ctx<Blocking>, why: &str) {
    let (key, ready) = match &state.salt.bridge {
        State::Running(b) => (b.key.clone(), b.saw_ready),
        _ => return,
    };
    log::error!("the salt bridge stopped working: {why}");
    let pending = stop(state, ctx, why);
    if !ready {
        log::warn!(
            "using the salt command line for {} min",
            FALLBACK_PERIOD.as_secs() / 60
        );
        state.salt.bridge = State::Fallback {
            key,
            until: Instant::now() + FALLBACK_PERIOD,
        };
        let mut again = Vec::new();
        for (fallback, timer) in pending {
            ctx.cancel(timer);
            again.push(fallback);
        }
        cli::run_on_cli(state, ctx, again);
        return;
    }
    for (fallback, timer) in pending {
        ctx.cancel(timer);
        (fallback.on_done)(
            state,
            ctx,
            Outcome::Failed(format!("the salt bridge stopped working: {why}")),
        );
    }
}

/// Stop the bridge (if one runs) and hand back its unanswered requests.
fn stop(state: &mut Blocking, ctx: &mut Ctx<Blocking>, why: &str) -> Vec<(Invocation, TimerId)> {
    let State::Running(mut b) = std::mem::take(&mut state.salt.bridge) else {
        return Vec::new();
    };
    log::info!("stopping the salt bridge (pid {}): {why}", b.child.id());
    ctx.remove(b.stdin_token);
    ctx.remove(b.stdout_token);
    let _ = b.child.kill();
    let _ = b.child.wait();
    b.pending
        .drain()
        .map(|(_, p)| (p.fallback, p.deadline))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_bridge_is_refused_unless_the_environment_allows_it() {
        let real = serde_json::json!({"ready": true, "salt": "3008.4"});
        assert_eq!(accept_ready(&real, false), Ok(()));
        assert_eq!(accept_ready(&real, true), Ok(()));
        let sim = serde_json::json!({"ready": true, "salt": "simulated", "simulated": true});
        let why = accept_ready(&sim, false).expect_err("refused").to_string();
        assert!(
            why.contains("simulated") && why.contains(SIMULATED_FLEET_ENV),
            "{why}"
        );
        assert_eq!(
            why,
            "it is a simulated fleet's stand-in bridge, which reaches no real minion; refused \
             (set SALTPETER_SIMULATED_FLEET=1 only to benchmark or test the daemon)"
        );
        assert_eq!(accept_ready(&sim, true), Ok(()));
    }

    #[test]
    fn the_interpreter_comes_from_the_salt_scripts_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let venv = write("salt", "#!/opt/venv/bin/python3.11\nimport salt\n");
        assert_eq!(
            interpreter_of(&venv),
            Some(vec!["/opt/venv/bin/python3.11".to_string()])
        );
        let env = write("salt-env", "#!/usr/bin/env python3\n");
        assert_eq!(
            interpreter_of(&env),
            Some(vec!["/usr/bin/env".to_string(), "python3".to_string()])
        );
        let shell = write(
            "salt-sh",
            "#!/bin/sh\nexec /opt/saltstack/salt/run \"$@\"\n",
        );
        assert_eq!(
            interpreter_of(&shell),
            None,
            "not Python: the command line is used"
        );
        let binary = write("salt-bin", "\x7fELF....");
        assert_eq!(interpreter_of(&binary), None);
        assert_eq!(interpreter_of(&dir.path().join("missing")), None);
    }
}
